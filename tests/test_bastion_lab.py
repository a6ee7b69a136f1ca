"""Nodes reachable only through a bastion, as an inventory written for Ansible says it
(`ansible_ssh_common_args='-o ProxyJump=... -o UserKnownHostsFile=...'`): bootstrap's own connections
(preflight) and Ansible's (a playbook, with either executor) both go through the bastion, and every host key,
the bastion's included, is checked against the inventory's known_hosts file.

The lab: n1 is the bastion; SSH from this machine to n2 and n3 is dropped in the lab's hub, so only n1 (on the
nodes' bridge) reaches them.
"""
from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provision.cli.app import app
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import Settings, load_settings
from provision.nodes.preflight.run import run_preflight
from provision.nodes.runner import run_playbook
from provision.nodes.ssh import SshShell
from tests.lab.lab import Lab, LabNode
from tests.support.output import widest_table_line

PROBE_PLAYBOOK = str(Path(__file__).resolve().parent / "playbooks" / "lab_ssh_probe.yml")


def reachable_only_through(lab: Lab, nodes: list[LabNode]) -> None:
    """Drop SSH from this machine to `nodes` where it enters the lab (the hub's uplink); the other nodes still
    reach them over the bridge. The rules go with the lab's hub when the lab is torn down."""
    for node in nodes:
        subprocess.run(["ip", "netns", "exec", lab.hub, "iptables", "-w", "-I", "FORWARD", "-i", "uplink",
                        "-d", node.ip, "-p", "tcp", "--dport", "22", "-j", "DROP"], check=True, timeout=30)


def answers_ssh(address: str) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=3) as connection:
            return connection.recv(4) == b"SSH-"
    except OSError:
        return False


@pytest.fixture(scope="module")
def lab(lab_factory: Callable[..., Lab]) -> Lab:
    lab = lab_factory(3)
    reachable_only_through(lab, [lab.node("n2"), lab.node("n3")])
    return lab


def behind_bastion(lab: Lab, tmp_path: Path, known_hosts: Path) -> Path:
    """n2 (control plane) and n3 through n1, host keys from the inventory's own known_hosts file."""
    inventory = lab.write_inventory(["n2", "n3"], path=tmp_path / "hosts.ini")
    with inventory.open("a") as handle:
        handle.write(f"ansible_ssh_common_args='-o ProxyJump=tester@{lab.node('n1').ip} "
                     f"-o UserKnownHostsFile={known_hosts}'\n")
    return inventory


def without_lab_known_hosts(lab: Lab, tmp_path: Path) -> Settings:
    """The lab's settings with a known_hosts file that knows nothing: only the inventory's file can be used."""
    settings = load_settings(lab.config_path)
    return settings.model_copy(update={"ssh": settings.ssh.model_copy(
        update={"known_hosts_file": str(tmp_path / "empty_known_hosts")})})


def test_the_nodes_behind_the_bastion_are_not_reachable_directly(lab: Lab) -> None:
    assert answers_ssh(lab.node("n1").ip)
    assert not answers_ssh(lab.node("n2").ip) and not answers_ssh(lab.node("n3").ip)


def test_preflight_reaches_the_nodes_through_the_bastion(lab: Lab, tmp_path: Path) -> None:
    inventory = behind_bastion(lab, tmp_path, lab.known_hosts_path)
    report = run_preflight(load_inventory(inventory), without_lab_known_hosts(lab, tmp_path))
    assert report.ok, [p.describe() for p in report.blocking]
    assert [(n.name, n.finding("ssh").status) for n in report.nodes] == [("n2", "ok"), ("n3", "ok")]
    assert not (tmp_path / "empty_known_hosts").exists()

    result = CliRunner().invoke(app, ["preflight", "-i", str(inventory), "-c", str(lab.config_path)],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert widest_table_line(result.output, ["n2", "n3"]) <= 80, result.output


@pytest.mark.parametrize("executor", ["stock", "mitogen"])
def test_ansible_reaches_the_nodes_through_the_bastion(lab: Lab, tmp_path: Path, executor: str) -> None:
    inventory = behind_bastion(lab, tmp_path, lab.known_hosts_path)
    settings = without_lab_known_hosts(lab, tmp_path)
    settings = settings.model_copy(update={"ansible": settings.ansible.model_copy(update={"executor": executor})})
    result = run_playbook(PROBE_PLAYBOOK, load_inventory(inventory), settings, phase="probe")
    assert result.ok, [f.describe() for f in result.failures]
    assert {host: (t.ok, t.unreachable) for host, t in result.tally.items()} == {"n2": (3, False), "n3": (3, False)}
    # The markers it left, read back over bootstrap's own route.
    for node in load_inventory(inventory).nodes:
        with SshShell(node, settings.ssh) as shell:
            assert shell.run("cat /root/cb-probe-marker && rm /root/cb-probe-marker", sudo=True).stdout == \
                f"{node.name}\n"


def test_the_bastions_host_key_is_checked_too(lab: Lab, tmp_path: Path) -> None:
    bastion = lab.node("n1")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("".join(line + "\n" for line in lab.known_hosts_path.read_text().splitlines()
                                   if not line.startswith(f"{bastion.ip} ")))
    inventory = behind_bastion(lab, tmp_path, known_hosts)
    settings = without_lab_known_hosts(lab, tmp_path)

    check = run_preflight(load_inventory(inventory), settings).node("n2").finding("ssh")
    assert check is not None and check.status == "fail"
    assert check.detail.startswith(f"bastion tester@{bastion.ip}: host key") and "is unknown" in check.detail
    assert f"ssh-keyscan {bastion.ip} >> {known_hosts}" in check.fix

    result = run_playbook(PROBE_PLAYBOOK, load_inventory(inventory), settings, phase="probe")
    assert not result.ok and all(t.unreachable for t in result.tally.values())
    # ansible-core 2.19 passes on ssh's "Host key verification failed"; 2.21 says it in its own words.
    assert all("host key" in f.message.lower() for f in result.failures), result.failures
