"""etcd on the control planes, from this machine: what the probe reports (report.py), snapshots and their checks
(snapshot.py), the restore's plan and refusals (restore.py), and replacing a member (members.py). Pure judges over
the reports the etcd roles send; the phases (provision/phases/etcd_*.py) run the playbooks."""
