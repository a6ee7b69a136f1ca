#!/usr/bin/python
"""Read a snapshot file on the node as a restore checks it before using it: its size, its SHA-256 and what
`snapshot status` reads from it (revision, keys, hash, database size), returned under `cb_etcd_snapshot_status`
(module_utils/cb_etcd.py: file_status). Python compares them with the snapshot's record. Only reads."""
from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cb_etcd import EtcdError, file_status

DOCUMENTATION = r"""
module: cb_etcd_snapshot_status
short_description: Size, SHA-256 and `snapshot status` of a snapshot file on the node (cb_etcd_snapshot_status)
options:
  status_argv:
    description: The command that reads a snapshot's status (etcdutl snapshot status, or etcdctl's before 3.6).
    type: list
    elements: str
    required: true
  path:
    description: The snapshot file.
    type: path
    required: true
"""

RESULT_KEY = "cb_etcd_snapshot_status"


def main() -> None:
    module = AnsibleModule(argument_spec={
        "status_argv": {"type": "list", "elements": "str", "required": True},
        "path": {"type": "path", "required": True},
    }, supports_check_mode=True)
    try:
        found = file_status(module.params["status_argv"], module.params["path"])
    except (EtcdError, OSError) as exc:
        module.fail_json(msg=f"reading the snapshot {module.params['path']} failed: {exc}")
    module.exit_json(changed=False, **{RESULT_KEY: found})


if __name__ == "__main__":
    main()
