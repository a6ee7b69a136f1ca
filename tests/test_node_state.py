"""What prepare reads from a node before it changes anything (the node_state role's cb_node_facts and
cb_node_state), judged from recorded node output: the roles skip a part only when this reading says it holds."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.ansible_modules import load as library
from tests.support.ansible_modules import run


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
    missing = state.missing_debs(node.run_command, ["kubeadm=1.35.0-*", "kubelet=1.35.0-*", "socat", "chrony",
                                                    "ebtables"])
    assert missing == ["kubelet=1.35.0-*", "socat", "ebtables"]


def test_a_module_stream_always_counts_as_missing_for_dnf_to_judge() -> None:
    """rpm cannot say whether a dnf module stream is enabled and installed: dnf is asked (and changes nothing the
    second time), so the driver's stream is never skipped by the read nor by an install."""
    state = library("cb_node_state")
    installed = {"kernel-headers", "nvidia-container-toolkit-1.19.1-1"}
    missing = state.missing_rpms(lambda argv: (0 if argv[-1] in installed else 1, "", ""),
                                 ["kernel-headers", "@nvidia-driver:580-open", "nvidia-container-toolkit-1.19.1-1",
                                  "epel-release"])
    assert missing == ["@nvidia-driver:580-open", "epel-release"]


def test_the_read_finds_what_each_role_asked_for_and_only_files_that_carry_its_mark(tmp_path: Path) -> None:
    """The read knows no role: a glob with its mark (container_runtime's registry mirror files) and a version line
    come back under the names the role asked with; a file without the mark is the operator's and is not listed."""
    ours, theirs = tmp_path / "docker.io" / "hosts.toml", tmp_path / "quay.io" / "hosts.toml"
    for path, text in ((ours, "# written (cluster-bootstrap setting x)\n"), (theirs, "server = 'https://q'\n")):
        path.parent.mkdir()
        path.write_text(text)
    listed = tmp_path / "listed.txt"
    listed.write_text("hello\n")
    result = run("cb_node_state", {"files": [str(listed), str(tmp_path / "absent")], "dirs": [str(tmp_path)],
                                   "marked": [{"glob": f"{tmp_path}/*/hosts.toml",
                                               "marker": "cluster-bootstrap setting x"}],
                                   "versions": {"python": ["python3", "--version"], "absent": ["no-such-program"]}},
                 tmp_path)
    state = result["cb_state"]
    assert not result["changed"]
    assert state["marked"] == {f"{tmp_path}/*/hosts.toml": [str(ours)]}
    assert state["versions"]["python"].startswith("Python 3.") and state["versions"]["absent"] is None
    assert state["files"][str(listed)]["content"] == "hello\n" and not state["files"][str(tmp_path / "absent")]["exists"]
    assert state["dirs"] == {str(tmp_path): True}
