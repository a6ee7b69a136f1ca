"""Sources proven before any change, on real nodes (Debian bookworm under systemd-nspawn, over SSH): a mirror that
carries the Kubernetes packages but not Calico's manifest is named, in one line per source with the setting that
changes it, by `bootstrap config check-sources` and by `up`'s preflight, and the refused `up` changes nothing on
the nodes. The mirror is the stand-in in the lab's hub (tests/lab/mirror.py), serving some paths and not others.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provision.cli.app import app
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import load_settings
from provision.inputs.state import ClusterState
from provision.phases import UP_PHASES, PhaseContext, run_phases, select_phases
from tests.lab.lab import Lab, MirrorStandIn
from tests.lab.repos import build_kubernetes_repo, write_config

# Debian 12's own containerd (1.6) runs Kubernetes 1.35: the bookworm nodes prepare for 1.35.
MINOR = "1.35"
CALICO = "/calico/v3.33.0/manifests/calico.yaml"
# A port of its own in the hub: lab3 is shared, and other tests serve their stand-ins on the default one.
PORT = 8093
# What prepare would change, read on a node: compared before and after a refused run.
SNAPSHOT = ("ls -1 /etc/apt/sources.list.d /etc/modules-load.d /etc/sysctl.d /etc/containerd 2>/dev/null; "
            "dpkg-query -W -f '${Package} ${Status}\\n' | sort | md5sum")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sources-mirror")
    build_kubernetes_repo(path, MINOR)
    return path


@pytest.fixture(scope="module")
def mirror(lab3: Lab, root: Path) -> MirrorStandIn:
    return lab3.serve_mirror(root, port=PORT)


@pytest.fixture(scope="module")
def config(lab3: Lab, mirror: MirrorStandIn, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(lab3, tmp_path_factory.mktemp("sources") / "cluster.yaml",
                        mirrors={"kubernetes_repo": f"{mirror.url}/kubernetes", "calico_manifest": f"{mirror.url}/calico"},
                        kubernetes={"version": MINOR}, container_runtime={"containerd_source": "distribution"})


@pytest.fixture
def without_calico(root: Path) -> Iterator[None]:
    (root / CALICO.lstrip("/")).unlink(missing_ok=True)
    yield
    (root / CALICO.lstrip("/")).unlink(missing_ok=True)


def snapshot(lab: Lab) -> dict[str, str]:
    return {node.name: node.ssh(SNAPSHOT).stdout for node in lab.nodes}


def test_check_sources_names_the_one_source_the_mirror_lacks_with_its_setting(
        lab3: Lab, mirror: MirrorStandIn, config: Path, without_calico: None) -> None:
    result = CliRunner().invoke(app, ["config", "check-sources", "-i", str(lab3.inventory_path), "-c", str(config)])
    assert result.exit_code == 1, result.output
    # Every node asked for the Kubernetes repository it will install from, and got it.
    for node in lab3.nodes:
        assert f"ok   {node.name}: Kubernetes packages {mirror.url}/kubernetes/v{MINOR}/deb/InRelease: HTTP 200" \
            in result.output
    assert f"FAIL n1: Calico manifest {mirror.url}{CALICO}: HTTP 404" in result.output
    assert str(result.exception) == (
        f"1 source cannot be used from the nodes:\nCalico manifest {mirror.url}{CALICO}: HTTP 404 from n1: set "
        "mirrors.calico_manifest to a source that has it (or mirrors.profile / offline.source, docs/offline.md), or "
        "give the nodes access to it")
    # The nodes asked the mirror themselves (the stand-in logs who asked: the path the packages will take).
    assert {r["status"] for r in mirror.requests(f"/v{MINOR}/deb/InRelease")} == {200}
    assert [r["status"] for r in mirror.requests(CALICO)] == [404]


def test_up_is_refused_by_preflight_before_prepare_touches_a_node(
        lab3: Lab, mirror: MirrorStandIn, config: Path, root: Path, without_calico: None) -> None:
    before = snapshot(lab3)
    cluster = load_inventory(lab3.inventory_path)
    ctx = PhaseContext(cluster=cluster, settings=load_settings(config), state=ClusterState.load(cluster))
    result = run_phases(select_phases(UP_PHASES), ctx)
    outcomes = [(o.name, o.status) for o in result.outcomes]
    assert outcomes[:2] == [("preflight", "failed"), ("prepare", "not run")]
    message = str(result.error)
    assert message.startswith("preflight: sources this run needs fail from the nodes (nothing was changed")
    assert message.splitlines()[1:] == [
        f"Calico manifest {mirror.url}{CALICO}: HTTP 404 from n1: set mirrors.calico_manifest to a source that has "
        "it (or mirrors.profile / offline.source, docs/offline.md), or give the nodes access to it"]
    assert snapshot(lab3) == before
    # Nothing but index files was asked for: no package was fetched.
    assert all(r["path"].endswith(("InRelease", "Release", "calico.yaml")) for r in mirror.requests())

    # Once the mirror carries it, the same sources are proven.
    (root / CALICO.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (root / CALICO.lstrip("/")).write_text("kind: List\n")
    again = CliRunner().invoke(app, ["config", "check-sources", "-i", str(lab3.inventory_path), "-c", str(config)])
    assert again.exit_code == 0, again.output
    assert f"ok   n1: Calico manifest {mirror.url}{CALICO}: HTTP 200" in again.output


@pytest.fixture
def minimal_node(lab3: Lab) -> Iterator[str]:
    """n2 as a minimal image has it: neither curl nor wget (moved aside, and back afterwards)."""
    node = lab3.node("n2")
    hide = "for t in curl wget; do p=$(command -v $t) && mv \"$p\" \"$p.cb-hidden\"; done; true"
    node.ssh(hide)
    try:
        assert node.ssh("command -v curl wget || echo none").stdout.strip() == "none"
        yield node.name
    finally:
        node.ssh("for p in /usr/bin/curl.cb-hidden /usr/bin/wget.cb-hidden; do [ -e \"$p\" ] && "
                 "mv \"$p\" \"${p%.cb-hidden}\"; done; true")


def test_a_node_without_curl_or_wget_is_asked_with_its_python(lab3: Lab, mirror: MirrorStandIn, config: Path,
                                                             root: Path, minimal_node: str) -> None:
    """Issue 34.3: the sources are asked with the Python Ansible runs on the node, so a minimal node passes."""
    (root / CALICO.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (root / CALICO.lstrip("/")).write_text("kind: List\n")
    result = CliRunner().invoke(app, ["config", "check-sources", "-i", str(lab3.inventory_path), "-c", str(config)])
    assert result.exit_code == 0, result.output
    assert f"ok   {minimal_node}: Kubernetes packages {mirror.url}/kubernetes/v{MINOR}/deb/InRelease: HTTP 200" \
        in result.output
