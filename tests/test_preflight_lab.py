"""`bootstrap preflight` against real nodes: a healthy lab passes; each planted problem is reported on the
node it was planted on, with its fix; unreachable hosts and unknown or changed host keys fail fast and clearly.
Also the playbook driver over real SSH: per-host results and a run log."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provision.cli.app import app
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import Settings, load_settings
from provision.nodes.preflight.run import PreflightReport, run_preflight
from provision.nodes.runner import run_playbook
from tests.lab.lab import Lab
from tests.support.output import widest_table_line

pytestmark = pytest.mark.lab
PROBE_PLAYBOOK = str(Path(__file__).resolve().parent / "playbooks" / "lab_ssh_probe.yml")


def preflight(lab: Lab, inventory: Path | None = None, settings: Settings | None = None,
              become_password: str | None = None) -> PreflightReport:
    cluster = load_inventory(inventory or lab.inventory_path)
    return run_preflight(cluster, settings or load_settings(lab.config_path), become_password=become_password)


# The lab's nodes are cgroup v1 (this host's kernel) and its settings accept that (lab.base_settings): preflight
# warns about it on every node, which is the lab's doing, not a problem of the node.
LAB_ACCEPTED = "cgroup_v1_allowed"


def problems(report: PreflightReport, node: str) -> dict[str, str]:
    return {c.check: c.status for c in report.node(node).findings if c.status != "ok" and c.check != LAB_ACCEPTED}


def test_preflight_passes_on_healthy_nodes(lab3: Lab) -> None:
    report = preflight(lab3)
    assert report.ok, [p.describe() for p in report.blocking]
    assert [(p.subject, p.check) for p in report.warnings] == [(n, LAB_ACCEPTED) for n in ("n1", "n2", "n3")]
    assert [n.name for n in report.nodes] == ["n1", "n2", "n3"]
    for node in report.nodes:
        assert node.finding("os").detail == "Debian GNU/Linux 12"
        assert node.finding("ports").detail == "free"
    assert report.gpu_counts == {"n1": 0, "n2": 0, "n3": 0}


def test_cli_preflight_exits_zero_and_draws_one_row_per_node_within_80_columns(lab3: Lab) -> None:
    result = CliRunner().invoke(app, ["preflight", "-i", str(lab3.inventory_path), "-c", str(lab3.config_path)],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert widest_table_line(result.output, [n.name for n in lab3.nodes]) <= 80, lines
    rows = [line.split() for line in lines if line.startswith("n")]
    # warn: the lab's own acceptance of this host's cgroup v1 (LAB_ACCEPTED), listed under the table.
    assert rows == [["n1", "control-plane", "warn", "Debian", "GNU/Linux", "12", "0"],
                    ["n2", "worker", "warn", "Debian", "GNU/Linux", "12", "0"],
                    ["n3", "worker", "warn", "Debian", "GNU/Linux", "12", "0"]]
    assert "FAIL" not in result.output and LAB_ACCEPTED in result.output


@pytest.fixture(scope="module")
def troubled_lab(lab_factory) -> Lab:
    """Four nodes, each with one planted problem: n1 a listener on 6443, n2 a swap line in /etc/fstab,
    n3 and n4 the same hostname."""
    lab = lab_factory(4)
    lab.node("n1").ssh("systemd-run --unit cb-squatter python3 -m http.server 6443 && "
                       "for i in $(seq 50); do ss -ltn | grep -q ':6443 ' && exit 0; sleep 0.1; done; exit 1")
    lab.node("n2").ssh("echo '/swapfile none swap sw 0 0' >> /etc/fstab")
    lab.node("n4").ssh("hostnamectl set-hostname n3")
    return lab


def test_each_planted_problem_is_reported_on_its_node_only(troubled_lab: Lab) -> None:
    report = preflight(troubled_lab)
    assert problems(report, "n1") == {"ports": "fail"}
    assert "6443 (python3" in report.node("n1").finding("ports").detail
    assert problems(report, "n2") == {"swap": "warn"}
    assert "/swapfile none swap" in report.node("n2").finding("swap").detail
    assert problems(report, "n3") == {"hostname": "fail"}
    assert problems(report, "n4") == {"hostname": "fail"}
    assert report.node("n4").finding("hostname").detail == "hostname n3 also on n3"
    assert {p.subject for p in report.blocking} == {"n1", "n3", "n4"}
    assert all(p.fix for p in report.blocking + report.warnings)


def test_cli_lists_the_fixes_and_exits_non_zero(troubled_lab: Lab) -> None:
    result = CliRunner().invoke(app, ["preflight", "-i", str(troubled_lab.inventory_path),
                                      "-c", str(troubled_lab.config_path)], env={"COLUMNS": "80"})
    assert result.exit_code == 1
    assert widest_table_line(result.output, [n.name for n in troubled_lab.nodes]) <= 80, result.output
    output = " ".join(result.output.split())
    assert "n1 control-plane FAIL" in output and "n2 worker warn" in output
    assert "FAIL n1: ports: in use: 6443" in output
    assert "fix: stop what listens there" in output
    assert "warn n2: swap" in output
    assert "3 blocking problems" in str(result.exception)


def test_a_finished_control_plane_is_already_part_of_the_cluster(lab_factory) -> None:
    lab = lab_factory(1)
    # A stand-in kube-apiserver: a process of that name on 6443, and the admin kubeconfig kubeadm leaves.
    lab.nodes[0].ssh("mkdir -p /etc/kubernetes && touch /etc/kubernetes/admin.conf && "
                     "cp /usr/bin/python3 /usr/local/bin/kube-apiserver && "
                     "systemd-run --unit fake-apiserver /usr/local/bin/kube-apiserver -m http.server 6443 && "
                     "for i in $(seq 50); do ss -ltn | grep -q ':6443 ' && exit 0; sleep 0.1; done; exit 1")
    report = preflight(lab)
    assert report.ok, [p.describe() for p in report.blocking]
    assert report.node("n1").finding("ports").detail == "already part of the cluster (kube-apiserver)"
    lab.down()


def test_an_unreachable_host_fails_fast_and_is_named(lab3: Lab, tmp_path: Path) -> None:
    inventory = lab3.write_inventory(["n1", "n2"], path=tmp_path / "hosts.ini",
                                     extra_hosts={"ghost": lab3.unused_ip()})
    settings = load_settings(lab3.config_path)
    started = time.monotonic()
    report = preflight(lab3, inventory)
    elapsed = time.monotonic() - started
    assert elapsed < settings.ssh.connect_timeout_s + 5
    assert problems(report, "ghost") == {"ssh": "fail"}
    assert report.node("ghost").finding("ssh").detail.startswith("unreachable")
    assert problems(report, "n2") == {}
    result = CliRunner().invoke(app, ["preflight", "-i", str(inventory), "-c", str(lab3.config_path)],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "ghost: ssh: unreachable" in result.output


def test_unknown_host_key_is_refused_unless_accepted_and_a_changed_one_always(lab_factory) -> None:
    lab = lab_factory(2)
    n2 = lab.node("n2")
    lab.forget_host_key(n2)
    report = preflight(lab)
    check = report.node("n2").finding("ssh")
    assert check.status == "fail" and "host key" in check.detail and "is unknown" in check.detail
    assert f"ssh-keyscan {n2.ip} >> {lab.known_hosts_path}" in check.fix and "--accept-new-host-keys" in check.fix
    assert problems(report, "n1") == {}

    settings = load_settings(lab.config_path)
    accepting = settings.model_copy(update={"ssh": settings.ssh.model_copy(update={"accept_new_host_keys": True})})
    assert preflight(lab, settings=accepting).ok
    assert f"{n2.ip} " in lab.known_hosts_path.read_text()
    assert preflight(lab).ok  # now known: accepted once, checked from then on

    # n2's address now answers with other keys (a reinstalled machine, or someone in the middle)
    lines = lab.known_hosts_path.read_text().splitlines()
    n1_keys = [line.split(" ", 1)[1] for line in lines if line.startswith(f"{lab.node('n1').ip} ")]
    others = [line for line in lines if not line.startswith(f"{n2.ip} ")]
    lab.known_hosts_path.write_text("\n".join(others + [f"{n2.ip} {key}" for key in n1_keys]) + "\n")
    for settings_used in (settings, accepting):
        check = preflight(lab, settings=settings_used).node("n2").finding("ssh")
        assert check.status == "fail" and "host key CHANGED" in check.detail
        assert "ssh-keygen -R" in check.fix
    lab.down()


def test_sudo_with_a_password_needs_ask_become_pass(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory(1)
    node = lab.nodes[0]
    node.ssh("useradd -m -s /bin/bash -G sudo ops && echo 'ops:op-secret-42' | chpasswd && "
             "install -d -o ops -g ops -m 700 /home/ops/.ssh && "
             "install -o ops -g ops -m 600 /root/.ssh/authorized_keys /home/ops/.ssh/authorized_keys")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(lab.inventory_path.read_text().replace("ansible_user=tester", "ansible_user=ops"))
    report = preflight(lab, inventory)
    sudo = report.node("n1").finding("sudo")
    assert sudo.status == "fail" and sudo.detail == "sudo asks ops for a password"
    assert "--ask-become-pass" in sudo.fix
    assert preflight(lab, inventory, become_password="op-secret-42").ok
    wrong = preflight(lab, inventory, become_password="not-it").node("n1").finding("sudo")
    assert wrong.status == "fail" and "rejected the become password" in wrong.detail
    assert "op-secret-42" not in repr(report) + repr(wrong)
    lab.down()


def test_a_playbook_over_ssh_reports_per_host_results_and_leaves_its_run_log(
        lab3: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = load_inventory(lab3.inventory_path)
    settings = load_settings(lab3.config_path)
    first = run_playbook(PROBE_PLAYBOOK, cluster, settings, phase="probe")
    assert first.ok, [f.describe() for f in first.failures]
    assert set(first.tally) == {"n1", "n2", "n3"}
    for host, tally in first.tally.items():
        assert (tally.ok, tally.failed, tally.unreachable) == (3, 0, False), host
    log = (first.run_dir / "run.log").read_text()
    assert all(f"{host}\tchanged\tLeave a marker" in log for host in ("n1", "n2", "n3"))
    assert (first.run_dir / "artifacts").is_dir()
    again = run_playbook(PROBE_PLAYBOOK, cluster, settings, phase="probe")
    assert again.changed == {"n1": 0, "n2": 0, "n3": 0}
    lab3.nodes[0].ssh("rm /root/cb-probe-marker")


@pytest.mark.parametrize("executor", ["auto", "mitogen"])
def test_a_playbook_with_accept_new_host_keys_records_a_new_key_and_refuses_a_changed_one(
        lab_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, executor: str) -> None:
    lab = lab_factory(2)
    n1, n2 = lab.nodes
    # n1 is seen for the first time; n2's address answers with other keys than the recorded ones (n1's).
    lines = lab.known_hosts_path.read_text().splitlines()
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("".join(f"{n2.ip} {line.split(' ', 1)[1]}\n" for line in lines
                                   if line.startswith(f"{n1.ip} ")))
    settings = load_settings(lab.config_path)
    accepting = settings.model_copy(update={
        "ssh": settings.ssh.model_copy(update={"accept_new_host_keys": True, "known_hosts_file": str(known_hosts)}),
        "ansible": settings.ansible.model_copy(update={"executor": executor})})

    result = run_playbook(PROBE_PLAYBOOK, load_inventory(lab.inventory_path), accepting, phase="probe")

    # A changed key is refused whatever the executor: the run never reaches n2.
    assert result.tally["n2"].unreachable and result.tally["n2"].ok == 0
    assert n2.ssh("test -e /root/cb-probe-marker", check=False).returncode != 0
    if executor == "auto":
        # A new key is recorded on first contact and the node is used.
        assert (result.tally["n1"].ok, result.tally["n1"].unreachable) == (3, False)
        found = subprocess.run(["ssh-keygen", "-F", n1.ip, "-f", str(known_hosts)], capture_output=True, text=True)
        assert found.returncode == 0 and found.stdout.strip()
    lab.down()
