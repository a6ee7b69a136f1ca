"""The playbook driver: per-host tallies, failures named by host and task, a run log, no secrets in it.

Runs real ansible-playbook through ansible-runner against hosts on a local connection (no SSH needed), given
as an extra variable: an inventory may not set one (it is refused); the lab tests cover the driver over SSH.
"""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

from provision.errors import BootstrapError
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import Settings
from provision.nodes.runner import RunProgress, run_playbook
from tests.support.paths import REPO_ROOT as PROJECT_ROOT

PROBE = str(PROJECT_ROOT / "tests" / "playbooks" / "local_probe.yml")
SECRET = "s3cr3t-abcdef.0123456789abcdef"
LOCAL = {"ansible_connection": "local"}


@pytest.fixture
def local_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path))
    inventory = tmp_path / "hosts.ini"
    python = Path(__import__("sys").executable)
    inventory.write_text(
        "[control_plane]\ncp1 ansible_host=127.0.0.11\n[workers]\nw1 ansible_host=127.0.0.12\n"
        f"[all:vars]\nansible_python_interpreter={python}\n")
    return load_inventory(inventory), tmp_path


def test_run_reports_per_host_results_failure_and_keeps_a_log_without_secrets(local_cluster) -> None:
    cluster, tmp_path = local_cluster
    tmp_path.chmod(0o755)
    tmp_mode = stat.S_IMODE(tmp_path.stat().st_mode)
    seen: list[tuple[str, str]] = []

    def on_progress(progress: RunProgress) -> None:
        seen.append((progress.task, ",".join(f"{h}:{t.ok}" for h, t in sorted(progress.tally.items()))))

    result = run_playbook(PROBE, cluster, Settings(), phase="probe", on_progress=on_progress,
                          extra_vars=LOCAL | {"marker_dir": str(tmp_path), "probe_secret": SECRET})

    assert not result.ok
    assert (tmp_path / "cp1.txt").read_text() == "cp1\n"
    # The run directory is private; the state directory the user named (here tmp_path) keeps its own mode.
    assert stat.S_IMODE(result.run_dir.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(tmp_path.stat().st_mode) == tmp_mode
    assert result.tally["cp1"].failed == 0 and result.tally["cp1"].changed == 1
    assert result.tally["w1"].failed == 1
    # The rescued failure is in the log but is no failure of the run.
    assert [(f.host, f.task) for f in result.failures] == [("w1", "Fail on workers")]
    assert "planted failure on w1" in result.failures[0].message
    assert any(task == "Write a marker" for task, _ in seen)

    log = (result.run_dir / "run.log").read_text()
    assert "w1\tFAILED\tFail on workers" in log and "cp1\tchanged\tWrite a marker" in log
    assert "cp1\tFAILED\tFail inside a block" in log
    assert (result.run_dir / "artifacts").is_dir()
    leaked = [p for p in result.run_dir.rglob("*") if p.is_file() and "extravars" not in p.name
              and SECRET in p.read_text(errors="ignore")]
    assert leaked == []

    with pytest.raises(BootstrapError) as raised:
        result.raise_for_failure()
    assert "w1: failed at 'Fail on workers'" in str(raised.value) and str(result.run_dir) in str(raised.value)


def test_second_run_of_an_idempotent_task_reports_no_change(local_cluster) -> None:
    cluster, tmp_path = local_cluster
    extra = LOCAL | {"marker_dir": str(tmp_path), "probe_secret": SECRET}
    run_playbook(PROBE, cluster, Settings(), phase="probe", limit=["cp1"], extra_vars=extra)
    again = run_playbook(PROBE, cluster, Settings(), phase="probe", limit=["cp1"], extra_vars=extra)
    assert again.ok
    assert again.changed == {"cp1": 0}
    assert list(again.tally) == ["cp1"]


def test_a_failure_message_with_square_brackets_is_printed_as_written(tmp_path: Path, monkeypatch) -> None:
    import io

    from rich.console import Console

    from provision.cli import views as live
    from provision.nodes.runner import PlaybookResult
    from provision.nodes.tally import HostTally, TaskFailure

    out = io.StringIO()
    monkeypatch.setattr(live, "console", Console(file=out, width=200))
    failure = TaskFailure("w1", "Join", "kubeadm join: [preflight] file [/etc/kubernetes/kubelet.conf] exists")
    live.print_result(PlaybookResult("join", "join.yml", 2, "failed", tmp_path, {"w1": HostTally(failed=1)},
                                     [failure], 1.0))
    assert "w1: failed at 'Join': kubeadm join: [preflight] file [/etc/kubernetes/kubelet.conf] exists" in out.getvalue()


def test_a_become_password_prompt_is_answered_through_the_plays_wrapper(local_cluster) -> None:
    """--ask-become-pass: ansible-playbook asks on its terminal and ansible-runner answers; the wrapper that ends
    the play with us (runner._ended_with_us) hands the terminal on, so the play runs and the password stays out of
    the log."""
    cluster, tmp_path = local_cluster
    password = "pw-wrapper-7f3c"
    result = run_playbook(PROBE, cluster, Settings(), phase="probe", limit=["cp1"],
                          extra_vars=LOCAL | {"marker_dir": str(tmp_path), "probe_secret": SECRET},
                          become_password=password)
    assert (result.run_dir / "bin" / "ansible-playbook").is_file()
    assert result.tally["cp1"].ok > 0 and (tmp_path / "cp1.txt").is_file()
    assert password not in (result.run_dir / "run.log").read_text()


def test_a_controller_killed_with_its_process_group_takes_the_play_with_it(local_cluster) -> None:
    """ansible-playbook runs in a session of its own (ansible-runner's pty): it must still end with us."""
    import os
    import signal
    import subprocess
    import sys
    import time

    cluster, tmp_path = local_cluster
    playbook = str(PROJECT_ROOT / "tests" / "playbooks" / "local_slow.yml")
    driver = ("import sys; from provision.inputs.inventory import load_inventory; from provision.inputs.settings import "
              "Settings; from provision.nodes.runner import run_playbook; from pathlib import Path; run_playbook(sys.argv[1], "
              "load_inventory(Path(sys.argv[2])), Settings(), phase='slow', extra_vars={'marker_dir': sys.argv[3]})")
    run = subprocess.Popen([sys.executable, "-c", driver, playbook, str(cluster.inventory_path), str(tmp_path)],
                           start_new_session=True)

    def playbook_processes() -> list[str]:
        found = subprocess.run(["pgrep", "-f", f"ansible-playbook .*{tmp_path}"], capture_output=True, text=True)
        return found.stdout.split()

    def sleeping() -> bool:
        return any('"task": "Sleep"' in event.read_text() and '"runner_on_start"' in event.read_text()
                   for event in tmp_path.glob("runs/*-slow/artifacts/*/job_events/*.json"))

    deadline = time.monotonic() + 60
    while not sleeping() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sleeping() and playbook_processes(), "the play did not start"
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 15
    while playbook_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    # The marker is written by ansible-playbook's own processes (its workers run the copy): with none of them
    # left, no play goes on to write it; waiting out the task's sleep would show nothing more.
    assert playbook_processes() == []
    assert not (tmp_path / "cp1.txt").exists() and not (tmp_path / "w1.txt").exists()
