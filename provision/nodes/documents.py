"""The documents our modules return under a key of their own (cb_kube_versions, cb_certs, ...), read from
ansible-runner's saved events: whatever a task was called, the result that carries the key is the document."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _counter(path: Path) -> int:
    # ansible-runner names each event file <counter>-<uuid>.json, the counter in the order the events came.
    head = path.name.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def module_documents(run_dir: Path, key: str) -> dict[str, Any]:
    """Inventory host -> the document the last successful task on that host returned under `key`."""
    found: dict[str, Any] = {}
    for path in sorted(run_dir.glob("artifacts/*/job_events/*.json"), key=_counter):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        document = (data.get("res") or {}).get(key)
        if event.get("event") == "runner_on_ok" and document is not None and "host" in data:
            found[data["host"]] = document
    return found
