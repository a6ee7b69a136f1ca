"""Counting a playbook run from its events, on events recorded from a real run (tests/data/runner/, made by
tests/support/record_runner_events.py): tests/playbooks/local_probe.yml on cp1 and w1 (local connection) and w2,
where no SSH server answers."""
from __future__ import annotations

import json
from typing import Any

import pytest

from provision.nodes.tally import EventTally, HostTally, TaskFailure
from tests.support.record_runner_events import PLACEHOLDER_SECRET, RECORDING


@pytest.fixture(scope="module")
def events() -> list[dict[str, Any]]:
    return json.loads(RECORDING.read_text())


def stats_at(events: list[dict[str, Any]]) -> int:
    return next(i for i, event in enumerate(events) if event["event"] == "playbook_on_stats")


def fed(events: list[dict[str, Any]]) -> EventTally:
    tally = EventTally()
    for event in events:
        tally.feed(event)
    return tally


def test_each_hosts_counts_agree_with_ansibles_own_closing_stats(events: list[dict[str, Any]]) -> None:
    tally = fed(events)
    stats = events[stats_at(events)]["event_data"]
    for host in ("cp1", "w1"):
        counted = tally.tally[host]
        assert (counted.ok, counted.changed, counted.skipped, counted.failed) == (
            stats["ok"].get(host, 0), stats["changed"].get(host, 0), stats["skipped"].get(host, 0),
            stats["failures"].get(host, 0))
    assert tally.tally == {"cp1": HostTally(ok=4, changed=1, skipped=1),
                           "w1": HostTally(ok=4, changed=1, failed=1),
                           "w2": HostTally(unreachable=True)}


def test_a_failure_a_rescue_handled_is_shown_while_it_happens_but_is_no_failure_of_the_run(
        events: list[dict[str, Any]]) -> None:
    before_stats = fed(events[:stats_at(events)])
    assert ("cp1", "Fail inside a block") in [(f.host, f.task) for f in before_stats.failures]
    assert before_stats.tally["w1"].failed == 2

    tally = fed(events)
    # What is left is each host's last failure (a failure that counts ends the host's play) and the unreachable.
    assert [(f.host, f.task, f.unreachable) for f in tally.failures] == [
        ("w2", "Write a marker", True), ("w1", "Fail on workers", False)]
    assert tally.failures[1] == TaskFailure("w1", "Fail on workers", "planted failure on w1")
    assert "port 1: Connection refused" in tally.failures[0].message


def test_an_ignored_failure_counts_as_ok_and_every_result_is_kept_in_order(events: list[dict[str, Any]]) -> None:
    tally = fed(events)
    ignored = [r for r in tally.results if r.task == "A failure that is ignored"]
    assert {r.state for r in ignored} == {"failed (ignored)"} and all(r.message == "" for r in ignored)
    cp1 = [(r.task, r.state) for r in tally.results if r.host == "cp1"]
    assert cp1 == [("Write a marker", "changed"), ("Handle a secret", "ok"), ("Fail inside a block", "FAILED"),
                   ("Recover", "ok"), ("A failure that is ignored", "failed (ignored)"), ("Fail on workers", "skipped")]
    assert all(r.duration_s is not None for r in tally.results)


def test_only_the_events_that_move_the_view_count(events: list[dict[str, Any]]) -> None:
    tally = EventTally()
    moved = [event["event"] for event in events if tally.feed(event)]
    # runner_on_start moves it too: each node's task now (issue 34's per-node progress).
    assert set(moved) == {"playbook_on_play_start", "playbook_on_task_start", "runner_on_start", "runner_on_ok",
                          "runner_on_failed", "runner_on_skipped", "runner_on_unreachable", "playbook_on_stats"}
    assert tally.feed({"event": "runner_on_start", "event_data": {"host": "cp1", "task": "Recover"}})
    assert tally.current["cp1"] == "Recover"
    assert not tally.feed({"event": "runner_on_start", "event_data": {"task": "Recover"}})
    assert (tally.play, tally.task) == ("Probe the driver", "Fail on workers")


def test_the_recording_holds_no_secret() -> None:
    assert PLACEHOLDER_SECRET not in RECORDING.read_text()


def test_a_node_lost_while_a_forked_mitogen_task_ran_is_unreachable_not_failed() -> None:
    """Mitogen forks the modules that import our module_utils; a link cut meanwhile comes back as a failed task
    saying the context disconnected, which is a lost node, named as such (re-run once it answers)."""
    tally = EventTally()
    for event in (
        {"event": "runner_on_failed", "event_data": {
            "host": "n3", "task": "Install the missing packages (apt): every package prepare installs",
            "res": {"msg": "Task failed: the respondent Context has disconnected"}}},
        {"event": "runner_on_failed", "event_data": {"host": "n2", "task": "Planted", "res": {"msg": "planted"}}},
        {"event": "playbook_on_stats", "event_data": {"failures": {"n3": 1, "n2": 1}}},
    ):
        tally.feed(event)
    assert [(f.host, f.unreachable) for f in tally.failures] == [("n3", True), ("n2", False)]
    assert tally.tally["n3"].unreachable and not tally.tally["n2"].unreachable
    assert tally.failures[0].message.startswith("the connection to it was lost in the middle of the task")
