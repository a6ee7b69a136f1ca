"""Filters for the etcd_members role: etcdctl's JSON (`member list -w json`, `endpoint health -w json`) read into
what the tasks decide on. Output that is not etcdctl's JSON (an error, a pod not yet running) reads as nothing
found, so the tasks wait and retry instead of failing on a parse error."""
from __future__ import annotations

import json
from typing import Any


def _json(text: Any) -> Any:
    try:
        return json.loads(str(text))
    except ValueError:
        return None


def cb_etcd_members(text: Any) -> list[dict[str, str]]:
    """`member list -w json` -> [{"id": hex id as `member remove` takes it, "name": ...}]; [] when unreadable."""
    data = _json(text)
    members = data.get("members") if isinstance(data, dict) else None
    if not isinstance(members, list):
        return []
    return [{"id": f"{int(m['ID']):x}", "name": str(m.get("name", ""))}
            for m in members if isinstance(m, dict) and "ID" in m]


def cb_etcd_unhealthy(text: Any) -> list[str]:
    """`endpoint health --cluster -w json` -> the endpoints that are not healthy (with their error); one entry
    saying so when the output is not etcdctl's."""
    data = _json(text)
    if not isinstance(data, list) or not data:
        return ["etcdctl gave no health report"]
    return [f"{e.get('endpoint', '?')}: {e.get('error', 'unhealthy')}" for e in data
            if not (isinstance(e, dict) and e.get("health") is True)]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"cb_etcd_members": cb_etcd_members, "cb_etcd_unhealthy": cb_etcd_unhealthy}
