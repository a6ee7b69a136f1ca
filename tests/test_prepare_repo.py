"""The lab's signed apt repository in the pkgs.k8s.io layout (tests/lab/repos.py: `build_kubernetes_repo`).

pkgs.k8s.io cannot be reached here, so the lab points `mirrors.kubernetes_repo` at a copy of this repository on
each node (file://). The packages are STAND-INS built with dpkg-deb: `kubeadm`, `kubelet` and `kubectl`
that know their release and act out what the product relies on (tests/lab/kube_acting.py), and a kubelet.service
unit. What is real is everything around them: the
repository layout, its Release file signed with a throwaway GPG key (so apt's signature check stays on and
the role's key handling is exercised), install, hold and enabling the kubelet.
"""
from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from tests.lab.repos import KUBERNETES_PACKAGES, build_kubernetes_repo


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
    for name in KUBERNETES_PACKAGES:
        assert f"Package: {name}\nVersion: 1.31.2-1.1\n" in packages
        entry = packages.split(f"Package: {name}\n")[1].split("\n\n")[0]
        filename = entry.split("Filename: ./")[1].split("\n")[0]
        assert hashlib.sha256((repo / filename).read_bytes()).hexdigest() in entry
