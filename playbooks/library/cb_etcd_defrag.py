#!/usr/bin/python
"""Defragment etcd's members one at a time, the leader last, through this member's etcdctl; where the NOSPACE
alarm is raised, compact first and disarm the alarm once every database is under the quota again
(module_utils/cb_etcd.py: defragment). Returns each member's database size before and after under
`cb_etcd_defrag`."""
from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cb_etcd import EtcdError, defragment

DOCUMENTATION = r"""
module: cb_etcd_defrag
short_description: Defragment etcd's members in order, the leader last, and disarm NOSPACE once there is room
options:
  etcdctl:
    description: etcdctl with this member's certificates (its --endpoints is replaced by each member's).
    type: list
    elements: str
    required: true
  endpoints:
    description: Each member's client URL, in the order they are defragmented (the leader last).
    type: list
    elements: str
    required: true
  quota_bytes:
    description: The database quota (--quota-backend-bytes) the alarm is disarmed under.
    type: int
    required: true
  timeout_s:
    description: How long one member's defragmentation may take.
    type: int
    default: 300
"""

RESULT_KEY = "cb_etcd_defrag"


def main() -> None:
    module = AnsibleModule(argument_spec={
        "etcdctl": {"type": "list", "elements": "str", "required": True},
        "endpoints": {"type": "list", "elements": "str", "required": True},
        "quota_bytes": {"type": "int", "required": True},
        "timeout_s": {"type": "int", "default": 300},
    })
    try:
        result = defragment(dict(module.params))
    except (EtcdError, OSError, KeyError, ValueError) as exc:
        module.fail_json(msg=f"etcd defrag failed: {exc}")
    module.exit_json(changed=True, **{RESULT_KEY: result})


if __name__ == "__main__":
    main()
