"""containerd's effective configuration is read back after prepare (`containerd config dump`, in each node's
report) and every departure from what prepare wrote fails the phase with its TOML path and value:
provision/nodes/containerd_config.py, fed dumps recorded on lab nodes (Debian 12's containerd 1.6, sid's 2.1.9)
and, for the NVIDIA runtime that cannot be installed here, the 2.1.9 dump with nvidia-ctk's drop-in merged in
by hand."""
from __future__ import annotations

import json

import pytest

from provision.nodes.containerd_config import config_problems as problems
from provision.nodes.preflight.probe import parse_containerd_version
from tests.support.paths import REPO_ROOT

DATA = REPO_ROOT / "tests" / "data" / "containerd"
V2 = (DATA / "debian12-containerd-1.6-config-dump.toml").read_text()
V3 = (DATA / "sid-containerd-2.1-config-dump.toml").read_text()
RUNTIME_V3 = "plugins.'io.containerd.cri.v1.runtime'.containerd"
# What nvidia-ctk's drop-in adds on a 2.x node with gpu.runtime: default, as containerd merges it.
NVIDIA = """
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
  runtime_type = 'io.containerd.runc.v2'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
    BinaryName = '/usr/bin/nvidia-container-runtime'
    SystemdCgroup = true
"""


def with_nvidia(dump: str, default: bool) -> str:
    if default:
        dump = dump.replace("default_runtime_name = 'runc'", "default_runtime_name = 'nvidia'")
    return dump + NVIDIA


def test_what_prepare_writes_is_what_containerd_1_and_2_run() -> None:
    assert problems(V2, "registry.k8s.io/pause:3.10.1") == []
    assert problems(V3, "registry.k8s.io/pause:3.10.2") == []


def test_a_wrong_sandbox_image_is_named_by_path_and_value() -> None:
    assert problems(V3, "registry.k8s.io/pause:3.10.1") == [
        "plugins.'io.containerd.cri.v1.images'.pinned_images.sandbox = 'registry.k8s.io/pause:3.10.2', "
        "expected 'registry.k8s.io/pause:3.10.1'"]
    assert problems(V2, "harbor.example.com/k8s/pause:3.10.1") == [
        "plugins.'io.containerd.grpc.v1.cri'.sandbox_image = 'registry.k8s.io/pause:3.10.1', "
        "expected 'harbor.example.com/k8s/pause:3.10.1'"]


def test_a_runtime_without_the_systemd_cgroup_driver_is_named() -> None:
    cgroupfs = V3.replace("SystemdCgroup = true", "SystemdCgroup = false")
    assert problems(cgroupfs, "registry.k8s.io/pause:3.10.2") == [
        f"{RUNTIME_V3}.runtimes.runc.options.SystemdCgroup = False, expected true"]


@pytest.mark.parametrize("dump", [V2, V3], ids=["containerd-1.6", "containerd-2.1"])
def test_a_runtime_with_no_systemd_cgroup_key_is_named_as_cgroupfs_is(dump: str) -> None:
    """containerd's default without the key is the cgroupfs driver, which the kubelet's systemd driver fights: a
    missing key is a departure, not a pass."""
    runtime = RUNTIME_V3 if dump is V3 else "plugins.'io.containerd.grpc.v1.cri'.containerd"
    sandbox = "registry.k8s.io/pause:3.10.2" if dump is V3 else "registry.k8s.io/pause:3.10.1"
    unset = "\n".join(line for line in dump.splitlines() if "SystemdCgroup" not in line)
    assert problems(unset, sandbox) == [f"{runtime}.runtimes.runc.options.SystemdCgroup = None, expected true"]
    nvidia_unset = with_nvidia(V3, default=True).removesuffix("    SystemdCgroup = true\n")
    assert nvidia_unset.count("SystemdCgroup") == V3.count("SystemdCgroup")
    assert problems(nvidia_unset, "registry.k8s.io/pause:3.10.2", True, True) == [
        f"{RUNTIME_V3}.runtimes.nvidia.options.SystemdCgroup = None, expected true"]


def test_gpu_nodes_need_the_nvidia_runtime_and_as_the_default_when_asked() -> None:
    sandbox = "registry.k8s.io/pause:3.10.2"
    assert problems(V3, sandbox, True, True) == [f"{RUNTIME_V3}.default_runtime_name = 'runc', expected 'nvidia'",
                                                 f"{RUNTIME_V3}.runtimes.nvidia is missing"]
    assert problems(with_nvidia(V3, default=True), sandbox, True, True) == []
    assert problems(with_nvidia(V3, default=False), sandbox, True, False) == []
    # runtimeclass mode: nvidia present, runc stays the default.
    assert problems(with_nvidia(V3, default=True), sandbox, True, False) == [
        f"{RUNTIME_V3}.default_runtime_name = 'nvidia', expected 'runc'"]
    wrong_binary = with_nvidia(V3, default=True).replace("/usr/bin/nvidia-container-runtime", "/usr/bin/runc")
    assert problems(wrong_binary, sandbox, True, True) == [
        f"{RUNTIME_V3}.runtimes.nvidia.options.BinaryName = '/usr/bin/runc', expected the nvidia-container-runtime"]


def test_output_that_is_not_toml_is_named() -> None:
    assert problems("ctr: failed to dial", "x")[0].startswith("`containerd config dump` did not print TOML")


@pytest.mark.parametrize(("line", "expected"), list(zip(
    (DATA / "containerd-version.txt").read_text().splitlines(), [(1, 6, 20), (2, 1, 9)], strict=True)))
def test_installed_containerd_versions_are_read(line: str, expected: tuple[int, ...]) -> None:
    assert parse_containerd_version([line]) == expected
    assert parse_containerd_version(["containerd containerd.io v2.2.5 6e3d2e6c"]) == (2, 2, 5)
    assert parse_containerd_version([]) is None


@pytest.mark.parametrize("name", ["debian12", "sid"])
def test_the_lab_crictl_reports_the_runtime_ready_with_systemd_cgroups(name: str) -> None:
    info = json.loads((DATA / f"{name}-crictl-info.json").read_text())
    conditions = {c["type"]: c["status"] for c in info["status"]["conditions"]}
    assert conditions["RuntimeReady"] is True
    assert info["config"]["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
