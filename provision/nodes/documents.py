"""The documents our modules return under a key of their own (cb_etcd_report, cb_kube_versions, cb_certs, ...), read
from ansible-runner's saved events: whatever a task was called, the result that carries the key is the document."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def module_documents(run_dir: Path, key: str) -> dict[str, Any]:
    """Each host's last document under `key` in a playbook run's saved events (ansible-runner's job_events, in
    the order they were written): what a module reported, whatever the task's title."""
    found: dict[str, tuple[int, Any]] = {}
    for path in run_dir.glob("artifacts/*/job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        document = (data.get("res") or {}).get(key)
        if event.get("event") != "runner_on_ok" or document is None:
            continue
        counter = int(event.get("counter", 0))
        host = data["host"]
        if host not in found or found[host][0] < counter:
            found[host] = (counter, document)
    return {host: document for host, (_, document) in found.items()}
