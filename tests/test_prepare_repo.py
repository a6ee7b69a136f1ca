"""A local, signed apt repository in the pkgs.k8s.io layout, for lab runs of the kubernetes_packages role.

pkgs.k8s.io cannot be reached here, so the lab points `mirrors.kubernetes_repo` at a copy of this repository on
each node (file://). The packages are PLACEHOLDERS built with dpkg-deb: `kubeadm`, `kubelet` and `kubectl`
whose binaries only print a version, and a kubelet.service unit. What is real is everything around them: the
repository layout, its Release file signed with a throwaway GPG key (so apt's signature check stays on and
the role's key handling is exercised), install, hold and enabling the kubelet.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
from email.utils import formatdate
from pathlib import Path

PACKAGES = ("kubeadm", "kubelet", "kubectl")
KUBELET_UNIT = """[Unit]
Description=kubelet placeholder (cluster-bootstrap lab)

[Service]
ExecStart=/usr/bin/kubelet
Restart=no

[Install]
WantedBy=multi-user.target
"""


def _build_deb(work: Path, name: str, version: str) -> Path:
    root = work / f"{name}-root"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: amd64\nMaintainer: cluster-bootstrap tests "
        f"<tests@invalid>\nSection: admin\nPriority: optional\n"
        f"Description: {name} placeholder for the cluster-bootstrap lab\n"
        " Prints its version and exits; stands in for the real package, which cannot be downloaded here.\n")
    binary = root / "usr" / "bin" / name
    binary.parent.mkdir(parents=True)
    binary.write_text(f"#!/bin/sh\necho '{name} placeholder v{version.split('-')[0]}'\n")
    binary.chmod(0o755)
    if name == "kubelet":
        unit = root / "lib" / "systemd" / "system" / "kubelet.service"
        unit.parent.mkdir(parents=True)
        unit.write_text(KUBELET_UNIT)
    deb = work / f"{name}_{version}_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
                   check=True, capture_output=True)
    return deb


def _packages_entry(deb: Path) -> str:
    control = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True).stdout
    data = deb.read_bytes()
    return (control.rstrip("\n") + f"\nFilename: ./{deb.name}\nSize: {len(data)}\n"
            f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n")


def _release(directory: Path, files: list[str]) -> str:
    lines = ["Origin: cluster-bootstrap lab", "Label: kubernetes placeholders", "Architectures: amd64",
             f"Date: {formatdate(usegmt=True)}", "SHA256:"]
    for name in files:
        data = (directory / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    return "\n".join(lines) + "\n"


def build_kubernetes_repo(dest: Path, minor: str = "1.31", patch: int = 0) -> Path:
    """Write `<dest>/kubernetes/v<minor>/deb/` (signed flat repository + Release.key); returns `<dest>/kubernetes`."""
    repo = dest / "kubernetes" / f"v{minor}" / "deb"
    repo.mkdir(parents=True)
    version = f"{minor}.{patch}-1.1"
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        debs = [_build_deb(work, name, version) for name in PACKAGES]
        for deb in debs:
            shutil.copy2(deb, repo / deb.name)
        packages = "\n".join(_packages_entry(repo / deb.name) for deb in debs)
        (repo / "Packages").write_text(packages)
        (repo / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
        (repo / "Release").write_text(_release(repo, ["Packages", "Packages.gz"]))
        gnupg = work / "gnupg"
        gnupg.mkdir(mode=0o700)
        env = os.environ | {"GNUPGHOME": str(gnupg)}

        def gpg(*args: str) -> None:
            subprocess.run(["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", "", *args],
                           check=True, capture_output=True, env=env, timeout=60)

        gpg("--quick-gen-key", "cluster-bootstrap lab repository <tests@invalid>", "ed25519", "sign", "1d")
        gpg("--armor", "--output", str(repo / "Release.key"), "--export")
        gpg("--clearsign", "--output", str(repo / "InRelease"), str(repo / "Release"))
        gpg("--armor", "--detach-sign", "--output", str(repo / "Release.gpg"), str(repo / "Release"))
        # The gpg-agent started for the throwaway keyring must not outlive it.
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, capture_output=True, timeout=30)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest / "kubernetes"


def test_the_lab_repository_is_signed_by_its_key_and_lists_every_package(tmp_path: Path) -> None:
    base = build_kubernetes_repo(tmp_path / "offline", minor="1.31", patch=2)
    repo = base / "v1.31" / "deb"
    keyring = tmp_path / "key.gpg"
    subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "--output", str(keyring), str(repo / "Release.key")],
                   check=True, capture_output=True)
    for signed in (["InRelease"], ["Release.gpg", "Release"]):
        check = subprocess.run(["gpgv", "--keyring", str(keyring), *[str(repo / f) for f in signed]],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    tampered = tmp_path / "Release"
    tampered.write_text((repo / "Release").read_text().replace("amd64", "arm64"))
    assert subprocess.run(["gpgv", "--keyring", str(keyring), str(repo / "Release.gpg"), str(tampered)],
                          capture_output=True).returncode != 0
    packages = (repo / "Packages").read_text()
    for name in PACKAGES:
        assert f"Package: {name}\nVersion: 1.31.2-1.1\n" in packages
        entry = packages.split(f"Package: {name}\n")[1].split("\n\n")[0]
        filename = entry.split("Filename: ./")[1].split("\n")[0]
        assert hashlib.sha256((repo / filename).read_bytes()).hexdigest() in entry
