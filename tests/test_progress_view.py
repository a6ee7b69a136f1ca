"""Long phases show progress per node (issue 34): on a terminal each node's row has its tasks done, of about as many
as the last run of the phase ran there, and the task it runs now; without a terminal, plain lines per node."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from provision.cli import views
from provision.nodes.runner import RunProgress, previous_counts
from provision.nodes.tally import HostTally


def event(kind: str, host: str, task: str, **res: Any) -> dict[str, Any]:
    return {"event": kind, "event_data": {"host": host, "task": task, "res": res}}


def progress(expected: dict[str, int] | None = None) -> RunProgress:
    found = RunProgress(phase="prepare", hosts=["n1", "n2"], tally={"n1": HostTally(), "n2": HostTally()},
                        expected=expected or {})
    found.feed({"event": "playbook_on_play_start", "event_data": {"play": "Prepare the nodes"}})
    for host in ("n1", "n2"):
        found.feed(event("runner_on_start", host, "Gather facts"))
        found.feed(event("runner_on_ok", host, "Gather facts"))
    found.feed(event("runner_on_start", "n1", "Install containerd"))
    found.feed(event("runner_on_ok", "n1", "Install containerd", changed=True))
    found.feed(event("runner_on_start", "n1", "Install the NVIDIA driver"))
    found.feed(event("runner_on_start", "n2", "Install containerd"))
    return found


def test_each_nodes_row_has_its_tasks_done_of_about_how_many_and_its_task_now() -> None:
    out = io.StringIO()
    Console(file=out, width=160).print(views.progress_table(progress({"n1": 40, "n2": 38})))
    rows = {line.split()[0]: line for line in out.getvalue().splitlines()[1:] if line.split()}
    assert rows["n1"].split()[1] == "2/40" and rows["n1"].rstrip().endswith("Install the NVIDIA driver")
    assert rows["n2"].split()[1] == "1/38" and rows["n2"].rstrip().endswith("Install containerd")
    # Without a run to go by, the count alone.
    assert views.tasks_done(progress(), "n1") == "2"


def test_without_a_terminal_each_node_gets_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(views, "console", Console(file=out, width=60))
    view = views.PhaseView(verbose=False)
    assert not view.interactive
    view.playbook(progress({"n1": 40}))
    lines = out.getvalue().splitlines()
    assert "  prepare n1: 2/40 tasks, now: Install the NVIDIA driver" in lines
    assert "  prepare n2: 1 tasks, now: Install containerd" in lines
    # The same play a moment later: nothing new (at most a line per node every PLAIN_EVERY_S).
    view.playbook(progress({"n1": 40}))
    assert out.getvalue().splitlines() == lines


def test_the_expected_counts_come_from_the_last_complete_run_of_the_phase(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path))
    runs = tmp_path / "runs"
    older, newer, other = runs / "20261201-100000-000000-prepare", runs / "20261202-100000-000000-prepare", \
        runs / "20261203-100000-000000-prepare"
    for directory in (older, newer, other):
        directory.mkdir(parents=True)
    header = "phase prepare: playbook prepare.yml, inventory hosts.ini\n"
    (older / "run.log").write_text(header + "n1\tok\ta\nn2\tok\ta\n")
    (newer / "run.log").write_text(header + "n1\tok\ta\nn1\tchanged\tb (1.0s)\nn1\tRETRYING\tc\tlock\nn1\tskipped\tc\n"
                                   "n2\tok\ta\nn2\tFAILED\tb\tno space\n")
    # The newest ran on n1 only (`--limit n1`): it does not say how many n2 runs.
    (other / "run.log").write_text(header + "n1\tok\ta\n")
    assert previous_counts("prepare", ["n1", "n2"]) == {"n1": 3, "n2": 2}
    assert previous_counts("prepare", ["n1"]) == {"n1": 1}
    assert previous_counts("join", ["n1"]) == {}
