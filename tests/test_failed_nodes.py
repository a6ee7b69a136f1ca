"""Every failed node named: the closing error lists each failed or unreachable host with its own first cause,
one line each, and the summary table marks them; a single failure stays one line."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from provision.errors import BootstrapError
from provision.inputs.inventory import load_inventory
from provision.nodes.prepare import check_prepared
from provision.nodes.runner import PlaybookResult
from provision.nodes.tally import EventTally, HostTally, TaskFailure
from provision.phases import PhaseOutcome, PipelineResult
from tests.support.node_reports import recorded_document, recorded_settings
from tests.support.record_runner_events import RECORDING


def result_of(tally: EventTally, run_dir: Path, phase: str = "probe") -> PlaybookResult:
    return PlaybookResult(phase, "probe.yml", 2, "failed", run_dir, tally.tally, tally.failures, 3.0)


def test_the_closing_error_names_each_failed_and_unreachable_host_with_its_own_cause(tmp_path: Path) -> None:
    # A real run's events: w1 failed a task (after a rescued failure on cp1), w2 had no SSH server to answer.
    tally = EventTally()
    for event in json.loads(RECORDING.read_text()):
        tally.feed(event)
    with pytest.raises(BootstrapError) as raised:
        result_of(tally, tmp_path).raise_for_failure()
    lines = str(raised.value).splitlines()
    assert lines[0] == f"probe failed on 2 of 3 nodes (full log: {tmp_path / 'run.log'}):"
    assert lines[1] == "  w1: failed at 'Fail on workers': planted failure on w1"
    assert lines[2].startswith("  w2: unreachable at 'Write a marker': ") and "Connection refused" in lines[2]
    assert lines[2].endswith("(once it answers again, re-run)")
    assert raised.value.nodes == {"w1": "failed", "w2": "unreachable"}


def test_one_failed_host_is_one_line() -> None:
    failure = TaskFailure("n2", "Install", "E: Unable to locate package kubeadm")
    result = PlaybookResult("prepare", "prepare.yml", 2, "failed", Path("/run"), {"n1": HostTally(ok=3),
                            "n2": HostTally(failed=1)}, [failure], 1.0)
    with pytest.raises(BootstrapError) as raised:
        result.raise_for_failure()
    assert str(raised.value) == ("prepare failed: n2: failed at 'Install': E: Unable to locate package kubeadm "
                                 "(full log: /run/run.log)")
    assert raised.value.nodes == {"n2": "failed"}


def write_reports(run_dir: Path, reports: dict[str, dict[str, Any]]) -> None:
    folder = run_dir / "artifacts" / "ident" / "job_events"
    folder.mkdir(parents=True)
    for counter, (host, document) in enumerate(reports.items()):
        (folder / f"{counter}-x.json").write_text(json.dumps({"event": "runner_on_ok", "event_data": {
            "host": host, "task": "Report the prepared state", "res": {"changed": False, "cb_report": document}}}))


def test_prepare_names_the_failed_the_unreachable_and_the_unready_nodes_together(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\nn1 ansible_host=10.0.0.1\n[workers]\nn2 ansible_host=10.0.0.2\n"
                     "n3 ansible_host=10.0.0.3\nn4 ansible_host=10.0.0.4\n")
    cluster = load_inventory(hosts)
    unready = recorded_document() | {"hostname": "n4-old"}
    write_reports(tmp_path, {"n1": recorded_document() | {"hostname": "n1"}, "n4": unready})
    failures = [TaskFailure("n3", "Install the missing packages (apt): containerd", "Mitogen was disconnected",
                            unreachable=True),
                TaskFailure("n2", "Wait for the package manager's locks", "the package manager's lock "
                            "/var/lib/dpkg/lock-frontend is still held by pid 812 (apt-get)")]
    tally = {name: HostTally() for name in ("n1", "n2", "n3", "n4")}
    playbook = PlaybookResult("prepare", "prepare.yml", 2, "failed", tmp_path, tally, failures, 1.0)
    with pytest.raises(BootstrapError) as raised:
        check_prepared(playbook, cluster, recorded_settings())
    lines = str(raised.value).splitlines()
    assert lines[0].startswith("prepare failed on 3 of 4 nodes")
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["n2", "n3", "n4 is not ready"]
    assert "lock-frontend is still held by pid 812" in lines[1] and "unreachable" in lines[2]
    assert "hostname is 'n4-old', not its inventory name 'n4'" in lines[3]
    assert raised.value.nodes == {"n2": "failed", "n3": "unreachable", "n4": "not ready"}


def test_the_summary_marks_the_nodes_a_phase_failed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from provision.cli import views

    out = io.StringIO()
    monkeypatch.setattr(views, "console", Console(file=out, width=160))
    error = BootstrapError("prepare failed on 2 of 3 nodes", nodes={"n2": "failed", "n3": "unreachable"})
    views.print_summary(PipelineResult([PhaseOutcome("preflight", "ok", 1.0, "3 nodes ready"),
                                        PhaseOutcome("prepare", "failed", 40.0, str(error), error, error.nodes)],
                                       error), "bootstrap prepare")
    row = next(line for line in out.getvalue().splitlines() if line.startswith("prepare"))
    assert "failed: n2; unreachable: n3 (see below)" in row


def test_a_connection_mitogen_lost_mid_task_is_said_in_a_few_words() -> None:
    tally = EventTally()
    # As Mitogen reported n3's link cut in the middle of an apt install (tests/test_faults_lab.py).
    tally.feed({"event": "runner_on_unreachable", "event_data": {
        "host": "n3", "task": "Install the missing packages (apt): containerd and Docker (docker.io)",
        "res": {"unreachable": True, "msg": "Task failed: Mitogen was disconnected from the remote environment while a "
                "call was in-progress. If you feel this is in error, please file a bug. Original error was: the "
                "respondent Context has disconnected"}}})
    assert tally.failures[0].describe() == (
        "n3: unreachable at 'Install the missing packages (apt): containerd and Docker (docker.io)': the connection "
        "to it was lost in the middle of the task (the respondent Context has disconnected)")
