"""`bootstrap prepare` on an Ubuntu-22.04-shaped node, its OS packages from a mirror in Ubuntu's archive layout.

The node is the lab's ubuntu2204 flavour (tests/lab/README.md): Debian bookworm with Ubuntu's os-release,
lsb-release and debian_version, Ubuntu's archive keyring and Ubuntu's sources.list, naming archive.ubuntu.com,
which cannot be reached here. Ansible's facts on it (Ubuntu, 22, jammy, the Debian family) are asserted in
tests/test_lab_flavours.py. Here the product runs on it as on a real one whose archive is a mirror
(`mirrors.os_repo`): preflight finds the platform table's Ubuntu 22.04 row, os_prep replaces Ubuntu's sources with
the mirror in Ubuntu's layout (jammy, -updates, -backports, -security; main, restricted, universe, multiverse), apt
reads those four suites from it, and the rest of prepare installs from it. The mirror is tests/lab/ubuntu_archive.py:
Ubuntu's layout, signed, holding Debian bookworm's packages (what an Ubuntu-shaped Debian node can run). What
stays unchecked: Ubuntu's own packages and versions (containerd 1.7, Python 3.10), its kernel, AppArmor's
profiles, netplan, and archive.ubuntu.com itself (docs/os-support.md).
"""
from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from provision.inputs.inventory import load_inventory
from provision.inputs.settings import load_settings
from provision.inputs.state import ClusterState
from provision.nodes.preflight.run import PreflightReport
from provision.nodes.prepare import PrepareResult
from provision.phases import PhaseContext, run_phases, select_phases
from tests.lab.lab import CACHE_DIR, HERE, Lab
from tests.lab.repos import OFFLINE_DIR, push_kubernetes_repo, signing_key, write_config
from tests.lab.ubuntu_archive import SUITES, build_ubuntu_archive

PORT = 8083
KUBERNETES = "1.35"


@dataclass(frozen=True)
class Prepared:
    lab: Lab
    url: str
    log: Path
    preflight: PreflightReport
    first: PrepareResult
    second: PrepareResult


@pytest.fixture(scope="module")
def prepared(lab_factory: Callable[..., Lab], tmp_path_factory: pytest.TempPathFactory,
             monkeypatch_module: pytest.MonkeyPatch) -> Prepared:
    lab = lab_factory(1, flavour="ubuntu2204")
    node = lab.nodes[0]
    tmp = tmp_path_factory.mktemp("ubuntu")
    with signing_key(tmp, "cluster-bootstrap lab Ubuntu mirror <tests@invalid>") as key:
        archive = build_ubuntu_archive(tmp / "archive", "jammy", key, CACHE_DIR / "ubuntu-archive")
        # A mirror that re-signs the archive is trusted by the machines that use it, beside Ubuntu's own keys.
        key.export(tmp / "mirror.asc")
    node.ssh("cat > /etc/apt/trusted.gpg.d/cblab-ubuntu-mirror.asc", input=(tmp / "mirror.asc").read_text())
    log = Path(lab.serve_in_hub([sys.executable, str(HERE / "ubuntu_archive.py"), lab.hub_ip, str(PORT),
                                 str(archive)], PORT, "ubuntu-archive"))
    url = f"http://{lab.hub_ip}:{PORT}"
    push_kubernetes_repo(lab, tmp / "offline", KUBERNETES)
    config = write_config(lab, tmp / "cluster.yaml", kubernetes={"version": KUBERNETES},
                          mirrors={"os_repo": url, "kubernetes_repo": f"file://{OFFLINE_DIR}/kubernetes"},
                          container_runtime={"containerd_source": "distribution"})
    monkeypatch_module.setenv("BOOTSTRAP_STATE_DIR", str(tmp / "state"))
    runs = []
    for _ in range(2):
        cluster = load_inventory(lab.inventory_path)
        ctx = PhaseContext(cluster=cluster, settings=load_settings(config), state=ClusterState.load(cluster))
        result = run_phases(select_phases(("preflight", "prepare")), ctx)
        if result.error:
            raise result.error
        runs.append(ctx.results)
    return Prepared(lab, url, log, runs[0].preflight, runs[0].prepare, runs[1].prepare)


@pytest.fixture(scope="module")
def monkeypatch_module() -> pytest.MonkeyPatch:
    with pytest.MonkeyPatch.context() as patch:
        yield patch  # type: ignore[misc]


def test_preflight_takes_the_node_for_ubuntu_22_04(prepared: Prepared) -> None:
    node = prepared.lab.nodes[0]
    report = prepared.preflight.node(node.name)
    assert report.python is not None and (report.python.os_id, report.python.release) == ("ubuntu", "22.04")
    assert report.python.platform.name == "Ubuntu 22.04 LTS"


def test_the_os_mirror_replaces_ubuntus_sources_in_ubuntus_layout(prepared: Prepared) -> None:
    node = prepared.lab.nodes[0]
    sources = node.ssh("cat /etc/apt/sources.list.d/cb-os.sources").stdout
    assert f"URIs: {prepared.url}/ubuntu\nSuites: jammy jammy-updates jammy-backports\n" in sources
    assert f"URIs: {prepared.url}/ubuntu\nSuites: jammy-security\n" in sources
    assert sources.count("Components: main restricted universe multiverse") == 2
    # Ubuntu's own list no longer names archive.ubuntu.com (kept as a backup beside it).
    assert "archive.ubuntu.com" not in node.ssh("cat /etc/apt/sources.list").stdout
    # apt read and kept every suite's signed Release from the mirror (Ubuntu's suite and codename, the four
    # components; an empty index it does not download) and every non-empty index; the packages came through it.
    asked = prepared.log.read_text()
    mirror = prepared.url.removeprefix("http://").replace("/", "_")
    for suffix, source in SUITES.items():
        assert f"GET /ubuntu/dists/jammy{suffix}/InRelease 200" in asked, suffix
        kept = node.ssh(f"cat /var/lib/apt/lists/{mirror}_ubuntu_dists_jammy{suffix}_InRelease").stdout
        assert f"\nSuite: jammy{suffix}\nVersion: stand-in\nCodename: jammy\n" in kept
        assert "\nComponents: main restricted universe multiverse\n" in kept
        if source:
            assert f"GET /ubuntu/dists/jammy{suffix}/main/binary-amd64/Packages.xz 200" in asked, suffix
    assert re.search(r"GET /ubuntu/pool/main/\S+\.deb 302", asked)


def test_prepare_runs_through_on_the_ubuntu_node_and_a_second_run_changes_nothing(prepared: Prepared) -> None:
    node = prepared.lab.nodes[0]
    first, second = prepared.first, prepared.second
    assert first.playbook.ok and first.changed[node.name] > 0
    report = first.reports[node.name]
    assert report.python.startswith("3.11.")  # Debian's Python (Ubuntu 22.04's is 3.10; the floor test covers it)
    assert report.unit("containerd").active == "active" and report.containerd.cri == "ok"
    assert {name: (package.installed, package.held) for name, package in report.packages.items()} == \
        dict.fromkeys(("kubeadm", "kubelet", "kubectl"), (True, True))
    assert node.ssh("systemctl is-active chrony").stdout.strip() == "active"
    assert second.playbook.ok and second.changed[node.name] == 0
