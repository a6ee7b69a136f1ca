"""Sources proven before any change: the index files a run will fetch are requested from where the packages will be
fetched, and each failure is named with the setting that changes it. Here the requests run on this machine
(LocalShell, the same code path as a node over SSH) against the mirror stand-in on 127.0.0.1; the lab test
(tests/test_sources_lab.py) asks real nodes."""
from __future__ import annotations

import ast
import shlex
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision.inputs.inventory import Node, load_inventory
from provision.inputs.platforms import PLATFORMS, Platform
from provision.inputs.settings import parse_settings
from provision.nodes.sources_check import (
    ASK_PROGRAM,
    NodeTarget,
    SourceIndex,
    SourcesReport,
    check_sources,
    request_indexes,
    source_indexes,
)
from provision.nodes.ssh import CommandResult, LocalShell
from tests.lab.mirror import MirrorServer, write_faults

DEB = "/kubernetes/v1.35/deb/"


def platform(name: str) -> Platform:
    return next(p for p in PLATFORMS if isinstance(p, Platform) and p.name.startswith(name))


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[tuple[str, MirrorServer]]:
    root = tmp_path / "root"
    (root / DEB.strip("/")).mkdir(parents=True)
    (root / DEB.strip("/") / "InRelease").write_text("signed\n")
    # A repository with a Release and no InRelease (apt falls back to it).
    (root / "docker/debian/dists/bookworm").mkdir(parents=True)
    (root / "docker/debian/dists/bookworm/Release").write_text("unsigned\n")
    server = MirrorServer("127.0.0.1", 0, root, tmp_path / "faults.json", tmp_path / "requests.log")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", server
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def index(name: str, url: str, setting: str = "mirrors.kubernetes_repo") -> SourceIndex:
    return SourceIndex(name, setting, url)


def test_each_index_is_answered_by_what_the_source_really_says(mirror: tuple[str, MirrorServer],
                                                                  tmp_path: Path) -> None:
    url, server = mirror
    present = tmp_path / "offline" / "InRelease"
    present.parent.mkdir()
    present.write_text("x")
    indexes = [index("served", f"{url}{DEB}InRelease"),
               index("release only", f"{url}/docker/debian/dists/bookworm/InRelease"),
               index("missing", f"{url}/kubernetes/v1.36/deb/InRelease"),
               index("manifest", f"{url}/calico/v3.33.0/manifests/calico.yaml", "mirrors.calico_manifest"),
               index("broken", f"{url}/broken/repodata/repomd.xml"),
               index("nobody there", f"http://127.0.0.1:{closed_port()}/x/repodata/repomd.xml"),
               index("on disk", f"file://{present}"),
               index("not on disk", f"file://{tmp_path}/offline/nothing/repodata/repomd.xml", "offline.source")]
    write_faults(server.faults_file, [{"id": "down", "path": "/broken/repodata/repomd.xml", "status": 503}])
    answers = {a.index.name: (a.ok, a.detail) for a in request_indexes(LocalShell(), indexes, timeout_s=120)}
    assert answers == {
        "served": (True, "HTTP 200"), "release only": (True, "HTTP 200"), "missing": (False, "HTTP 404"),
        "manifest": (False, "HTTP 404"), "broken": (False, "HTTP 503"), "nobody there": (False, "could not connect"),
        "on disk": (True, "present"), "not on disk": (False, "no such file on the node"),
    }


def test_one_line_per_source_names_the_nodes_and_the_setting_that_changes_it(mirror: tuple[str, MirrorServer],
                                                                               tmp_path: Path) -> None:
    url, _ = mirror
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=127.0.0.2\n[workers]\nw1 ansible_host=127.0.0.3\n")
    cluster = load_inventory(hosts)
    settings = parse_settings({"kubernetes": {"version": "1.36"},
                               "mirrors": {"kubernetes_repo": f"{url}/kubernetes", "calico_manifest": f"{url}/calico"}})
    targets = {n.name: NodeTarget(n, platform("Debian 12"), codename="bookworm", containerd_source="distribution")
               for n in cluster.nodes}
    report = check_sources(cluster, settings, targets, shell_for=lambda node: LocalShell(node.name))
    lines = report.lines()
    assert lines == [
        f"Kubernetes packages {url}/kubernetes/v1.36/deb/InRelease: HTTP 404 from cp1, w1: set mirrors.kubernetes_repo "
        "to a source that has it (or mirrors.profile / offline.source, docs/offline.md), or give the nodes access to it",
        f"Calico manifest {url}/calico/v3.33.0/manifests/calico.yaml: HTTP 404 from cp1: set mirrors.calico_manifest "
        "to a source that has it (or mirrors.profile / offline.source, docs/offline.md), or give the nodes access to it",
    ]
    # Only the first control plane fetches manifests.
    assert [a.index.name for a in report.answers["w1"]] == ["Kubernetes packages"]


def load_node() -> Node:
    return Node(name="n1", host="n1", address="127.0.0.1", role="worker", user="root")


def test_a_run_that_prepares_nothing_asks_for_no_package_index(tmp_path: Path) -> None:
    target = NodeTarget(load_node(), platform("Debian 12"), codename="bookworm")
    settings = parse_settings({"addons": {"enabled": ["volcano", "trainer"]}})
    names = [i.name for i in source_indexes(settings, target, control_plane=True, packages=False, calico=False)]
    assert names == ["Volcano installer manifest", "Kubeflow Trainer v2 git repository"]
    everything = source_indexes(settings, target, control_plane=True)
    assert [i.url for i in everything if i.name == "Kubeflow Trainer v2 git repository"] == [
        "https://github.com/kubeflow/trainer.git/info/refs?service=git-upload-pack"]
    assert SourcesReport().lines() == []


class MinimalNode(LocalShell):
    """This machine as a minimal node (debootstrap's minbase, a minimal cloud image) is to a command: the shell's
    own tools on its PATH, no curl, no wget and no python3 there (its interpreter is at the path the platform
    table names)."""

    def __init__(self, name: str, tools: Path) -> None:
        super().__init__(name)
        self.tools = tools

    def run(self, command: str, *, sudo: bool = False, timeout_s: float = 60) -> CommandResult:
        return super().run(f"PATH={shlex.quote(str(self.tools))}; export PATH\n{command}", sudo=sudo,
                           timeout_s=timeout_s)


@pytest.fixture
def minimal_tools(tmp_path: Path) -> Path:
    tools = tmp_path / "minbase-bin"
    tools.mkdir()
    for tool in ("sh", "cat", "sed", "grep", "awk", "printf"):
        found = shutil.which(tool)
        if found:
            (tools / tool).symlink_to(found)
    assert not any(shutil.which(tool, path=str(tools)) for tool in ("curl", "wget", "python3"))
    return tools


def test_a_node_without_curl_or_wget_is_asked_with_its_python(mirror: tuple[str, MirrorServer], tmp_path: Path,
                                                             minimal_tools: Path) -> None:
    """Issue 34.3: a minimal node has neither curl nor wget; it is asked with the Python Ansible needs there anyway,
    and its sources pass when they answer (before, every index of such a node failed: "not asked")."""
    url, _ = mirror
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=127.0.0.2\n")
    cluster = load_inventory(hosts)
    settings = parse_settings({"kubernetes": {"version": "1.35"}, "mirrors": {"kubernetes_repo": f"{url}/kubernetes"}})
    targets = {n.name: NodeTarget(n, platform("Debian 12"), codename="bookworm", containerd_source="distribution")
               for n in cluster.nodes}
    report = check_sources(cluster, settings, targets, calico=False,
                           shell_for=lambda node: MinimalNode(node.name, minimal_tools))
    assert [(a.index.name, a.ok, a.detail) for a in report.answers["cp1"]] == [
        ("Kubernetes packages", True, "HTTP 200")]
    assert report.lines() == []


def test_a_node_with_no_python_to_ask_with_is_told_so_and_not_sent_to_fix_the_source(
        mirror: tuple[str, MirrorServer], minimal_tools: Path) -> None:
    url, _ = mirror
    indexes = [index("served", f"{url}{DEB}InRelease")]
    answers = request_indexes(MinimalNode("n1", minimal_tools), indexes, pythons=("/nonexistent/python3",))
    assert [(a.ok, a.asked) for a in answers] == [(False, False)]
    (line,) = SourcesReport({"n1": tuple(answers)}).lines()
    assert line == ("n1: its sources were not asked: the node has no Python to ask with (looked for "
                    "/nonexistent/python3, python3 on its PATH): install python3 there (Ansible needs it too)")
    assert "mirrors." not in line and "give the nodes access" not in line


def test_the_program_the_nodes_run_is_python_36_and_the_standard_library_only() -> None:
    """It runs on EL8's platform-python (3.6) where the interpreter Ansible gets is not installed yet."""
    tree = ast.parse(ASK_PROGRAM, feature_version=(3, 6))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"os", "socket", "ssl", "sys", "threading", "http", "urllib"}
