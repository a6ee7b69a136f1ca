"""`bootstrap bundle build --gpu` for Debian 12: NVIDIA's Debian repositories carried in the bundle, up to what only
a GPU machine could check.

Debian's archive is real (tests/lab/upstream.py passes it through); NVIDIA's CUDA repository for debian12 and the
container toolkit's deb channel are the signed stand-ins of tests/lab/repos.py (build_nvidia_apt_repos) in NVIDIA's
layouts. The build resolves, with apt, what the nvidia role installs on a Debian GPU node for both kernel module
flavours (`nvidia-open-<branch>`, `cuda-drivers-<branch>`), the toolkit at its pinned version and the archive's
kernel headers, and carries each repository as the offline layout names it (docs/offline.md). The driver packages
are placeholders: the kernel module DKMS would build from them needs NVIDIA hardware (not here).

Marked `lab` (by the fixture it shares with the bundle tests: it reads Debian's archive).
"""
from __future__ import annotations

import shutil

import pytest
import yaml

from provision.bundle.manifest import verify_directory
from provision.inputs.versions import CONTAINER_TOOLKIT_DEFAULT, DRIVER_BRANCH_DEFAULT
from tests.lab.upstream import STORE, TOOLS, serve_upstream
from tests.support.refusal import run_main

pytestmark = [pytest.mark.lab, pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in TOOLS),
    reason=f"a bundle build needs {', '.join(TOOLS)} (scripts/setup.sh installs them)")]
BUILD_TIMEOUT_S = 1500


def test_a_gpu_bundle_for_debian_12_carries_nvidias_repositories_in_the_offline_layout(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    # A short directory: gpg's agent sockets live in the throwaway keyrings' homes, and a socket path has 108 bytes.
    tmp_path = tmp_path_factory.mktemp("gpu-bundle")
    with serve_upstream(tmp_path / "upstream") as upstream:
        config = tmp_path / "cluster.yaml"
        config.write_text(yaml.safe_dump(upstream.settings()))
        outcome = run_main("bundle", "build", "--for", "debian-12", "--gpu", "-o", str(tmp_path / "bundle"), "--key",
                           str(tmp_path / "gnupg"), "--cache", str(STORE), "-c", str(config), timeout_s=BUILD_TIMEOUT_S)
    assert outcome.code == 0, outcome
    root = tmp_path / "bundle"
    verdict = verify_directory(root)
    assert verdict.ok and verdict.contents is not None, verdict.problems
    assert verdict.contents.platforms == ("debian-12",)
    cuda, toolkit = root / "nvidia-cuda/debian12/x86_64", root / "nvidia-container-toolkit/deb/amd64"
    # Each repository as a node reads it offline: its signed index and the key where the role fetches it.
    for path in (cuda / "InRelease", cuda / "3bf863cc.pub", toolkit / "InRelease",
                 root / "nvidia-container-toolkit/gpgkey"):
        assert path.is_file(), path
    driver = f"{DRIVER_BRANCH_DEFAULT}.57.01-1"
    names = {deb.name for deb in root.rglob("*.deb")}
    # Both kernel module flavours (the nodes' GPU generations are not known when the bundle is built).
    assert {f"nvidia-open-{DRIVER_BRANCH_DEFAULT}_{driver}_amd64.deb", f"cuda-drivers-{DRIVER_BRANCH_DEFAULT}_{driver}_amd64.deb",
            f"nvidia-kernel-open-dkms_{driver}_amd64.deb", f"nvidia-kernel-dkms_{driver}_amd64.deb",
            f"nvidia-driver-cuda_{driver}_amd64.deb"} <= names, sorted(names)
    assert {f"{name}_{CONTAINER_TOOLKIT_DEFAULT}-1_amd64.deb" for name in (
        "nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
        "libnvidia-container1")} <= names
    # The archive's kernel headers (a bundle cannot know the nodes' kernel): Debian's own, from its archive.
    assert any(name.startswith("linux-headers-amd64_") for name in names), sorted(n for n in names if "headers" in n)
