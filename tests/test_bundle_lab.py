"""A cluster prepared from an offline bundle with no route out: the promise of `bootstrap bundle`.

A bundle is built for Debian 12 (Debian's archive for real; Docker's containerd.io, Kubernetes and the images as
stand-ins, tests/lab/upstream.py) and Rocky Linux 9 (the lab's RPM tree), served by `bootstrap bundle
serve` from the lab's hub, and the hub is sealed: it forwards nothing out, and counts every packet it drops on the
way. Then `bootstrap prepare` (preflight and prepare for real, as `up` runs them; the Kubernetes binaries are
placeholders, so `up` stops at kubeadm, as every lab test does) installs everything from the bundle, containerd
pulls every image of the run from the bundle's registry, and the counter is still zero.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from provision.bundle.manifest import verify_directory
from tests.lab.lab import Lab
from tests.lab.upstream import STORE, TOOLS, serve_upstream

pytestmark = pytest.mark.skipif(any(shutil.which(tool) is None for tool in TOOLS),
                                reason=f"a bundle build needs {', '.join(TOOLS)} (scripts/setup.sh installs them)")
HTTP_PORT = 8090
REGISTRY_PORT = 5000
PREPARE_TIMEOUT_S = 900


@dataclass(frozen=True)
class Sealed:
    lab: Lab
    bundle: Path
    config: Path
    images: dict[str, str]
    prepare: subprocess.CompletedProcess[str]


def bootstrap(*args: str, timeout: float = PREPARE_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def sealed(lab_factory: Callable[..., Lab], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sealed]:
    work = tmp_path_factory.mktemp("bundle-lab")
    with serve_upstream(work / "upstream") as upstream:
        build_config = work / "build.yaml"
        build_config.write_text(yaml.safe_dump(upstream.settings()))
        built = bootstrap("bundle", "build", "--for", "debian-12,rocky-9", "-o", str(work / "bundle"),
                          "--key", str(work / "gnupg"), "--cache", str(STORE), "-c", str(build_config))
        assert built.returncode == 0, built.stderr[-3000:]
    verdict = verify_directory(work / "bundle")
    assert verdict.ok and verdict.contents is not None, verdict.problems
    lab = lab_factory(2)
    lab.serve_in_hub([sys.executable, "-m", "provision", "bundle", "serve", str(work / "bundle"), "--address",
                      lab.hub_ip, "--http-port", str(HTTP_PORT), "--registry-port", str(REGISTRY_PORT),
                      "--fingerprint", verdict.fingerprint or ""], HTTP_PORT, "bundle-serve")
    lab.seal()
    registry = f"{lab.hub_ip}:{REGISTRY_PORT}"
    settings = yaml.safe_load(lab.config_path.read_text()) | {
        "offline": {"source": f"http://{lab.hub_ip}:{HTTP_PORT}", "image_repository": registry,
                    "bundle_fingerprint": verdict.fingerprint},
        "container_runtime": {"install_docker": False, "registry_mirrors": {registry: [f"http://{registry}"]}},
        "smoke_test": {"dataset": "cifar10", "cifar10_md5": upstream.cifar10_md5},
    }
    config = work / "cluster.yaml"
    config.write_text(yaml.safe_dump(settings))
    prepared = bootstrap("prepare", "-i", str(lab.inventory_path), "-c", str(config))
    yield Sealed(lab, work / "bundle", config, verdict.contents.images, prepared)


def test_prepare_installs_everything_from_the_bundle_with_no_route_out(sealed: Sealed) -> None:
    assert sealed.prepare.returncode == 0, sealed.prepare.stdout[-3000:] + sealed.prepare.stderr[-3000:]
    for node in sealed.lab.nodes:
        sources = node.ssh("cat /etc/apt/sources.list.d/*.sources").stdout
        assert f"http://{sealed.lab.hub_ip}:{HTTP_PORT}/os/debian" in sources
        assert "deb.debian.org" not in sources
        versions = node.ssh("dpkg-query -W -f '${Package} ${Version}\\n' chrony containerd.io kubeadm").stdout
        assert "containerd.io 2." in versions and "kubeadm 1.36.0" in versions and "chrony 4." in versions
        assert node.ssh("systemctl is-active containerd").stdout.strip() == "active"
    assert sealed.lab.egress_dropped() == 0


def test_containerd_pulls_every_image_of_the_run_from_the_bundles_registry(sealed: Sealed) -> None:
    registry = f"{sealed.lab.hub_ip}:{REGISTRY_PORT}"
    node = sealed.lab.nodes[-1]
    for path in sealed.images.values():
        pulled = node.ssh(f"ctr -n k8s.io images pull --hosts-dir /etc/containerd/certs.d {registry}/{path}",
                          check=False, timeout=120)
        assert pulled.returncode == 0, (path, pulled.stderr)
    listed = node.ssh("ctr -n k8s.io images ls -q").stdout.split()
    assert {f"{registry}/{path}" for path in sealed.images.values()} <= set(listed)
    assert sealed.lab.egress_dropped() == 0


def test_the_seal_counts_what_it_drops(sealed: Sealed) -> None:
    """The counter is not blind: a node asking the real archive is dropped at the hub, and counted."""
    before = sealed.lab.egress_dropped()
    tried = sealed.lab.nodes[0].ssh("curl -sS -m 3 -o /dev/null http://deb.debian.org/debian/", check=False)
    assert tried.returncode != 0
    assert sealed.lab.egress_dropped() > before


def test_a_tampered_bundle_stops_prepare_before_any_node_is_touched(sealed: Sealed, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(sealed.bundle, copy, ignore=shutil.ignore_patterns(".build"), copy_function=shutil.copyfile)
    kubeadm = next((copy / "kubernetes").rglob("kubeadm_*.deb"))
    kubeadm.write_bytes(kubeadm.read_bytes() + b"\0")
    settings = yaml.safe_load(sealed.config.read_text())
    settings["offline"]["source"] = str(copy)
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump(settings))
    stamp = sealed.lab.nodes[0].ssh("stat -c %Y /etc/apt/sources.list.d/cb-os.sources").stdout
    refused = bootstrap("prepare", "-i", str(sealed.lab.inventory_path), "-c", str(config), timeout=60)
    assert refused.returncode == 2 and "does not verify" in refused.stderr and "changed: kubernetes/" in refused.stderr
    assert sealed.lab.nodes[0].ssh("stat -c %Y /etc/apt/sources.list.d/cb-os.sources").stdout == stamp
