"""NVIDIA's Debian path on a real Debian node, up to the kernel module build.

NVIDIA's CUDA repository (developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/, flat, key 3bf863cc.pub
in it) and the container toolkit's (nvidia.github.io/libnvidia-container/stable/deb/amd64/, key at .../gpgkey) cannot
be reached here. The lab serves signed stand-ins in their layouts from the hub (tests/lab/repos.py
build_nvidia_apt_repos) and `bootstrap prepare` runs on a bookworm node named gpu=true: nouveau off, both
repositories added with their keys (Signed-By) and read by apt with its signature checks on, the kernel headers, the
driver branch's metapackage (the open kernel modules, or `cuda-drivers-<branch>` where the GPU generation needs the
proprietary ones), the toolkit pinned to its version, nvidia-ctk run on containerd's configuration. The driver's
packages are placeholders: what DKMS would build and load (the kernel module) needs NVIDIA hardware and the
node's real kernel headers, so prepare's own check ends the run naming the missing GPU, as on the RHEL path
(tests/test_lab_flavours.py).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from provision.errors import BootstrapError
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import load_settings
from provision.inputs.versions import CONTAINER_TOOLKIT_DEFAULT, DRIVER_BRANCH_DEFAULT
from tests.lab.lab import Lab, MirrorStandIn
from tests.lab.prepare import prepare_nodes
from tests.lab.repos import OFFLINE_DIR, build_nvidia_apt_repos, push_kubernetes_repo, write_config

KUBERNETES = "1.35"
HEADERS_SOURCE = "/etc/apt/sources.list.d/cblab-kernel-headers.sources"


@dataclass(frozen=True)
class GpuNode:
    lab: Lab
    mirror: MirrorStandIn
    tree: Path  # what the mirror serves
    config: Path
    inventory: Path
    failure: str  # how prepare's run ended


def _headers_source(lab: Lab, url: str) -> None:
    """What a Debian node's own archive gives for a Debian kernel: linux-headers-<running kernel>. This host's
    kernel is not Debian's, so the lab lists a signed stand-in holding just that package."""
    node = lab.nodes[0]
    node.ssh(f"curl -fsS {url}/kernel-headers/Release.key -o /etc/apt/keyrings/cblab-kernel-headers.asc")
    node.ssh(f"printf 'Types: deb\\nURIs: {url}/kernel-headers/\\nSuites: /\\n"
             f"Signed-By: /etc/apt/keyrings/cblab-kernel-headers.asc\\n' > {HEADERS_SOURCE} && apt-get update -q")


@pytest.fixture(scope="module")
def gpu_node(lab_factory: Callable[..., Lab], tmp_path_factory: pytest.TempPathFactory) -> GpuNode:
    lab = lab_factory(1)
    tmp = tmp_path_factory.mktemp("nvidia-debian")
    push_kubernetes_repo(lab, tmp / "offline", KUBERNETES)
    tree = build_nvidia_apt_repos(tmp / "nvidia", distributions=("debian12",))
    mirror = lab.serve_mirror(tree)
    _headers_source(lab, mirror.url)
    config = write_config(lab, tmp / "cluster.yaml", kubernetes={"version": KUBERNETES},
                          mirrors={"kubernetes_repo": f"file://{OFFLINE_DIR}/kubernetes",
                                   "nvidia_cuda_repo": f"{mirror.url}/nvidia-cuda",
                                   # upstream's channel: the deb tree under it, the key one level up
                                   "nvidia_toolkit_repo": f"{mirror.url}/nvidia-container-toolkit/stable"},
                          container_runtime={"containerd_source": "distribution"})
    node = lab.nodes[0]
    inventory = tmp / "hosts.ini"
    lab.write_inventory(path=inventory)
    inventory.write_text(inventory.read_text().replace(f"ansible_host={node.ip}", f"ansible_host={node.ip} gpu=true"))
    # Preflight refuses gpu=true without a GPU on the bus (tests/test_prepare_lab.py): the phase runs on its own.
    with pytest.raises(BootstrapError) as ended:
        prepare_nodes(load_inventory(inventory), load_settings(config), gpus={node.name: 0})
    return GpuNode(lab, mirror, tree, config, inventory, " ".join(str(ended.value).split()))


def _installed(lab: Lab, *names: str) -> dict[str, str]:
    out = lab.nodes[0].ssh("dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' " + " ".join(names),
                           check=False).stdout
    return {name: version for name, version, status in (line.split()[:3] for line in out.splitlines())
            if status.startswith("ii")}


def test_prepare_installs_nvidias_stack_from_the_signed_stand_in_and_names_the_missing_gpu(gpu_node: GpuNode) -> None:
    lab, node = gpu_node.lab, gpu_node.lab.nodes[0]
    assert "it is a GPU node but nvidia-smi lists no GPU" in gpu_node.failure, gpu_node.failure
    driver = f"{DRIVER_BRANCH_DEFAULT}.57.01-1"
    toolkit = f"{CONTAINER_TOOLKIT_DEFAULT}-1"
    # No GPU generation known: NVIDIA's default, the open kernel modules.
    assert _installed(lab, f"nvidia-open-{DRIVER_BRANCH_DEFAULT}", "nvidia-kernel-open-dkms", "nvidia-driver-cuda",
                      f"linux-headers-{node.ssh('uname -r').stdout.strip()}", "nvidia-container-toolkit",
                      "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1") == {
        f"nvidia-open-{DRIVER_BRANCH_DEFAULT}": driver, "nvidia-kernel-open-dkms": driver,
        "nvidia-driver-cuda": driver, f"linux-headers-{node.ssh('uname -r').stdout.strip()}": "6.1.0-1",
        "nvidia-container-toolkit": toolkit, "nvidia-container-toolkit-base": toolkit,
        "libnvidia-container-tools": toolkit, "libnvidia-container1": toolkit}
    assert "cuda-drivers" not in node.ssh("dpkg-query -W -f '${Package}\\n'").stdout
    assert "blacklist nouveau" in node.ssh("cat /etc/modprobe.d/cluster-bootstrap-blacklist-nouveau.conf").stdout


def test_both_repositories_are_listed_in_nvidias_layout_with_their_keys(gpu_node: GpuNode) -> None:
    node, url = gpu_node.lab.nodes[0], gpu_node.mirror.url
    cuda = node.ssh("cat /etc/apt/sources.list.d/cb-nvidia-cuda.sources").stdout
    assert f"URIs: {url}/nvidia-cuda/debian12/x86_64/" in cuda and "Suites: /" in cuda
    assert "Signed-By: /etc/apt/keyrings/cb-nvidia-cuda.asc" in cuda
    toolkit = node.ssh("cat /etc/apt/sources.list.d/cb-nvidia-container-toolkit.sources").stdout
    assert f"URIs: {url}/nvidia-container-toolkit/stable/deb/amd64/" in toolkit
    assert "Signed-By: /etc/apt/keyrings/cb-nvidia-container-toolkit.asc" in toolkit
    fetched = {request["path"] for request in gpu_node.mirror.requests("")}
    # The keys where NVIDIA publishes them (the table's file name in the CUDA directory; gpgkey beside the channel),
    # and each repository's signed Release, which apt verified against that key.
    assert {"/nvidia-cuda/debian12/x86_64/3bf863cc.pub", "/nvidia-container-toolkit/gpgkey",
            "/nvidia-cuda/debian12/x86_64/InRelease", "/nvidia-container-toolkit/stable/deb/amd64/InRelease"} <= fetched
    # apt took the packages from there.
    policy = node.ssh(f"apt-cache policy nvidia-open-{DRIVER_BRANCH_DEFAULT} nvidia-container-toolkit").stdout
    assert f"{url}/nvidia-cuda/debian12/x86_64  Packages" in policy
    assert f"{url}/nvidia-container-toolkit/stable/deb/amd64  Packages" in policy


def test_a_gpu_that_needs_the_proprietary_module_gets_cuda_drivers(gpu_node: GpuNode) -> None:
    """A Volta GPU (the open modules need Turing's GSP): cuda-drivers-<branch>, with the proprietary DKMS module."""
    lab, node = gpu_node.lab, gpu_node.lab.nodes[0]
    with pytest.raises(BootstrapError, match="nvidia-smi lists no GPU"):
        prepare_nodes(load_inventory(gpu_node.inventory), load_settings(gpu_node.config), gpus={node.name: 0},
                      generations={node.name: ["Volta"]})
    driver = f"{DRIVER_BRANCH_DEFAULT}.57.01-1"
    assert _installed(lab, f"cuda-drivers-{DRIVER_BRANCH_DEFAULT}", "nvidia-kernel-dkms") == {
        f"cuda-drivers-{DRIVER_BRANCH_DEFAULT}": driver, "nvidia-kernel-dkms": driver}


def test_a_repository_whose_signature_does_not_verify_is_refused_and_removed(gpu_node: GpuNode, tmp_path: Path) -> None:
    """A CUDA repository whose Release is signed by another key than the one published beside it: apt refuses it,
    prepare names the repository and the setting, and leaves no list of it behind."""
    lab, node = gpu_node.lab, gpu_node.lab.nodes[0]
    other = build_nvidia_apt_repos(tmp_path / "other", distributions=("debian12",))
    served, signed_elsewhere = (tree / "nvidia-cuda" / "debian12" / "x86_64" for tree in (other, gpu_node.tree))
    for name in ("InRelease", "Release", "Release.gpg"):
        (served / name).write_bytes((signed_elsewhere / name).read_bytes())
    forged = lab.serve_mirror(other, port=8082).url + "/nvidia-cuda"
    config = tmp_path / "cluster.yaml"
    config.write_text(gpu_node.config.read_text().replace(f"{gpu_node.mirror.url}/nvidia-cuda", forged))
    with pytest.raises(BootstrapError) as failed:
        prepare_nodes(load_inventory(gpu_node.inventory), load_settings(config), gpus={node.name: 0})
    message = " ".join(str(failed.value).split())
    assert f"NVIDIA CUDA repository {forged}/debian12/x86_64/ is unusable from {node.name}" in message, message
    assert "mirrors.nvidia_cuda_repo" in message
    assert "cb-nvidia-cuda.sources" not in node.ssh("ls /etc/apt/sources.list.d/").stdout.split()
