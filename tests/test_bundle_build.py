"""`bootstrap bundle build` for real: Debian 12's packages from Debian's archive (resolved by apt, real packages,
real signatures), Rocky Linux 9's from the lab's RPM tree (resolved by dnf), Docker's, Kubernetes' and the images
from stand-ins (tests/lab/upstream.py: they cannot be reached here). Then what a user does with it:
verify it, serve it, build again after an interruption.

Marked `lab`: it reads Debian's archive and needs apt, dnf, rpmbuild, skopeo and docker-registry on this machine
(scripts/setup.sh installs them); the README's test command runs it.
"""
from __future__ import annotations

import hashlib
import lzma
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from provision.bundle.images import REGISTRY_DIR, free_port
from provision.bundle.manifest import MANIFEST, verify_directory
from provision.bundle.serve import serve
from provision.resources import ROLES_DIR
from tests.lab.upstream import STORE, TOOLS, Upstream, serve_upstream
from tests.support.refusal import run_main

pytestmark = [pytest.mark.lab, pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in TOOLS),
    reason=f"a bundle build needs {', '.join(TOOLS)} (scripts/setup.sh installs them)")]
BUILD_TIMEOUT_S = 1200


@dataclass(frozen=True)
class Built:
    root: Path
    config: Path
    key: Path
    upstream: Upstream
    output: str

    def build(self) -> str:
        outcome = run_main("bundle", "build", "--for", "debian-12,rocky-9", "-o", str(self.root), "--key", str(self.key),
                           "--cache", str(STORE), "-c", str(self.config), timeout_s=BUILD_TIMEOUT_S)
        assert outcome.code == 0, outcome
        return outcome.stdout + outcome.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    work = tmp_path_factory.mktemp("bundle")
    with serve_upstream(work / "upstream") as upstream:
        config = work / "cluster.yaml"
        config.write_text(yaml.safe_dump(upstream.settings(addons={"enabled": ["volcano"]})))
        bundle = Built(work / "bundle", config, work / "gnupg", upstream, "")
        yield Built(bundle.root, config, bundle.key, upstream, bundle.build())


def test_the_bundle_verifies_and_holds_the_offline_layout(built: Built) -> None:
    verdict = verify_directory(built.root)
    assert verdict.ok, verdict.problems
    contents = verdict.contents
    assert contents is not None
    assert contents.platforms == ("debian-12", "rocky-9") and contents.kubernetes_version == "1.36.0"
    assert contents.addons == {"volcano": "v1.15.2"} and contents.cifar10
    root = built.root
    for path in ("os/debian/dists/bookworm/InRelease", "os/debian/dists/bookworm-updates/InRelease",
                 "os/debian-security/dists/bookworm-security/InRelease", "docker/debian/gpg",
                 "docker/debian/dists/bookworm/InRelease", "kubernetes/v1.36/deb/InRelease",
                 "kubernetes/v1.36/deb/Release.key", "os/rockylinux/9/BaseOS/x86_64/os/repodata/repomd.xml",
                 "os/rockylinux/9/BaseOS/x86_64/os/repodata/repomd.xml.asc",
                 "os/rockylinux/9/extras/x86_64/os/repodata/repomd.xml", "docker/rhel/gpg",
                 "kubernetes/v1.36/rpm/repodata/repomd.xml.key", "calico/v3.33.0/manifests/calico.yaml",
                 "addons/volcano/v1.15.2/installer.yaml", "cifar10/cifar-10-python.tar.gz"):
        assert (root / path).is_file(), path
    assert list((root / "kubernetes/v1.36/deb").glob("kubeadm_1.36.0-*.deb"))
    assert list((root / "kubernetes/v1.36/rpm").glob("kubeadm-1.36.0-*.rpm"))
    assert list((root / "docker/rhel/9/x86_64/stable").rglob("containerd.io-2.*.rpm"))
    # The images of the run: kubeadm's own list (asked of the bundle's kubeadm), ours, and the add-on's manifest's.
    assert {"registry.k8s.io/kube-apiserver:v1.36.0", "registry.k8s.io/etcd:3.6.5-0", "quay.io/calico/node:v3.33.0",
            "docker.io/volcanosh/vc-scheduler:v1.15.2",
            "docker.io/pytorch/pytorch:2.14.1-cuda13.0-cudnn9-runtime"} <= set(contents.images)
    assert re.search(r"signed by [0-9A-F]{40}", built.output)


def test_the_debian_part_is_debians_own_signed_archive(built: Built) -> None:
    """Every .deb of the OS part is listed, with its sha256, in an index whose hash is in a Release signed by Debian's
    archive key: the nodes' apt checks exactly what it would check online."""
    root = built.root / "os/debian"
    for suite in ("bookworm", "bookworm-updates"):
        checked = subprocess.run(["gpgv", "--keyring", "/usr/share/keyrings/debian-archive-keyring.gpg",
                                  str(root / "dists" / suite / "InRelease")], capture_output=True, timeout=60)
        assert checked.returncode == 0, checked.stderr
    listed: dict[str, str] = {}
    for index in (built.root / "os").rglob("binary-amd64/Packages.xz"):
        text = lzma.decompress(index.read_bytes()).decode()
        for stanza in text.split("\n\n"):
            name = re.search(r"^Filename: (\S+)$", stanza, re.MULTILINE)
            digest = re.search(r"^SHA256: (\S+)$", stanza, re.MULTILINE)
            if name and digest:
                listed[name.group(1)] = digest.group(1)
    debs = list((built.root / "os").rglob("*.deb"))
    names = {p.name.split("_")[0] for p in debs}
    # The closure: what prepare asks for, and what that needs down to the C library (iptables' netfilter libraries).
    asked = yaml.safe_load((ROLES_DIR / "os_prep/defaults/main/Debian.yml").read_text())["os_prep_packages_debian"]
    assert {"chrony", "iptables"} <= set(asked)
    assert set(asked) | {"libc6", "libnftnl11"} <= names
    for deb in debs:
        archive = deb.parent
        while archive.name not in ("debian", "debian-security"):
            archive = archive.parent
        relative = deb.relative_to(archive).as_posix()
        assert listed.get(relative) == hashlib.sha256(deb.read_bytes()).hexdigest(), relative


def test_the_bundle_is_served_over_http_and_by_a_real_registry(built: Built) -> None:
    verdict = verify_directory(built.root)
    assert verdict.contents is not None
    with serve(built.root, "127.0.0.1", http_port=free_port(), registry_port=free_port()) as served:
        with urllib.request.urlopen(f"{served.http_url}/kubernetes/v1.36/deb/InRelease", timeout=10) as response:
            assert response.read() == (built.root / "kubernetes/v1.36/deb/InRelease").read_bytes()
        for hidden in ("/.build/", f"/{REGISTRY_DIR}/", "/os/"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"{served.http_url}{hidden}", timeout=10)
            assert refused.value.code == 404
        for path in verdict.contents.images.values():
            found = subprocess.run(["skopeo", "inspect", "--tls-verify=false", f"docker://{served.registry}/{path}"],
                                   capture_output=True, text=True, timeout=60)
            assert found.returncode == 0, (path, found.stderr)
        # Read-only: nothing can be pushed into a served bundle.
        pushed = subprocess.run(["skopeo", "copy", "--dest-tls-verify=false", "--src-tls-verify=false",
                                 f"docker://{served.registry}/{next(iter(verdict.contents.images.values()))}",
                                 f"docker://{served.registry}/evil/image:1"], capture_output=True, timeout=60)
        assert pushed.returncode != 0


def test_an_interrupted_build_run_again_reuses_what_it_has(built: Built) -> None:
    """Killed half-way (the manifest not written, files missing, the registry half-filled), the build run again
    finishes from its store: no package is fetched again, and only the images its registry lacks are copied."""
    (built.root / MANIFEST).unlink()
    debs = sorted((built.root / "os/debian/pool").rglob("*.deb"))
    for deb in debs[::2]:
        deb.unlink()
    shutil.rmtree(built.root / REGISTRY_DIR / "docker/registry/v2/repositories/calico")
    output = built.build()
    downloaded = float(re.search(r"([0-9.]+) MB downloaded", output).group(1))  # type: ignore[union-attr]
    assert downloaded < 1, output  # the Release files only, which are always read afresh
    assert verify_directory(built.root).ok
    assert all(deb.is_file() for deb in debs)
    assert (built.root / REGISTRY_DIR / "docker/registry/v2/repositories/calico").is_dir()


def test_serve_refuses_a_tampered_bundle(built: Built, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(built.root, copy, ignore=shutil.ignore_patterns(".build"), copy_function=shutil.copyfile)
    chrony = next((copy / "os/debian/pool").rglob("chrony_*.deb"))
    chrony.write_bytes(chrony.read_bytes()[:-1] + b"\0")
    outcome = run_main("bundle", "serve", str(copy), "--http-port", str(free_port()),
                       "--registry-port", str(free_port()))
    assert outcome.code == 2 and "does not verify" in outcome.stderr and "changed: os/debian/pool" in outcome.stderr
