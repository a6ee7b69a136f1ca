#!/usr/bin/python
"""Take a snapshot of the local etcd member into the node's snapshot directory, check it, record it and keep the
last N (module_utils/cb_etcd.py: take_snapshot, the same code the snapshot timer runs). Returns the record under
`cb_etcd_snapshot`: its name and path, the size and SHA-256 of the file, what `snapshot status` read from it
(revision, keys, hash, size), the cluster's identity (the etcd CA's SHA-256, etcd's cluster id), the member it was
taken from and the members there were, and how many keys the store held at that revision."""
from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cb_etcd import EtcdError, take_snapshot

DOCUMENTATION = r"""
module: cb_etcd_snapshot
short_description: Take, check and record an etcd snapshot on the node, keeping the last N (cb_etcd_snapshot)
options:
  etcdctl:
    description: The etcdctl to save with.
    type: path
    required: true
  client:
    description: Where the local member answers and with which certificates (endpoint, cacert, cert, key).
    type: dict
    required: true
  status_argv:
    description: The command that reads a snapshot's status (etcdutl snapshot status, or etcdctl's before 3.5).
    type: list
    elements: str
    required: true
  directory:
    description: The node's snapshot directory.
    type: path
    required: true
  cluster:
    description: The cluster's name, the snapshot's name starts with it.
    type: str
    required: true
  node:
    description: The node's name (recorded).
    type: str
    required: true
  keep:
    description: How many snapshots of this cluster the directory keeps.
    type: int
    required: true
"""

RESULT_KEY = "cb_etcd_snapshot"


def main() -> None:
    module = AnsibleModule(argument_spec={
        "etcdctl": {"type": "path", "required": True},
        "client": {"type": "dict", "required": True},
        "status_argv": {"type": "list", "elements": "str", "required": True},
        "directory": {"type": "path", "required": True},
        "cluster": {"type": "str", "required": True},
        "node": {"type": "str", "required": True},
        "keep": {"type": "int", "required": True},
    })
    try:
        record = take_snapshot(dict(module.params))
    except (EtcdError, OSError) as exc:
        module.fail_json(msg=f"etcd snapshot on {module.params['node']} failed: {exc}")
    module.exit_json(changed=True, **{RESULT_KEY: record})


if __name__ == "__main__":
    main()
