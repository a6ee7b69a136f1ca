"""What prepare reads from a node before it changes anything (library/cb_node_facts.py, library/cb_node_state.py),
judged from recorded node output: the roles skip a part only when this reading says it holds."""
from __future__ import annotations

from typing import Any

from tests.support.library import library


class RecordedNode:
    """An AnsibleModule stand-in whose commands answer with recorded output."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def run_command(self, argv: list[str], **_: Any) -> tuple[int, str, str]:
        return 0, self.answers[argv[0]], ""


def test_a_systemd_nspawn_node_is_a_container_as_the_setup_module_says() -> None:
    facts = library("cb_node_facts")
    nspawn_environ = ["PATH=/usr/bin", "container=systemd-nspawn", "container_uuid=0f3c"]
    assert facts.container_type(["0::/init.scope"], nspawn_environ, openvz=False) == "container"
    assert facts.container_type(["0::/system.slice/docker-3a4f.scope"], [], openvz=False) == "docker"
    assert facts.container_type(["0::/init.scope"], ["container=podman"], openvz=False) == "podman"
    # A VM or bare metal is not a container: systemd-detect-virt names the hypervisor then.
    assert facts.container_type(["0::/init.scope"], ["PATH=/usr/bin"], openvz=False) is None


def test_units_are_read_from_one_systemctl_show_in_the_order_asked() -> None:
    state = library("cb_node_state")
    recorded = ("MainPID=812\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n\n"
                "MainPID=0\nLoadState=not-found\nActiveState=inactive\nUnitFileState=\n\n"
                "MainPID=0\nLoadState=masked\nActiveState=inactive\nUnitFileState=masked\n")
    units = state.parse_systemctl_show(recorded, ["containerd", "ufw.service", "swap.target"])
    assert units["containerd"] == {"load": "loaded", "active": "active", "enabled": "enabled", "pid": "812"}
    assert units["ufw.service"]["load"] == "not-found"
    assert units["swap.target"]["enabled"] == "masked"


def test_a_package_at_another_version_than_the_pinned_one_counts_as_missing() -> None:
    state = library("cb_node_state")
    dpkg = ("kubeadm|hold ok installed|1.35.0-1.1\nkubelet|hold ok installed|1.34.2-1.1\n"
            "socat|deinstall ok config-files|1.7.4.4-2\nchrony|install ok installed|4.3-2+deb12u1\n")
    node = RecordedNode({"dpkg-query": dpkg})
    missing = state.missing_debs(node, ["kubeadm=1.35.0-*", "kubelet=1.35.0-*", "socat", "chrony", "ebtables"])
    assert missing == ["kubelet=1.35.0-*", "socat", "ebtables"]
