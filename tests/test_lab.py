"""The lab itself: nodes boot with their own identity, are reached with checked host keys, may reach only
the Debian mirror, and leave nothing behind when torn down (also when their owner was killed)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision.inputs.inventory import load_inventory
from provision.inputs.settings import load_settings
from tests.lab import lab as lablib
from tests.lab.lab import Lab
from tests.support.lab_traces import lab_cgroups, traces_of
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.lab


def test_nodes_have_distinct_identities_and_passwordless_sudo(lab3: Lab) -> None:
    seen: dict[str, set[str]] = {"hostname": set(), "machine-id": set(), "product_uuid": set(), "mac": set()}
    for node in lab3.nodes:
        out = node.ssh("hostname; cat /etc/machine-id; sudo -n cat /sys/class/dmi/id/product_uuid; "
                       "cat /sys/class/net/eth0/address", user="tester").stdout.split()
        assert out[0] == node.name
        for key, value in zip(seen, out, strict=False):
            seen[key].add(value)
        assert node.ssh("id -u", user="tester").stdout.strip() == "1000"
    assert all(len(values) == len(lab3.nodes) for values in seen.values()), seen


def test_nodes_boot_systemd_with_the_node_fixes(lab3: Lab) -> None:
    node = lab3.nodes[0]
    state = node.ssh("systemctl is-system-running --wait", check=False, timeout=60).stdout.strip()
    assert state in ("running", "degraded"), state
    assert node.ssh("systemctl is-active cblab-prep.service").stdout.strip() == "active"
    assert node.ssh("modprobe br_netfilter && modprobe overlay && test -e /dev/kmsg && echo ok").stdout.strip() == "ok"
    # cgroup controllers are writable inside (runc creates cgroups)
    node.ssh("mkdir /sys/fs/cgroup/memory/cblab-probe && rmdir /sys/fs/cgroup/memory/cblab-probe")


def test_inventory_and_settings_point_at_the_lab(lab3: Lab) -> None:
    cluster = load_inventory(lab3.inventory_path)
    assert cluster.control_plane.name == "n1"
    assert [w.name for w in cluster.workers] == ["n2", "n3"]
    assert {n.address for n in cluster.nodes} == {n.ip for n in lab3.nodes}
    assert all(n.user == "tester" and n.key_file == lab3.key_path for n in cluster.nodes)
    settings = load_settings(lab3.config_path)
    assert settings.ssh.known_hosts_path == lab3.known_hosts_path
    assert not settings.ssh.accept_new_host_keys
    known = lab3.known_hosts_path.read_text()
    assert all(f"{node.ip} ssh-ed25519 " in known for node in lab3.nodes)


def test_host_keys_are_checked(lab3: Lab, tmp_path: Path) -> None:
    node = lab3.nodes[0]
    strict = [a if not a.startswith("UserKnownHostsFile=") else f"UserKnownHostsFile={tmp_path / 'empty'}"
              for a in node.ssh_command()]
    result = subprocess.run([*strict, "true"], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "Host key verification failed" in result.stderr


def test_nodes_reach_the_debian_mirror_and_nothing_else(lab3: Lab) -> None:
    node = lab3.nodes[1]
    code = node.ssh("curl -sS -o /dev/null -w '%{http_code}' --max-time 20 "
                    "http://deb.debian.org/debian/dists/bookworm/Release").stdout
    assert code == "200"
    host_address = subprocess.run(["ip", "-4", "-o", "route", "get", lab3.mirror_ips[0]], capture_output=True,
                                  text=True).stdout.split(" src ")[1].split()[0]
    blocked = node.ssh(f"timeout 5 bash -c '</dev/tcp/{host_address}/22' && echo open || echo blocked",
                       check=False, timeout=30).stdout.strip()
    assert blocked == "blocked"
    assert node.ssh(f"ping -c1 -W2 {lab3.nodes[2].ip} >/dev/null && echo ok").stdout.strip() == "ok"


def test_node_added_later_stays_out_of_the_inventory_until_asked_and_survives_reboot(lab_factory) -> None:
    lab = lab_factory(1)
    added = lab.add_node()
    assert added.name == "n2"
    assert [n.name for n in load_inventory(lab.inventory_path).nodes] == ["n1"]
    assert added.ssh("hostname", user="tester").stdout.strip() == "n2"
    lab.write_inventory(["n1", "n2"])
    assert [n.name for n in load_inventory(lab.inventory_path).workers] == ["n2"]
    # /run is emptied by a boot: the marker tells the node that answers after the reboot from the one before it.
    added.ssh("touch /run/cb-before-reboot")
    added.ssh("systemctl reboot", check=False, timeout=30)
    deadline = time.monotonic() + 90
    while True:
        added._wait_for_sshd(max(1.0, deadline - time.monotonic()))
        if added.ssh("test -e /run/cb-before-reboot", check=False, timeout=30).returncode == 1:
            break
        assert time.monotonic() < deadline, "the node never came back from its reboot"
        time.sleep(0.2)
    assert added.ssh("cat /proc/1/comm").stdout.strip() == "systemd"
    lab.down()


def test_teardown_leaves_nothing_behind() -> None:
    lab = Lab.up(2)
    slot, cgroups, lab_dir = lab.slot, lab_cgroups(lab), lab.dir
    assert traces_of(slot, cgroups, lab_dir)  # the probe sees a live lab
    lab.down()
    assert traces_of(slot, cgroups, lab_dir) == []


# How long a killed run's lab may outlive it: its reaper stops the nodes (a grace of 5 s each, in parallel) and
# removes the slot's namespaces, mounts and rules, on a machine shared with other work.
REAP_BOUND_S = 120
# A pytest run of its own that holds a lab (the suite's own fixture) until it is killed.
HOLDING_RUN = """
import os, time
from pathlib import Path
from tests.lab.fixtures import lab_factory  # noqa: F401 (the fixture the test takes)

def test_holds_a_lab(lab_factory):
    lab = lab_factory(2)
    Path(os.environ["CB_LAB_SLOT_FILE"]).write_text(str(lab.slot))
    time.sleep(900)
"""


def _reapers(slot: int) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"tests.lab.lab" in argv and b"reap" in argv and str(slot).encode() in argv:
            found.append(int(pid))
    return found


def _wait_for_no_traces(slot: int, cgroups: list[Path], lab_dir: Path, bound_s: float) -> list[str]:
    deadline = time.monotonic() + bound_s
    while True:
        left = traces_of(slot, cgroups, lab_dir) + [f"reaper {pid}" for pid in _reapers(slot)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1)


def test_a_killed_pytest_run_leaves_no_lab_running(tmp_path: Path) -> None:
    """kill -9 of a pytest run in the middle of a lab test (a CI time limit, a killed terminal): its nodes, their
    namespaces, mounts and rules are gone within a bound, without anyone starting a lab again."""
    test_file, slot_file = tmp_path / "test_holding.py", tmp_path / "slot"
    test_file.write_text(HOLDING_RUN)
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                           cwd=REPO_ROOT, env=os.environ | {"CB_LAB_SLOT_FILE": str(slot_file)},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not slot_file.exists() or not slot_file.read_text():
            assert run.poll() is None, "the holding run ended before its lab was up"
            assert time.monotonic() < deadline, "the holding run's lab did not come up"
            time.sleep(0.5)
        slot = int(slot_file.read_text())
        lab_dir = lablib.slot_dir(slot)
        nodes = list((lab_dir / "nodes").iterdir())
        cgroups = [Path(p) for d in [lab_dir, *nodes] for p in (d / "cgroups").read_text().split()]
        running = traces_of(slot, cgroups, lab_dir)
        # The nodes run, and so does what ends them with the run: a watcher in a session of its own, which the
        # kill of the run's process group below does not reach. (Without one, the traces go only when some other
        # session starts a lab and cleans stale slots: on a shared machine that may happen within the bound too.)
        assert any(t.startswith("process") for t in running), running
        assert _reapers(slot), "no process watches the run to end its lab"
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # the whole run: pytest and any ssh or ansible it started
        run.wait()
    assert _wait_for_no_traces(slot, cgroups, lab_dir, REAP_BOUND_S) == []


def test_a_lab_whose_reaper_was_killed_too_is_cleaned_up_at_the_next_start() -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom tests.lab.lab import Lab\nlab = Lab.up(1)\n"
         "print(lab.slot, flush=True)\ntime.sleep(600)"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        slot = int(owner.stdout.readline())  # type: ignore[union-attr]
        for pid in _reapers(slot):
            os.kill(pid, signal.SIGKILL)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    lab_dir = lablib.slot_dir(slot)
    cgroups = [Path(p) for p in (lab_dir / "cgroups").read_text().split()]
    assert any(t.startswith("netns") for t in traces_of(slot, cgroups, lab_dir))
    assert slot in lablib.cleanup_stale()
    assert traces_of(slot, cgroups, lab_dir) == []
