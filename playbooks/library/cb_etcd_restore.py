#!/usr/bin/python
"""Restore an etcd snapshot into this member's data directory (module_utils/cb_etcd.py: restore_data_dir): into a
new directory first, marked as this restore's, the one in place moved aside under a fresh name
(<data dir>.cb-before-<restore id>, .2, ...), re-runnable after a kill at any point; nothing etcd ever served is
deleted. etcd must be stopped; the caller checks that before."""
from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cb_etcd import EtcdError, restore_data_dir

DOCUMENTATION = r"""
module: cb_etcd_restore
short_description: Restore an etcd snapshot into the member's data directory, keeping the old one aside
options:
  restore_argv:
    description: The command that restores (etcdutl snapshot restore, or etcdctl's before 3.5).
    type: list
    elements: str
    required: true
  snapshot:
    description: The snapshot file on the node.
    type: path
    required: true
  sha256:
    description: The snapshot's SHA-256 (recorded in the restored directory's marker).
    type: str
    required: true
  data_dir:
    description: etcd's data directory.
    type: path
    required: true
  name:
    description: The member's name.
    type: str
    required: true
  initial_cluster:
    description: Every member's name=peer URL.
    type: str
    required: true
  peer_urls:
    description: This member's peer URLs.
    type: str
    required: true
  token:
    description: The restored cluster's new token.
    type: str
    required: true
  restore_id:
    description: Names the backup and work directories; the same in a re-run of the same restore.
    type: str
    required: true
  bump_revision:
    description: Raise the revision by this much and mark it compacted (0, or where etcdutl cannot, none).
    type: int
    default: 0
  uid:
    description: The owner of the restored directory (etcd's user).
    type: int
    default: 0
  gid:
    description: Its group.
    type: int
    default: 0
"""

RESULT_KEY = "cb_etcd_restore"


def main() -> None:
    module = AnsibleModule(argument_spec={
        "restore_argv": {"type": "list", "elements": "str", "required": True},
        "snapshot": {"type": "path", "required": True},
        "sha256": {"type": "str", "required": True},
        "data_dir": {"type": "path", "required": True},
        "name": {"type": "str", "required": True},
        "initial_cluster": {"type": "str", "required": True},
        "peer_urls": {"type": "str", "required": True},
        "token": {"type": "str", "required": True},
        "restore_id": {"type": "str", "required": True},
        "bump_revision": {"type": "int", "default": 0},
        "uid": {"type": "int", "default": 0},
        "gid": {"type": "int", "default": 0},
    })
    try:
        result = restore_data_dir(dict(module.params))
    except (EtcdError, OSError) as exc:
        module.fail_json(msg=f"etcd restore on member {module.params['name']} failed: {exc}")
    module.exit_json(changed=bool(result["restored"]), **{RESULT_KEY: result})


if __name__ == "__main__":
    main()
