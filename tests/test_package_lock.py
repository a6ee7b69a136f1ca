"""The package-lock wait: who holds a lock, read the way apt and dnf decide it, told to the live view while the
task is retried, and named with the fix when the bound is past.

The module's reading (playbooks/roles/packages/library/cb_package_lock.py) on locks held by real processes on this host, in a
temporary directory; the tally and the view on the retry events Ansible sends. The lab test
(tests/test_faults_lab.py) holds dpkg's own lock on a node during `prepare`.
"""
from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.nodes.runner import RunProgress
from provision.nodes.tally import EventTally, HostTally
from tests.support.ansible_modules import load

lock_module = load("cb_package_lock")

# What a holder looks like: fcntl's record lock, as dpkg and apt take it, held until killed.
HOLDER = "import fcntl, sys, time; f = open(sys.argv[1], 'w'); fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True); " \
         "time.sleep(600)"


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    path = tmp_path / "lock-frontend"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    try:
        yield path, holder
    finally:
        holder.kill()
        holder.wait()


def test_the_holder_of_an_fcntl_lock_is_named_with_its_command(held: tuple[Path, subprocess.Popen[str]],
                                                               tmp_path: Path) -> None:
    path, holder = held
    assert lock_module.fcntl_holder(str(path)) == holder.pid
    process = lock_module.describe_process(holder.pid)
    assert process["pid"] == holder.pid and "fcntl.lockf" in process["command"]
    assert isinstance(process["running_s"], int) and process["running_s"] >= 0
    free = tmp_path / "free"
    free.write_text("")
    assert lock_module.fcntl_holder(str(free)) is None
    assert lock_module.fcntl_holder(str(tmp_path / "absent")) is None
    holder.kill()
    holder.wait()
    assert lock_module.fcntl_holder(str(path)) is None


def test_a_dnf_pid_lock_counts_only_while_its_process_lives(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        pid_file = tmp_path / "rpmdb_lock.pid"
        pid_file.write_text(str(sleeper.pid))
        assert lock_module.pid_file_holder(str(pid_file)) == sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()
    assert lock_module.pid_file_holder(str(pid_file)) is None
    pid_file.write_text("")
    assert lock_module.pid_file_holder(str(pid_file)) is None


def test_holders_walks_the_managers_locks_and_the_message_names_lock_holder_and_fix(
        held: tuple[Path, subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path, holder = held
    monkeypatch.setitem(lock_module.FCNTL_LOCKS, "apt", (str(tmp_path / "lists-lock"), str(path)))
    found = lock_module.holders("apt")
    assert [(h["lock"], h["pid"]) for h in found] == [(str(path), holder.pid)]
    message = lock_module.held_message(found, 300)
    assert message.startswith(f"the package manager's lock {path} is still held by pid {holder.pid} (")
    assert "after waiting 300 s (packages.lock_timeout_s)" in message
    assert message.endswith("let it finish (unattended-upgrades and cloud-init do on a freshly booted machine) or "
                            "stop it, then re-run; or raise packages.lock_timeout_s")


def retry_event(host: str, holders: list[dict[str, Any]], attempt: int) -> dict[str, Any]:
    """A runner_retry event as ansible-runner sends it for the lock-wait task (the shape recorded on a lab node)."""
    return {"event": "runner_retry", "event_data": {
        "host": host, "task": "Wait for the package manager's locks",
        "res": {"changed": False, "attempts": attempt + 1, "retries": 30,
                "cb_package_lock": {"held": True, "holders": holders, "waited_s": 10.0, "interrupted": False},
                "msg": lock_module.held_message(holders, 300)}}}


def test_the_live_view_says_which_node_waits_for_which_process_until_it_moves_on() -> None:
    holders = [{"lock": "/var/lib/dpkg/lock-frontend", "pid": 812, "command": "/usr/bin/python3 "
                "/usr/bin/unattended-upgrade", "running_s": 95}]
    progress = RunProgress(phase="prepare", hosts=["n1", "n2"], tally={"n1": HostTally(), "n2": HostTally()})
    assert progress.feed(retry_event("n2", holders, 1))
    note = "waits for /var/lib/dpkg/lock-frontend: held by pid 812 (/usr/bin/python3 /usr/bin/unattended-upgrade, " \
           "running for 95 s)"
    assert progress.waiting == {"n2": note}
    assert progress.results[-1].state == "RETRYING" and progress.results[-1].message == note

    from rich.console import Console

    from provision.cli.views import progress_table
    out = io.StringIO()
    Console(file=out, width=200).print(progress_table(progress))
    assert f"n2 {note}" in out.getvalue()

    progress.feed({"event": "runner_on_ok", "event_data": {"host": "n2", "task": "Wait for the package manager's "
                                                           "locks", "res": {"changed": False}}})
    assert progress.waiting == {}


def test_other_retries_say_the_attempt_and_the_last_error() -> None:
    tally = EventTally()
    tally.feed({"event": "runner_retry", "event_data": {"host": "n1", "task": "Download the manifest",
                                                        "res": {"failed": True, "msg": "HTTP 503 Service Unavailable",
                                                                "attempts": 2, "retries": 4}}})
    assert tally.waiting == {"n1": "retrying 'Download the manifest' (attempt 2 of 4): HTTP 503 Service Unavailable"}


def test_a_node_view_without_a_terminal_prints_each_wait_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from provision.cli import views

    out = io.StringIO()
    monkeypatch.setattr(views, "console", Console(file=out, width=200))
    view = views.PhaseView(verbose=True)
    holders = [{"lock": "/var/lib/dpkg/lock", "pid": 9, "command": "dpkg --configure -a", "running_s": None}]
    progress = RunProgress(phase="prepare", hosts=["n1"], started=time.monotonic())
    progress.feed(retry_event("n1", holders, 1))
    view.playbook(progress)
    view.playbook(progress)
    assert out.getvalue().count("n1 waits for /var/lib/dpkg/lock: held by pid 9 (dpkg --configure -a)") == 1
