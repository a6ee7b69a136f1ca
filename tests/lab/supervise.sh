#!/bin/bash
# Keep one lab node running: join the node's own cgroups, then run systemd-nspawn again whenever the
# container asks for a reboot (nspawn exits 133), so that `reboot` and Ansible's reboot module work.
# usage: supervise.sh NODE_DIR systemd-nspawn ARGS...      (started by tests/lab/lab.py)
set -u
node_dir=$1
shift
for cgroup in $(cat "$node_dir/cgroups"); do echo $$ > "$cgroup/cgroup.procs"; done
while :; do
  "$@" &
  echo $! > "$node_dir/nspawn.pid"
  wait $!
  rc=$?
  echo "nspawn exited rc=$rc $(date +%T)" >> "$node_dir/supervisor.log"
  [ $rc -eq 133 ] && [ ! -e "$node_dir/stop" ] || break
done
