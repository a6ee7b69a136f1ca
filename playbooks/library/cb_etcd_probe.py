#!/usr/bin/python
"""Report a control plane's etcd as one JSON document, returned under `cb_etcd`.

How etcd runs there (kubeadm's static pod, its manifest in the manifests directory or moved aside by a restore;
or a systemd unit), its configuration (the manifest's flags, or the unit's ETCD_* environment and DAEMON_ARGS),
the etcdctl and etcdutl it can use, whether it runs, and what the local member answers (status, members,
health, how many keys), the CA's fingerprint (the cluster's identity), its data directory, the free space there
and where snapshots go, the snapshots kept on the node, and the snapshot timer. provision/nodes/etcd/report.py
validates the document (its `schema` must be the one that model reads) and Python judges it. It only reads:
changed is always false.
"""
from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cb_etcd import REPORT_KEY, probe

DOCUMENTATION = r"""
module: cb_etcd_probe
short_description: Report a control plane's etcd as one JSON document (cb_etcd)
options:
  manifests_dir:
    description: The kubelet's static pod directory.
    type: path
    required: true
  stopped_dir:
    description: Where a restore moves the control plane's static pod manifests while it works.
    type: path
    required: true
  unit:
    description: The systemd unit of an etcd not run as a static pod.
    type: str
    required: true
  tools_dir:
    description: Where etcdctl and etcdutl copied out of the etcd image live, one directory per version.
    type: path
    required: true
  snapshot_dir:
    description: Where the node keeps its snapshots.
    type: path
    required: true
  timer_unit:
    description: The snapshot timer's unit.
    type: str
    required: true
  ask:
    description: Ask the local member (status, members, health, keys) when it runs.
    type: bool
    default: true
  nodes:
    description: Also read the names of the Kubernetes Node objects the member's store holds.
    type: bool
    default: false
"""


def main() -> None:
    module = AnsibleModule(argument_spec={
        "manifests_dir": {"type": "path", "required": True},
        "stopped_dir": {"type": "path", "required": True},
        "unit": {"type": "str", "required": True},
        "tools_dir": {"type": "path", "required": True},
        "snapshot_dir": {"type": "path", "required": True},
        "timer_unit": {"type": "str", "required": True},
        "ask": {"type": "bool", "default": True},
        "nodes": {"type": "bool", "default": False},
    }, supports_check_mode=True)
    module.exit_json(changed=False, **{REPORT_KEY: probe(module.params)})


if __name__ == "__main__":
    main()
