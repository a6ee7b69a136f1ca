"""Record the ansible-runner events of a real run for tests/test_tally.py: tests/playbooks/local_probe.yml on two
local-connection hosts and one that no SSH server answers for, through the real driver (`run_playbook`).

The saved events are trimmed to what the tally reads (no run paths, no uuids, no display text); the secret the
playbook handles is a placeholder, and no_log hides it anyway. Re-record after an ansible-runner upgrade:

    .venv/bin/python -m tests.support.record_runner_events
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from provision.inputs.inventory import load_inventory
from provision.inputs.settings import Settings
from provision.nodes.runner import run_playbook
from tests.support.paths import REPO_ROOT

RECORDING = REPO_ROOT / "tests" / "data" / "runner" / "local_probe.json"
PLAYBOOK = REPO_ROOT / "tests" / "playbooks" / "local_probe.yml"
PLACEHOLDER_SECRET = "placeholder-secret"
# What the tally reads of an event's data, and of a module's result within it.
EVENT_KEYS = ("play", "task", "host", "ignore_errors", "duration", "ok", "changed", "failures", "dark", "skipped",
              "rescued", "ignored")
RESULT_KEYS = ("changed", "censored", "msg", "stderr", "reason", "module_stderr", "stdout", "unreachable",
               "skip_reason", "rc")


def trim(event: dict[str, Any]) -> dict[str, Any]:
    data = {key: value for key, value in event.get("event_data", {}).items() if key in EVENT_KEYS}
    if "duration" in data:
        data["duration"] = round(data["duration"], 2)
    res = event.get("event_data", {}).get("res")
    if isinstance(res, dict):
        data["res"] = {key: value for key, value in res.items() if key in RESULT_KEYS}
    return {"event": event["event"], "event_data": data}


def record(state_dir: Path) -> list[dict[str, Any]]:
    inventory = state_dir / "hosts.ini"
    inventory.write_text(
        "[control_plane]\ncp1 ansible_host=127.0.0.11\n"
        "[workers]\nw1 ansible_host=127.0.0.12\n"
        "w2 ansible_host=127.0.0.1 ansible_port=1 ansible_connection=ssh\n"
        f"[all:vars]\nansible_connection=local\nansible_python_interpreter={sys.executable}\n")
    result = run_playbook(str(PLAYBOOK), load_inventory(inventory), Settings(), phase="record",
                          extra_vars={"marker_dir": str(state_dir), "probe_secret": PLACEHOLDER_SECRET})
    events = [json.loads(path.read_text()) for path in result.run_dir.glob("artifacts/*/job_events/*.json")]
    return [trim(event) for event in sorted(events, key=lambda e: e["counter"])]


def main() -> None:
    import os

    with tempfile.TemporaryDirectory() as state_dir:
        os.environ["BOOTSTRAP_STATE_DIR"] = state_dir
        events = record(Path(state_dir))
    RECORDING.write_text(json.dumps(events, indent=1) + "\n")
    print(f"{len(events)} events -> {RECORDING}")


if __name__ == "__main__":
    main()
