"""The versions table: what this release installs by default, the range it supports, and the choices that follow
from the Kubernetes minor, the GPU generation or the CUDA level. Settings defaults, validation, preflight's
compatibility rules, the roles' variables and the version tables in docs/settings.md all read it from here.

Checked on CHECKED_ON against each project's own release notes or release pages; the source of every entry is
named beside it (docs/settings.md lists them). Pure data and small lookups: nothing here reads a node or a file.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

CHECKED_ON = date(2026, 11, 25)


def parse_version(text: str) -> tuple[int, ...]:
    """The leading numbers of a version string: '1.7.24~ds1-6' -> (1, 7, 24), 'v2.1.9' -> (2, 1, 9), '' -> ()."""
    match = re.match(r"^\s*v?(\d+(?:\.\d+)*)", text)
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def shown_version(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version)


# Where each choice was checked (the docs list them beside the tables).
SOURCES: dict[str, str] = {
    "Kubernetes": "https://kubernetes.io/releases/ (1.35, 1.36, 1.37 release pages); "
                  "kubernetes/website data/releases/eol.yaml",
    "containerd": "Kubernetes v1.35 release blog (kubernetes/website #53498); containerd RELEASES.md; "
                  "packages.debian.org/src:containerd; docker/packaging #454",
    "kubeadm": "kubernetes/kubernetes #136016 (v1beta3 removed); KEP-5573 (failCgroupV1)",
    "Calico": "projectcalico/calico release-v3.33 manifests/calico.yaml (images); v3.33.0's manifest and images "
              "pinned by digest in public code (no v3.33.1 found on 2026-11-25); docs.tigera.io requirements; "
              "projectcalico/calico #10025 (quay.io)",
    "NVIDIA driver": "docs.nvidia.com/datacenter/tesla/drivers (supported drivers and CUDA toolkit versions; "
                     "CUDA toolkit, driver and architecture matrix; kernel modules)",
    "GPU generations": "NVIDIA/gpu-admin-tools gpu/devid_chips.py",
    "container toolkit": "NVIDIA/nvidia-container-toolkit CHANGELOG (v1.17.4, v1.18.1, v1.19.1, v1.20.0 tagged "
                         "2026-08-12; 1.20.1 seen only as gpu-operator v26.7.1's image); NVIDIA/nvkind #76",
    "device plugin": "NVIDIA/k8s-device-plugin #2057 (v0.20.1); its README (flags, config file, time-slicing, MPS)",
    "PyTorch": "PyPI torch 2.14.1 and 2.15.0; Docker Hub pytorch/pytorch 2.14.1-cuda13.0- and 2.14.1-cuda12.6-"
               "cudnn9-runtime, both referenced in public code (no 2.15.0 image tag found on 2026-11-25); "
               "pytorch/pytorch #190385 (2.15 drops CUDA 12.6)",
    "add-ons": "each release page in provision/inputs/addons.py; cert-manager.io/docs/releases (cert-manager 1.21: "
               "1.33-1.36; no release lists 1.37 yet); the others' go.mod (client-go 0.35-0.36) and release dates",
    "MIG": "docs.nvidia.com/datacenter/tesla/mig-user-guide (supported GPUs, supported MIG profiles); "
           "NVIDIA/mig-parted examples/config.yaml (the device ids of each product's profiles)",
    "kube-vip": "https://github.com/kube-vip/kube-vip/releases/tag/v1.2.4 (kube-vip/helm-charts #112, #113)",
    "HAProxy": "haproxy.org (3.2 LTS, maintained to 2030-Q2; 3.2.19 the newest patch confirmed here); "
               "the Docker official image's -alpine variant",
}


# --- Kubernetes ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KubernetesRelease:
    """One supported Kubernetes minor and what goes with it."""

    minor: int
    # kubernetes.io/releases/1.<minor>: the end of its patch releases.
    end_of_life: date
    # The newest patch seen on kubernetes.io when the table was checked; a bare minor installs the repository's
    # newest patch, so this is for the docs and for pinning, not a ceiling.
    latest_patch: str
    # kubeadm's PauseVersion for this minor: containerd pins the same sandbox image, so it is pulled once.
    pause: str
    # The Calico release whose tested Kubernetes range covers this minor.
    calico: str
    # containerd below this is refused (kubelet 1.36 dropped containerd 1.x).
    containerd_minimum: tuple[int, ...]
    # containerd below this is installed with a warning (1.35 is the last minor for containerd 1.x).
    containerd_warn_below: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"1.{self.minor}"


KUBERNETES_RELEASES: tuple[KubernetesRelease, ...] = (
    # Kubernetes 1.35 release blog (kubernetes/website #53498): the last release for containerd 1.x.
    KubernetesRelease(35, date(2027, 2, 28), "1.35.9", "3.10.1", "v3.33.0", (1,), (2, 0)),
    KubernetesRelease(36, date(2027, 6, 28), "1.36.4", "3.10.2", "v3.33.0", (2, 0), (2, 0)),
    KubernetesRelease(37, date(2027, 10, 28), "1.37.1", "3.10.2", "v3.33.0", (2, 0), (2, 0)),
)
KUBERNETES_DEFAULT = "1.36"
# Minors past their end of life (kubernetes/website data/releases/eol.yaml; 1.33 and 1.34 from their release pages).
KUBERNETES_END_OF_LIFE: dict[int, date] = {
    27: date(2024, 7, 16), 28: date(2024, 10, 22), 29: date(2025, 2, 28), 30: date(2025, 7, 15),
    31: date(2025, 11, 11), 32: date(2026, 2, 28), 33: date(2026, 6, 28), 34: date(2026, 10, 27),
}
# kubeadm.k8s.io/v1beta4 is the one config API every supported minor reads (v1beta3 is gone from kubeadm 1.36/1.37).
KUBEADM_API_VERSION = "kubeadm.k8s.io/v1beta4"
# KEP-5573: from 1.35 the kubelet refuses to start on a cgroup v1 host unless failCgroupV1 is false.
CGROUP_V1_REFUSED_FROM = 35
# kube-proxy's nftables mode (GA in 1.33) needs nftables features of Linux 5.13; ipvs is deprecated from 1.35.
NFTABLES_MINIMUM_KERNEL = (5, 13)
IPVS_DEPRECATED_FROM = 35


def supported_minors() -> tuple[int, ...]:
    return tuple(release.minor for release in KUBERNETES_RELEASES)


def supported_text() -> str:
    """'1.35, 1.36 or 1.37'."""
    names = [release.name for release in KUBERNETES_RELEASES]
    return ", ".join(names[:-1]) + f" or {names[-1]}"


def kubernetes_release(minor: int) -> KubernetesRelease:
    """The table's row for `minor`; a newer, untested minor (allowed by kubernetes.allow_untested_versions) takes
    the newest row's choices."""
    for release in KUBERNETES_RELEASES:
        if release.minor == minor:
            return release
    newest = KUBERNETES_RELEASES[-1]
    if minor > newest.minor:
        return newest
    raise ValueError(f"Kubernetes 1.{minor} is not supported by this release")


def kubernetes_minor_problem(minor: int, *, allow_untested: bool = False) -> str | None:
    """Why Kubernetes 1.<minor> cannot be installed by this release (one phrase with the fix), or None."""
    oldest, newest = KUBERNETES_RELEASES[0].minor, KUBERNETES_RELEASES[-1].minor
    fix = f"choose {supported_text()} (kubernetes.version: '{KUBERNETES_DEFAULT}')"
    if minor in KUBERNETES_END_OF_LIFE:
        return f"past its end of life ({KUBERNETES_END_OF_LIFE[minor].isoformat()}): {fix}"
    if minor < oldest:
        return f"far past its end of life (this release supports 1.{oldest} and newer): {fix}"
    if minor > newest and not allow_untested:
        return (f"newer than any release this version of cluster-bootstrap was checked with (1.{oldest}-1.{newest}): "
                f"{fix}, or set kubernetes.allow_untested_versions: true to try it")
    return None


# --- containerd --------------------------------------------------------------------------------------------------

# containerd 2.0-2.2 read configuration version 3 (the CRI plugin split into io.containerd.cri.v1.runtime and
# .images); 2.3 writes version 4 but migrates 3, and 2.1/2.2 refuse 4: version 3 is the one every 2.x reads.
CONTAINERD_CONFIG_VERSION = {1: 2, 2: 3}
# A drop-in whose version is higher than the root config's stops containerd (containerd #12891, seen on a lab
# node): the NVIDIA runtime goes into a drop-in written at the root config's version (nvidia-ctk
# --config-source=file, the nvidia role).

# The containerd each distribution release ships is the platform table's (provision/inputs/platforms.py).
# Docker's containerd.io is 2.x on every distribution Docker builds for (docker/packaging: 2.1.5 was the first
# 2.x it shipped; docker-ce now requires containerd.io >= 2.1.5).
DOCKER_CONTAINERD_MINIMUM = (2, 1, 5)


# Which Docker goes with which containerd: Debian's docker.io depends on Debian's containerd, which conflicts
# with containerd.io, and docker-ce needs containerd.io.
CONTAINERD_PACKAGES = {"docker": ("containerd.io", "docker-ce"), "distribution": ("containerd", "docker.io")}


AUTO_DISTRIBUTION_CONTAINERD = (2, 0)


def auto_containerd_source(distribution: tuple[int, ...] | None) -> str:
    """containerd_source auto: the distribution's own containerd when it is 2.0 or newer, else Docker's
    containerd.io (also where the distribution ships none, as on the RHEL family)."""
    return "distribution" if distribution and distribution >= AUTO_DISTRIBUTION_CONTAINERD else "docker"


@dataclass(frozen=True)
class ContainerdVerdict:
    """What a containerd version means for a Kubernetes minor: refused, warned about, or fine."""

    status: str  # "ok", "warn" or "refuse"
    detail: str


def containerd_verdict(minor: int, version: tuple[int, ...]) -> ContainerdVerdict:
    release = kubernetes_release(minor)
    shown = shown_version(version)
    if version < release.containerd_minimum:
        return ContainerdVerdict("refuse", f"containerd {shown} cannot run Kubernetes {release.name}, which needs "
                                           f"containerd {shown_version(release.containerd_minimum)} or newer")
    if version < release.containerd_warn_below:
        return ContainerdVerdict("warn", f"containerd {shown} works with Kubernetes {release.name}, the last minor "
                                         "that supports containerd 1.x; 1.36 and later need containerd 2")
    return ContainerdVerdict("ok", f"containerd {shown}")


# --- Calico ------------------------------------------------------------------------------------------------------

# Calico line -> the Kubernetes minors Tigera tested it with (docs.tigera.io requirements, per release line).
CALICO_KUBERNETES: dict[str, tuple[int, int]] = {"3.31": (32, 35), "3.32": (34, 36), "3.33": (35, 37)}
# Since 3.30 Calico's images are on quay.io (projectcalico/calico #10025).
CALICO_REGISTRY = "quay.io/calico"
# The images each line's manifests/calico.yaml names (read in the release branches' manifests): 3.33 folded the CNI
# installer, the IPAM upgrade and kube-controllers into one `calico` image beside `node`.
CALICO_IMAGES: dict[str, tuple[str, ...]] = {
    "3.31": ("cni", "node", "kube-controllers"),
    "3.32": ("cni", "node", "kube-controllers"),
    "3.33": ("calico", "node"),
}


def calico_line(version: str) -> str:
    """'v3.33.1' -> '3.33'."""
    return ".".join(version.lstrip("v").split(".")[:2])


def calico_images(version: str) -> tuple[str, ...]:
    """The images Calico `version`'s manifest references, as quay.io names them (the newest line's for a line the
    table does not know; calico_problem refuses those anyway)."""
    return tuple(f"{CALICO_REGISTRY}/{name}"
                 for name in CALICO_IMAGES.get(calico_line(version), CALICO_IMAGES[max(CALICO_IMAGES)]))


def calico_problem(version: str, minor: int) -> str | None:
    """Why Calico `version` (a tag, v3.33.1) does not go with Kubernetes 1.<minor>, or None. A minor newer than
    the table (allowed as untested) is not held to the tested ranges."""
    line = calico_line(version)
    wanted = kubernetes_release(minor).calico
    if line not in CALICO_KUBERNETES:
        return (f"Calico {version} is not in the versions table (lines {', '.join(sorted(CALICO_KUBERNETES))}): "
                f"use {wanted}, or leave calico.version out")
    low, high = CALICO_KUBERNETES[line]
    if not low <= minor <= high and minor <= KUBERNETES_RELEASES[-1].minor:
        return (f"Calico {line} was tested with Kubernetes 1.{low}-1.{high}, not 1.{minor}: use {wanted}, or leave "
                "calico.version out")
    return None


# --- NVIDIA ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DriverBranch:
    branch: str
    # NVIDIA's designation (datacenter driver docs, "supported drivers and CUDA toolkit versions").
    designation: str
    # Year and month its support ends; None: it has ended (470 is kept for Kepler, which has nothing newer).
    end_of_life: str | None
    # The newest CUDA major this branch runs without the compatibility package.
    cuda_major: int
    # Accepted as gpu.driver_branch (470 only because Kepler has nothing newer).
    supported: bool


DRIVER_BRANCHES: dict[str, DriverBranch] = {b.branch: b for b in (
    # Kepler's last branch (cuda-toolkit-driver-and-architecture-matrix): no longer maintained.
    DriverBranch("470", "legacy branch, Kepler's last", None, 11, True),
    DriverBranch("535", "long-term branch", "2026-06", 12, False),
    DriverBranch("580", "long-term branch", "2028-06", 13, True),
    DriverBranch("595", "production branch", "2027-03", 13, True),
)}
DRIVER_BRANCH_DEFAULT = "580"


def branch_text(branch: DriverBranch) -> str:
    """'580 (long-term branch, supported to 2028-06)'."""
    support = f"supported to {branch.end_of_life}" if branch.end_of_life else "no longer maintained"
    return f"{branch.branch} ({branch.designation}, {support})"
# CUDA major -> the oldest driver branch that runs it (CUDA release notes, "CUDA Toolkit and Corresponding Driver
# Versions": 11.0 >= 450.80.02, 12.0 >= 525.60.13, 13.0 >= 580.65.06).
CUDA_MINIMUM_BRANCH = {11: 450, 12: 525, 13: 580}


@dataclass(frozen=True)
class GpuGeneration:
    name: str
    # PCI device id ranges of its chips (NVIDIA/gpu-admin-tools gpu/devid_chips.py), inclusive.
    device_ids: tuple[tuple[int, int], ...]
    # The driver branches that drive it and are not past their end of life (last None: every newer one).
    oldest_branch: int
    last_branch: int | None
    # NVIDIA's open kernel modules need GSP, which Turing brought; older GPUs need the proprietary modules.
    open_module: bool
    # The newest CUDA major whose builds still target it (Maxwell, Pascal and Volta end with CUDA 12).
    cuda_major: int


GPU_GENERATIONS: tuple[GpuGeneration, ...] = (
    GpuGeneration("Kepler", ((0x0FC0, 0x0FFF), (0x1000, 0x103F), (0x1180, 0x11BF), (0x11C0, 0x11FF),
                             (0x1280, 0x12BF)), 470, 470, False, 11),
    GpuGeneration("Maxwell", ((0x1340, 0x137F), (0x1740, 0x177F), (0x1380, 0x13BF), (0x1780, 0x17BF),
                              (0x13C0, 0x13FF), (0x1600, 0x163F), (0x1400, 0x143F), (0x1640, 0x167F),
                              (0x17C0, 0x183F)), 580, 580, False, 12),
    GpuGeneration("Pascal", ((0x15C0, 0x15FF), (0x1700, 0x173F), (0x1B00, 0x1B7F), (0x1B80, 0x1BFF),
                             (0x1C00, 0x1C7F), (0x1C80, 0x1CFF), (0x1D00, 0x1D7F)), 580, 580, False, 12),
    GpuGeneration("Volta", ((0x1D80, 0x1DFF),), 580, 580, False, 12),
    GpuGeneration("Turing", ((0x1E00, 0x1E7F), (0x1E80, 0x1EFF), (0x1F00, 0x1F7F), (0x1F80, 0x1FFF),
                             (0x2180, 0x21FF)), 580, None, True, 13),
    GpuGeneration("Ampere", ((0x2080, 0x20FF), (0x2200, 0x227F), (0x2400, 0x247F), (0x2480, 0x24FF),
                             (0x2500, 0x257F), (0x2580, 0x25FF)), 580, None, True, 13),
    GpuGeneration("Hopper", ((0x2300, 0x237F),), 580, None, True, 13),
    GpuGeneration("Ada", ((0x2680, 0x26FF), (0x2700, 0x277F), (0x2780, 0x27FF), (0x2800, 0x287F),
                          (0x2880, 0x28FF)), 580, None, True, 13),
    GpuGeneration("Blackwell", ((0x2900, 0x297F), (0x2980, 0x29FF), (0x2B80, 0x2BFF), (0x2C00, 0x2C7F),
                                (0x2D00, 0x2D7F), (0x2D80, 0x2DFF), (0x2F00, 0x2F7F), (0x3180, 0x31FF),
                                (0x3200, 0x327F)), 580, None, True, 13),
)


def gpu_generation(device_id: int) -> GpuGeneration | None:
    """The generation of an NVIDIA PCI device id; None for an id outside every known chip's range (ranges
    interleave across generations, so each is matched on its own)."""
    for generation in GPU_GENERATIONS:
        if any(low <= device_id <= high for low, high in generation.device_ids):
            return generation
    return None


def driver_problem(generation: GpuGeneration, branch: str) -> str | None:
    """Why driver `branch` cannot drive `generation`, with the fix, or None."""
    number = int(branch)
    if generation.oldest_branch <= number and (generation.last_branch is None or number <= generation.last_branch):
        return None
    if generation.last_branch == generation.oldest_branch == 470:
        return (f"{generation.name} GPUs are driven only by driver 470, which is past its end of life: set "
                "gpu.driver_branch: '470' (with a CUDA 11 smoke_test.image), or gpu=false for the node")
    if generation.last_branch is not None:
        return (f"{generation.name} GPUs end with driver {generation.last_branch} and its proprietary kernel module, "
                f"not {branch}: set gpu.driver_branch: '{generation.last_branch}'")
    return (f"{generation.name} GPUs need driver {generation.oldest_branch} or newer, not {branch}: set "
            f"gpu.driver_branch: '{DRIVER_BRANCH_DEFAULT}'")


def module_flavour(generations: list[GpuGeneration]) -> str:
    """'open' when every GPU on the node is Turing or newer, else 'proprietary' (a node mixing old and new GPUs
    keeps the proprietary module, which drives both)."""
    return "open" if generations and all(g.open_module for g in generations) else "proprietary"


# --- NVIDIA container toolkit and device plugin ----------------------------------------------------------------

# 1.17.4 reads containerd's configuration version 3; 1.18.1 writes its drop-in where containerd looks
# (conf.d); 1.20.0 (2026-08-12) fills in runtime_type where a containerd runtime entry lacks it and keeps
# modified configurations from reverting (NVIDIA/nvidia-container-toolkit CHANGELOG).
CONTAINER_TOOLKIT_DEFAULT = "1.20.0"
CONTAINER_TOOLKIT_MINIMUM = (1, 19, 0)
# NVIDIA/k8s-device-plugin #2057 (2026-09-22).
DEVICE_PLUGIN_DEFAULT = "v0.20.1"
DEVICE_PLUGIN_MINIMUM = (0, 17, 0)


# --- MIG: which GPUs can be partitioned, and into what ----------------------------------------------------------

@dataclass(frozen=True)
class MigProduct:
    """GPUs that support MIG, told by their PCI device ids, and the profiles they take: each profile -> how many
    instances of it one GPU holds when every instance is of that profile (the user guide's "number of instances
    available"; the mig-parted example's all-<profile> layouts)."""

    name: str
    device_ids: tuple[int, ...]
    profiles: dict[str, int]


MIG_PRODUCTS: tuple[MigProduct, ...] = (
    MigProduct("A100/A800 40GB", (0x20B0, 0x20B1, 0x20F1, 0x20F6),
               {"1g.5gb": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1}),
    MigProduct("A100/A800/H100/H800 80GB", (0x20B2, 0x20B5, 0x20F3, 0x20F5, 0x2322, 0x2324, 0x2330, 0x2331),
               {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}),
    MigProduct("A30", (0x20B7,), {"1g.6gb": 4, "2g.12gb": 2, "4g.24gb": 1}),
    MigProduct("H100/H800 NVL", (0x2321, 0x233A),
               {"1g.12gb": 7, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1}),
    MigProduct("H100 96GB, H20", (0x20B6, 0x2329, 0x233D, 0x2342),
               {"1g.12gb": 7, "1g.24gb": 4, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1, "7g.96gb": 1}),
    MigProduct("H200 141GB, H200 NVL", (0x2335, 0x233B),
               {"1g.18gb": 7, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1}),
    MigProduct("B200", (0x2901,),
               {"1g.23gb": 7, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "4g.90gb": 1, "7g.180gb": 1}),
)
# The products the docs name as MIG-capable (the refusal names them).
MIG_PRODUCTS_TEXT = "A100, A30, H100, H200, H20 or B200"


def mig_product(device_id: int) -> MigProduct | None:
    """The MIG-capable product of an NVIDIA PCI device id; None for a GPU without MIG (or one the table lacks)."""
    return next((p for p in MIG_PRODUCTS if device_id in p.device_ids), None)


# --- the control-plane endpoint (several control planes) -----------------------------------------------------

# kube-vip's static pod on every control plane holds the VIP (ARP, leader election on a Lease): v1.2.4 is the
# newest release seen (2026-09), after v1.2.3's fixes.
KUBE_VIP_IMAGE = "ghcr.io/kube-vip/kube-vip:v1.2.4"
# The local API proxy without a VIP: HAProxy's 3.2 LTS line (TCP only, health-checked backends). 3.2.19 is the
# newest patch of the line confirmed when the table was checked; any later 3.2.x is a drop-in.
API_PROXY_IMAGE = "docker.io/library/haproxy:3.2.19-alpine"


# --- the smoke test's images -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SmokeImage:
    image: str
    torch: str
    cuda: str
    # The oldest GPU generation its CUDA build targets.
    oldest_generation: str


# CUDA 13 builds target Turing and newer; CUDA 13.0 is the level driver 580 runs natively. GPUs before Turing run
# CUDA 12.6 builds. torch 2.15.0 is on PyPI, but no 2.15.0 image tag was found in any public reference (and 2.15
# drops CUDA 12.6, pytorch/pytorch #190385): both images are 2.14.1, whose tags are.
SMOKE_IMAGES: tuple[SmokeImage, ...] = (
    SmokeImage("docker.io/pytorch/pytorch:2.14.1-cuda13.0-cudnn9-runtime", "2.14.1", "13.0", "Turing"),
    SmokeImage("docker.io/pytorch/pytorch:2.14.1-cuda12.6-cudnn9-runtime", "2.14.1", "12.6", "Maxwell"),
)
SMOKE_IMAGE_DEFAULT = SMOKE_IMAGES[0].image


def generation_index(name: str) -> int:
    return next(i for i, g in enumerate(GPU_GENERATIONS) if g.name == name)


# The node label the gpu phase sets to the oldest generation of a node's GPUs; the smoke test reads it.
GPU_GENERATION_LABEL = "cluster-bootstrap.io/gpu-generation"


def oldest_generation(names: list[str]) -> str:
    return min(names, key=generation_index)


def smoke_image_for(generations: list[str]) -> str | None:
    """The newest smoke image whose CUDA build runs on every generation named (the oldest one decides); None
    when none does (Kepler: smoke_test.image must name a CUDA 11 image)."""
    if not generations:
        return SMOKE_IMAGE_DEFAULT
    oldest = min(generation_index(name) for name in generations)
    for candidate in SMOKE_IMAGES:
        if generation_index(candidate.oldest_generation) <= oldest:
            return candidate.image
    return None


def image_cuda_major(image: str) -> int | None:
    """The CUDA major an image's tag names (`...-cuda13.0-...` -> 13); None when the tag names none."""
    match = re.search(r"[:-]cuda(\d+)(?:\.\d+)*(?:[-.]|$)", image.rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def cuda_problem(cuda_major: int, branch: str) -> str | None:
    """Why driver `branch` cannot run CUDA `cuda_major` images, or None."""
    needed = CUDA_MINIMUM_BRANCH.get(cuda_major)
    if needed is not None and int(branch) < needed:
        return f"CUDA {cuda_major} needs driver {needed} or newer, and gpu.driver_branch is {branch}"
    return None
