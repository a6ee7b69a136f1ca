"""What prepare's roles want of a node is compared with what the node read found in Python, on the node
(playbooks/module_utils/cb_node_want.py, run by the node_state role's cb_node_state), not in Jinja: a fresh node
differs in every part prepare configures, a node as prepare left it in none, and a node edited by hand in exactly
the part that was edited."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.ansible_modules import run
from tests.support.roles import Rendered, node_want

want_lib = node_want

EMPTY = {"exists": False, "content": None, "sha256": None, "mode": None, "mtime": None}


def converged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The read of a node on which every wanted part holds: built from the want alone, as prepare leaves a node."""
    state: dict[str, Any] = {"files": {}, "dirs": {}, "units": {}, "sysctls": {}, "modules_loaded": [], "missing": [],
                             "holds": [], "stale": [], "versions": {}, "marked": {}, "hostname": "",
                             "swap": {"active": [], "fstab": []}, "cgroup_fs": "cgroup2fs"}

    def write(path: str, content: str, mode: str = "0644") -> None:
        state["files"][path] = {"exists": True, "content": content, "mode": mode,
                                "sha256": hashlib.sha256(content.encode()).hexdigest(), "mtime": 0.0}

    for part in parts:
        for path, want in part.get("files", {}).items():
            if "content_by_major" in want:
                state["versions"][want["content_by_major"]["version"]] = "containerd containerd.io v2.1.4 abc"
                write(path, want["content_by_major"]["2"], want.get("mode", "0644"))
            elif not want.get("absent"):
                write(path, want.get("content", want.get("stripped", "")), want.get("mode", "0644"))
        state["dirs"] |= dict.fromkeys(part.get("dirs", []), True)
        for unit, want in part.get("units", {}).items():
            found = state["units"].setdefault(unit, {"load": "loaded", "active": "active", "enabled": "enabled"})
            found |= {key: want[key] for key in ("load", "active", "enabled") if key in want}
            if want.get("load_not") == "loaded":
                found["load"] = "not-found"
        state["sysctls"] |= {key: str(value) for key, value in part.get("sysctls", {}).items()}
        state["modules_loaded"] += part.get("modules_loaded", [])
        state["holds"] += part.get("held", [])
        for name in part.get("versions", []):
            state["versions"].setdefault(name, "containerd containerd.io v2.1.4 abc")
        if "hostname" in part:
            state["hostname"] = part["hostname"]
            write("/etc/hostname", part["hostname"] + "\n")
        if "block" in part:
            block = part["block"]
            write(block["path"], f"127.0.0.1 localhost\n# BEGIN {block['marker']}\n{block['content']}\n"
                                 f"# END {block['marker']}\n")
        if "assignments" in part:
            write(part["assignments"]["path"], "".join(f"{k} = {v}\n" for k, v in part["assignments"]["values"].items()))
        if "line" in part:
            write(part["line"]["path"], f"# options\n{part['line']['line']}\n")
        if "selinux_permissive" in part:
            write("/sys/fs/selinux/enforce", "0\n")
            write("/etc/selinux/config", "SELINUX=permissive\n")
        if "no_marked" in part:
            state["marked"][part["no_marked"]["glob"]] = []
        if "repo" in part:
            repo = part["repo"]
            write(repo["list"], repo["sources"])
            write(repo["key"], "-----BEGIN PGP PUBLIC KEY BLOCK-----\n")
            write(repo["stamp"], hashlib.sha256((repo["sources"] + "-----BEGIN PGP PUBLIC KEY BLOCK-----\n")
                                                .encode()).hexdigest() + "\n")
    for part in parts:  # after every file is there: the stamps of their checksums (config.toml: ours, copied)
        if "stamp" in part:
            for path in part["stamp"]["of"]:
                state["files"].setdefault(path, state["files"][part["stamp"]["of"][0]])
            write(part["stamp"]["path"], "".join(f"{state['files'][p]['sha256']}  -\n" for p in part["stamp"]["of"]))
    return state


def prepare_want(os_name: str, settings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every part prepare.yml's roles want of a node of this OS (a GPU node: the nvidia role's repositories too)."""
    return [part for read in Rendered(os_name, settings)("node_state_reads") for part in read.get("want", [])]


@pytest.mark.parametrize("os_name", ["debian12", "debian13", "ubuntu2404", "rocky9", "rocky8"])
def test_a_fresh_node_differs_in_every_part_prepare_configures(os_name: str) -> None:
    r = Rendered(os_name)
    parts = prepare_want(os_name)
    differs = r("node_state_differs")
    # Parts that hold on a fresh node: cgroup v2 (the fresh read is on it), no OS mirror, no firewall, no registry
    # mirror, no daemon on an older configuration (none runs), chrony's drop-in (for containers: this is a VM), and
    # SELinux (it is not there).
    holding = {"os_prep.cgroup", "os_prep.os_mirror", "os_prep.firewall", "container_runtime.mirrors",
               "container_runtime.containerd_fresh", "container_runtime.docker_fresh", "os_prep.chrony_fresh",
               "os_prep.chrony_dropin", "os_prep.selinux_now", "os_prep.selinux_config"}
    assert set(differs) == {part["name"] for part in parts} - holding
    # Every role skips nothing of its work there.
    assert r("os_prep_differs") and r("container_runtime_differs") and r("kubernetes_packages_differs")


@pytest.mark.parametrize("os_name", ["debian12", "debian13", "rocky9"])
@pytest.mark.parametrize("profile", [{}, {"mirrors": {"profile": "cn"}}, {"container_runtime": {"install_docker": False}}])
def test_a_node_as_prepare_left_it_differs_in_nothing(os_name: str, profile: dict[str, Any]) -> None:
    parts = [part for part in prepare_want(os_name, profile) if not part.get("always")]
    assert want_lib.differs(converged(parts), parts) == []
    # And the roles then skip every step.
    r = Rendered(os_name, profile, node_state_read={"cb_state": converged(parts) | {
        "differs": want_lib.differs(converged(parts), parts), "packages_asked": [], "policy_rc_d_ours": False}})
    assert r("os_prep_differs") == r("kubernetes_packages_differs") == []


# Hand edits of a converged Debian node, each with the one part it must make differ.
EDITS = {
    "hostname": (lambda s: s.update(hostname="other"), "os_prep.hostname"),
    "/etc/hosts": (lambda s: s["files"]["/etc/hosts"].update(content="127.0.0.1 localhost\n"), "os_prep.hosts"),
    "swap on": (lambda s: s["swap"]["active"].append("/swapfile"), "os_prep.swap"),
    "fstab swap": (lambda s: s["swap"]["fstab"].append("/swapfile none swap sw 0 0"), "os_prep.swap"),
    "swap.target": (lambda s: s["units"]["swap.target"].update(enabled="static"), "os_prep.swap"),
    "sysctl live": (lambda s: s["sysctls"].update({"net.ipv4.ip_forward": "0"}), "os_prep.sysctls"),
    "sysctl file": (lambda s: s["files"]["/etc/sysctl.d/99-cluster-bootstrap.conf"].update(
        content="net.ipv4.ip_forward = 0\n"), "os_prep.sysctls"),
    "module": (lambda s: s["modules_loaded"].remove("br_netfilter"), "os_prep.modules"),
    "modules file mode": (lambda s: s["files"]["/etc/modules-load.d/cluster-bootstrap.conf"].update(mode="0600"),
                          "os_prep.modules"),
    "chrony stopped": (lambda s: s["units"]["chrony"].update(active="inactive"), "os_prep.chrony_started"),
    "chrony stale": (lambda s: s["stale"].append("chrony"), "os_prep.chrony_fresh"),
    "crictl": (lambda s: s["files"]["/etc/crictl.yaml"].update(content="timeout: 2\n"), "container_runtime.crictl"),
    "docker daemon.json": (lambda s: s["files"]["/etc/docker/daemon.json"].update(content="{}\n"),
                           "container_runtime.docker_config"),
    "config.toml by hand": (lambda s: s["files"]["/etc/containerd/config.toml"].update(sha256="0" * 64),
                            "container_runtime.config"),
    "containerd 1.x": (lambda s: s["versions"].update(containerd="containerd 1.7.24 x"), "container_runtime.base"),
    "an old mirror file": (lambda s: s["marked"].update({"/etc/containerd/certs.d/*/hosts.toml": ["/etc/x"]}),
                           "container_runtime.mirrors"),
    "kubelet disabled": (lambda s: s["units"]["kubelet"].update(enabled="disabled"), "kubernetes_packages.kubelet"),
    "hold released": (lambda s: s["holds"].remove("kubelet"), "kubernetes_packages.held"),
    "kubeadm moved": (lambda s: s["missing"].append("kubeadm"), "kubernetes_packages.held"),
    "repository list": (lambda s: s["files"]["/etc/apt/sources.list.d/cb-kubernetes.sources"].update(
        content="Types: deb\n"), "packages.repo.kubernetes"),
    "firewalld installed": (lambda s: s["units"]["firewalld.service"].update(load="loaded"), "os_prep.firewall"),
}


@pytest.mark.parametrize("edit", EDITS)
def test_a_hand_edit_makes_exactly_its_part_differ(edit: str) -> None:
    parts = [part for part in prepare_want("debian12") if not part.get("always")]
    state = converged(parts)
    state["missing"] = []
    change, part = EDITS[edit]
    change(state)
    assert want_lib.differs(state, parts) == [part]


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80),
       st.sampled_from(["content", "stripped"]))
def test_a_file_holds_exactly_when_its_content_is_the_wanted_one(found: str, kind: str) -> None:
    wanted = "runtime-endpoint: unix:///run/containerd/containerd.sock\n"
    part = {"name": "f", "files": {"/f": {kind: wanted.strip() if kind == "stripped" else wanted, "mode": "0644"}}}
    state = converged([part])
    state["files"]["/f"]["content"] = found
    holds = found == wanted if kind == "content" else found.strip() == wanted.strip()
    assert want_lib.differs(state, [part]) == ([] if holds else ["f"])


def test_sysctl_assignments_are_read_as_the_kernel_reads_the_file() -> None:
    text = "# ours\nnet.ipv4.ip_forward=1\n  net.bridge.bridge-nf-call-iptables = 1 \n#net.x = 2\nother.key = 5\n"
    assert want_lib.assignments(text, ["net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables", "net.y"]) == \
        ["net.bridge.bridge-nf-call-iptables=1", "net.ipv4.ip_forward=1"]
    assert want_lib.block_between("a\n# BEGIN m\n 10.0.0.1 n1\n# END m\n", "m") == "10.0.0.1 n1"
    assert want_lib.block_between("a\n# BEGIN m\n10.0.0.1 n1\n", "m") is None


def test_an_unknown_check_is_refused_not_taken_as_holding() -> None:
    with pytest.raises(ValueError, match="unknown check: hostnmae"):
        want_lib.differs(converged([]), [{"name": "x", "hostnmae": "n1"}])


def test_the_module_reads_what_the_want_names_and_says_what_differs(tmp_path: Path) -> None:
    """cb_node_state on this machine: the files a part wants are read without being asked for separately."""
    good, bad = tmp_path / "good.conf", tmp_path / "bad.conf"
    good.write_text("a = 1\n")
    bad.write_text("a = 2\n")
    os.chmod(good, 0o644)
    os.chmod(bad, 0o644)
    want = [{"name": "good", "files": {str(good): {"content": "a = 1\n", "mode": "0644"}}},
            {"name": "bad", "assignments": {"path": str(bad), "values": {"a": "1"}}},
            {"name": "absent", "files": {str(tmp_path / "none"): {"absent": True}}},
            {"name": "dir", "dirs": [str(tmp_path / "missing")]}]
    result = run("cb_node_state", {"want": want}, tmp_path)
    assert result.get("failed") is not True, result
    state = result["cb_state"]
    assert state["differs"] == ["bad", "dir"]
    assert state["files"][str(good)]["content"] == "a = 1\n"
