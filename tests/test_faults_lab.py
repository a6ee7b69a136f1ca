"""Faults real runs meet, on real nodes (Debian bookworm under systemd-nspawn, over SSH): another process holding
dpkg's lock as `prepare` starts, a node's link cut in the middle of a run, the controller killed at several
points of `prepare`, and a mirror that fails twice before it answers or answers 404.

The Kubernetes repository comes from a mirror stand-in in the lab's hub (tests/lab/mirror.py serving the signed
placeholder repository of tests/lab/repos.py over HTTP), so that its faults are the test's to choose.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provision.cli.app import app
from provision.errors import BootstrapError
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import load_settings
from provision.inputs.state import runs_root
from provision.nodes.preflight.run import run_preflight
from provision.nodes.prepare import PrepareResult, prepare, read_reports
from provision.nodes.runner import RunProgress
from tests.lab.lab import Lab, LabNode, MirrorStandIn
from tests.lab.repos import build_kubernetes_repo, write_config

IN_RELEASE = "/InRelease"
# Holds dpkg's frontend lock the way apt does (an fcntl record lock) while /run/cb-hold exists, at most argv[1]
# seconds: a stand-in for unattended-upgrades on a freshly booted machine.
HOLDER = """#!/usr/bin/python3
import fcntl, os, sys, time
deadline = time.monotonic() + float(sys.argv[1])
with open("/var/lib/dpkg/lock-frontend", "a") as lock:
    fcntl.lockf(lock, fcntl.LOCK_EX)
    open("/run/cb-lock-held", "w").close()
    while os.path.exists("/run/cb-hold") and time.monotonic() < deadline:
        time.sleep(0.2)
os.unlink("/run/cb-lock-held")
"""
HOLDER_PATH = "/usr/local/sbin/cb-lock-holder"

# Debian 12's own containerd (1.6) runs Kubernetes 1.35, not 1.36: the lab's bookworm nodes prepare for 1.35.
BOOKWORM_KUBERNETES = "1.35"
# The key of the Kubernetes repository the mirror stand-in serves (tests/lab/repos.py lays it out per minor).
KEY = f"/kubernetes/v{BOOKWORM_KUBERNETES}/deb/Release.key"


@pytest.fixture(scope="module")
def lab(lab_factory: Callable[..., Lab]) -> Lab:
    return lab_factory(3)


@pytest.fixture(scope="module")
def mirror(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> MirrorStandIn:
    root = tmp_path_factory.mktemp("mirror")
    build_kubernetes_repo(root, BOOKWORM_KUBERNETES)
    return lab.serve_mirror(root)


@pytest.fixture(scope="module")
def lab_config(lab: Lab, mirror: MirrorStandIn, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(lab, tmp_path_factory.mktemp("faults") / "cluster.yaml",
                        mirrors={"kubernetes_repo": f"{mirror.url}/kubernetes"},
                        kubernetes={"version": BOOKWORM_KUBERNETES}, container_runtime={"containerd_source": "distribution"})


@pytest.fixture(autouse=True)
def no_faults(mirror: MirrorStandIn) -> Iterator[None]:
    mirror.fail()
    yield
    mirror.fail()


def hold_dpkg_lock(node: LabNode, max_s: int = 300) -> int:
    """Start the holder on the node; its pid once it holds the lock."""
    node.ssh(f"cat > {HOLDER_PATH} && chmod 755 {HOLDER_PATH}", input=HOLDER)
    node.ssh(f"rm -f /run/cb-lock-held; touch /run/cb-hold; systemd-run --quiet --collect --unit=cb-lock-holder "
             f"{HOLDER_PATH} {max_s}; for i in $(seq 100); do [ -e /run/cb-lock-held ] && break; sleep 0.1; done; "
             "test -e /run/cb-lock-held")
    return int(node.ssh("systemctl show --property=MainPID --value cb-lock-holder").stdout)


def release_dpkg_lock(node: LabNode) -> None:
    node.ssh("rm -f /run/cb-hold; for i in $(seq 100); do systemctl is-active -q cb-lock-holder || break; "
             "sleep 0.1; done")


def latest_run_log() -> Path | None:
    logs = sorted(runs_root().glob("*-prepare/run.log")) if runs_root().is_dir() else []
    return logs[-1] if logs else None


def when_logged(pattern: str, action: Callable[[], None], *, after_s: float = 0, timeout_s: float = 600,
                since: float = 0) -> threading.Thread:
    """Run `action` once a line of the newest prepare run log (newer than `since`) matches, `after_s` later."""
    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            log = latest_run_log()
            if log is not None and log.stat().st_mtime >= since and re.search(pattern, log.read_text(), re.M):
                time.sleep(after_s)
                action()
                return
            time.sleep(0.2)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def one_line(text: str) -> str:
    return " ".join(text.split())


# --- package locks -----------------------------------------------------------------------------------------

def test_a_lock_held_on_one_node_as_prepare_starts_is_waited_for_and_the_view_names_its_holder(
        lab: Lab, lab_config: Path) -> None:
    n2 = lab.node("n2")
    pid = hold_dpkg_lock(n2)
    # Let it go 15 s after prepare first reports n2 waiting: several retries, each naming the holder.
    watcher = when_logged(r"^n2\tRETRYING\t", lambda: release_dpkg_lock(n2), after_s=15)
    started = time.monotonic()
    result = CliRunner().invoke(app, ["prepare", "-i", str(lab.inventory_path), "-c", str(lab_config)])
    elapsed = time.monotonic() - started
    watcher.join(timeout=1)
    assert result.exit_code == 0, result.output + str(result.exception)
    output = one_line(result.output)
    waits = f"n2 waits for /var/lib/dpkg/lock-frontend: held by pid {pid} (/usr/bin/python3 {HOLDER_PATH} 300, " \
            "running for "
    assert waits in output
    assert "n1 waits" not in output and "n3 waits" not in output
    log = latest_run_log()
    assert log is not None
    retries = [line for line in log.read_text().splitlines() if line.startswith("n2\tRETRYING\t")]
    assert len(retries) >= 2 and all(f"held by pid {pid}" in line for line in retries)
    print(f"prepare of 3 fresh nodes, n2 waiting {len(retries)} tries for the lock: {elapsed:.0f} s")


def test_a_lock_held_past_a_short_bound_fails_naming_the_lock_its_holder_and_the_fix(
        lab: Lab, lab_config: Path, tmp_path: Path) -> None:
    n2 = lab.node("n2")
    # A package prepare installs is missing again, so n2 has a transaction to wait for.
    n2.ssh("DEBIAN_FRONTEND=noninteractive apt-get remove -y -q socat", timeout=120)
    pid = hold_dpkg_lock(n2)
    config = write_config(lab, tmp_path / "cluster.yaml", mirrors={"kubernetes_repo": load_settings(
        lab_config).mirrors.kubernetes_repo}, kubernetes={"version": BOOKWORM_KUBERNETES}, container_runtime={"containerd_source": "distribution"},
                          packages={"lock_timeout_s": 6})
    gpus = {node.name: 0 for node in lab.nodes}
    try:
        started = time.monotonic()
        with pytest.raises(BootstrapError) as failed:
            prepare(load_inventory(lab.inventory_path), load_settings(config), gpus=gpus)
        elapsed = time.monotonic() - started
    finally:
        release_dpkg_lock(n2)
    message = str(failed.value)
    assert failed.value.nodes == {"n2": "failed"}, message
    assert "\n" not in message  # one node failed: one line
    assert f"n2: failed at 'Wait for the package manager's locks': the package manager's lock " \
           f"/var/lib/dpkg/lock-frontend is still held by pid {pid} (/usr/bin/python3 {HOLDER_PATH} 300" in message
    assert "after waiting 6 s (packages.lock_timeout_s)" in message and "or raise packages.lock_timeout_s" in message
    assert elapsed < 120
    print(f"lock past a 6 s bound: failed in {elapsed:.0f} s")
    again = prepare(load_inventory(lab.inventory_path), load_settings(lab_config), gpus=gpus, limit=["n2"])
    assert again.playbook.ok and n2.ssh("command -v socat", check=False).returncode == 0


# --- a node's link cut mid-run -----------------------------------------------------------------------------

# How a node is lost in the middle of a run, and brought back.
LOSSES: dict[str, tuple[Callable[[LabNode], None], Callable[[LabNode], None]]] = {
    "link cut": (LabNode.cut_link, LabNode.restore_link),
    "machine stopped": (LabNode.stop, LabNode.start),
}


@pytest.mark.parametrize(("loss", "executor"), [("link cut", "auto"), ("machine stopped", "auto"),
                                                ("link cut", "stock")])
def test_a_node_lost_mid_run_is_named_unreachable_while_the_others_finish_and_a_rerun_completes(
        lab: Lab, lab_config: Path, tmp_path: Path, loss: str, executor: str) -> None:
    n3 = lab.node("n3")
    lose, bring_back = LOSSES[loss]
    # Something for n3 to do: its container runtime is gone (the others have nothing to install).
    n3.ssh("DEBIAN_FRONTEND=noninteractive apt-get remove -y -q docker.io containerd runc", timeout=180)
    config = write_config(lab, tmp_path / "cluster.yaml", mirrors={"kubernetes_repo": load_settings(
        lab_config).mirrors.kubernetes_repo}, kubernetes={"version": BOOKWORM_KUBERNETES}, container_runtime={"containerd_source": "distribution"},
                          ansible={"executor": executor})
    lost_at: list[float] = []

    def lose_n3_while_it_installs(progress: RunProgress) -> None:
        # Once n3 has found what it misses and waited for the package manager, apt runs there: lose it then.
        n3_tasks = [r.task for r in progress.results if r.host == "n3"]
        found = [i for i, task in enumerate(n3_tasks) if task.startswith("Find the packages still missing: every package")]
        if not lost_at and found and "Wait for the package manager's locks" in n3_tasks[found[0]:]:
            # Lost while apt itself runs there, not between tasks: once an apt or dpkg process is up on n3.
            n3.ssh("for _ in $(seq 100); do pgrep -x 'apt-get|dpkg|http' >/dev/null && exit 0; sleep 0.1; done",
                   check=False, timeout=30)
            lose(n3)
            lost_at.append(time.monotonic())

    gpus = {node.name: 0 for node in lab.nodes}
    try:
        with pytest.raises(BootstrapError) as failed:
            prepare(load_inventory(lab.inventory_path), load_settings(config), gpus=gpus,
                    on_progress=lose_n3_while_it_installs)
        ended = time.monotonic() - lost_at[0]
    finally:
        bring_back(n3)
    message = str(failed.value)
    assert failed.value.nodes == {"n3": "unreachable"}, message
    assert re.match(r"prepare failed: n3: unreachable at 'Install the missing packages \(apt\): every package", message)
    assert message.endswith(")") and "(once it answers again, re-run)" in message
    # The others finished their play: each sent its report, and it says it is ready.
    run_dir = Path(message.rsplit("(full log: ", 1)[1].rstrip(")")).parent
    assert set(read_reports(run_dir)) == {"n1", "n2"}
    assert ended < 120
    print(f"{loss} ({executor}): the run ended {ended:.0f} s after; the closing error: {message}")

    # Back again, a re-run finishes the job.
    for _ in range(50):
        if n3.ssh("true", check=False, timeout=10).returncode == 0:
            break
        time.sleep(0.2)
    again = prepare(load_inventory(lab.inventory_path), load_settings(config), gpus=gpus)
    assert again.playbook.ok and set(again.reports) == {"n1", "n2", "n3"}
    assert n3.ssh("systemctl is-active containerd docker").stdout.split() == ["active", "active"]
    finished = [line for line in (again.playbook.run_dir / "run.log").read_text().splitlines()
                if line.startswith("n3\t") and ("RETRYING" in line or "Finish the package configuration" in line)
                and "skipped" not in line]
    print("  the re-run on n3: " + ("; ".join(line[:120] for line in finished) or "nothing left half-done"))


# --- mirrors that fail -------------------------------------------------------------------------------------

def forget_kubernetes_repository(node: LabNode) -> None:
    """As before the repository was first added: its key, its list and the note that apt read them gone."""
    node.ssh("rm -f /etc/apt/keyrings/cb-kubernetes.asc /etc/apt/sources.list.d/cb-kubernetes.sources "
             "/var/lib/cluster-bootstrap/apt-read/cb-kubernetes")


def test_a_mirror_that_fails_twice_then_answers_is_retried_and_prepare_succeeds(
        lab: Lab, lab_config: Path, mirror: MirrorStandIn) -> None:
    n1 = lab.node("n1")
    forget_kubernetes_repository(n1)
    mirror.fail({"id": "key-503", "path": KEY, "status": 503, "times": 2},
                {"id": "inrelease-503", "path": IN_RELEASE, "status": 503, "times": 2})
    seen = len(mirror.requests())
    result = prepare(load_inventory(lab.inventory_path), load_settings(lab_config), gpus={"n1": 0}, limit=["n1"])
    assert result.playbook.ok and result.reports["n1"].packages["kubeadm"].installed
    served = mirror.requests()[seen:]
    assert [r["status"] for r in served if str(r["path"]).endswith(KEY)] == [503, 503, 200]
    assert [r["status"] for r in served if str(r["path"]).endswith(IN_RELEASE)][:3] == [503, 503, 200]
    keys = [float(r["time"]) for r in served if str(r["path"]).endswith(KEY)]  # type: ignore[arg-type]
    assert keys[1] - keys[0] >= 0.9 and keys[2] - keys[1] >= 1.9  # cb_fetch's pauses: 1 s, then 2 s


def test_a_mirror_that_answers_404_fails_at_once_naming_the_url_and_the_setting(
        lab: Lab, lab_config: Path, mirror: MirrorStandIn) -> None:
    n1 = lab.node("n1")
    forget_kubernetes_repository(n1)
    mirror.fail({"id": "key-404", "path": KEY, "status": 404})
    seen = len(mirror.requests())
    with pytest.raises(BootstrapError) as failed:
        prepare(load_inventory(lab.inventory_path), load_settings(lab_config), gpus={"n1": 0}, limit=["n1"])
    message = one_line(str(failed.value))
    url = f"{mirror.url}{KEY}"
    assert f"{url}: HTTP 404 Not Found (a permanent failure: not retried)" in message
    assert "mirrors.kubernetes_repo" in message and failed.value.nodes == {"n1": "failed"}
    assert [r["status"] for r in mirror.requests()[seen:] if str(r["path"]).endswith(KEY)] == [404]
    # The source is usable again: so is the node.
    mirror.fail()
    assert prepare(load_inventory(lab.inventory_path), load_settings(lab_config), gpus={"n1": 0},
                   limit=["n1"]).playbook.ok


# --- the controller killed ---------------------------------------------------------------------------------

# Where the controller is killed, after the line of the run log that shows a node's result of the task (so the
# next task, in brackets, is under way), in the order a fresh node meets them (each run does only what the ones
# before it left undone): between listing the Kubernetes repository and reading it, early in prepare's one package
# transaction (apt-get reading the lists and downloading), later in it (dpkg unpacking and configuring what was
# downloaded), between writing containerd's configuration and making it config.toml.
KILL_POINTS = (
    (r"\tList the repository: Kubernetes", 0.0),  # [Are the package lists read: Kubernetes]
    (r"\tWait for the package manager's locks \(", 3.0),  # [Read the package lists, or the one transaction]
    (r"\tFind the packages still missing: every package", 6.0),  # [Install the missing packages (apt): ...]
    (r"\tWrite the containerd configuration cluster-bootstrap wants", 0.0),  # [Make it containerd's configuration]
)


def test_the_controller_killed_at_points_of_prepare_leaves_nodes_a_rerun_completes(
        lab: Lab, lab_config: Path, tmp_path: Path) -> None:
    fresh = lab.add_node("n4")
    inventory = lab.write_inventory([fresh.name], path=tmp_path / "hosts.ini")
    bootstrap = Path(sys.executable).parent / "bootstrap"
    command = [str(bootstrap), "prepare", "-i", str(inventory), "-c", str(lab_config)]
    env = os.environ | {"BOOTSTRAP_STATE_DIR": str(runs_root().parent)}
    killed_at, repairs = [], []
    # What each run after a kill had to finish: a package transaction the killed run left going (its lock waited
    # for), dpkg's configuration, containerd's, a repository's lists, a restart.
    repaired = re.compile(r"\tRETRYING\tWait for the package manager's locks|\tchanged\t(Finish the package configuration|"
                          r"Make it containerd's configuration|Read the package lists|Restart the daemon)")
    for pattern, after_s in KILL_POINTS:
        started = time.time()
        run = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
        # The controller's whole process group: bootstrap, ansible-playbook and its workers, ssh or Mitogen.
        watcher = when_logged(rf"^n4\t[^\t]+{pattern}", lambda pid=run.pid: os.killpg(pid, signal.SIGKILL),
                              after_s=after_s,
                              timeout_s=400, since=started)
        run.wait(timeout=600)
        watcher.join(timeout=1)
        assert run.returncode == -signal.SIGKILL, f"not killed at {pattern}: {run.stderr.read() if run.stderr else ''}"
        log = latest_run_log()
        assert log is not None
        killed_at.append(log.read_text().splitlines()[-1])
        repairs += [line[:140] for line in log.read_text().splitlines() if repaired.search(line)]
        state = json.loads(next((runs_root().parent / "clusters").glob("n4@*/state.json")).read_text())
        assert state["phases"]["prepare"]["status"] == "running"

    gpus = run_preflight(load_inventory(inventory), load_settings(lab_config)).gpu_counts
    converged: PrepareResult = prepare(load_inventory(inventory), load_settings(lab_config), gpus=gpus)
    assert converged.playbook.ok and set(converged.reports) == {"n4"}
    repairs += [line[:140] for line in (converged.playbook.run_dir / "run.log").read_text().splitlines()
                if repaired.search(line)]
    again = prepare(load_inventory(inventory), load_settings(lab_config), gpus=gpus)
    assert again.changed == {"n4": 0}
    assert fresh.ssh("systemctl is-active containerd docker").stdout.split() == ["active", "active"]
    assert "-x" in fresh.ssh("cat /proc/$(pidof -s chronyd)/cmdline | tr '\\0' ' '").stdout.split()
    print("killed after:\n  " + "\n  ".join(killed_at) + "\nfinished by the runs after:\n  " + "\n  ".join(repairs))
