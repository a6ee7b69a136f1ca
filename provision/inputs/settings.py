"""Cluster settings: the optional cluster.yaml, validated into one typed model whose defaults all work.

Every repository, registry and download location is a setting (see `sources.py` for how a named profile
and per-source overrides resolve into the sources a run uses), so a mirror or an offline source never
needs a code change.
"""
from __future__ import annotations

import difflib
import ipaddress
import math
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from provision.errors import InputError
from provision.inputs import versions
from provision.inputs.addons import ADDON_ORDER, ADDONS, AddonName
from provision.inputs.files import parse_yaml, read_text, refuse_vault_file, shown
from provision.inputs.values import (
    COUNT,
    DNS_LABEL,
    DRIVER_BRANCH,
    EXTENDED_RESOURCE,
    IMAGE_NAME,
    IPV4_NETWORK,
    IPV4_UNICAST,
    KUBERNETES_VERSION,
    LOCAL_PATH,
    QUANTITY,
    RELEASE_TAG,
    VERSION,
    DeletablePath,
    DnsSubdomain,
    EnvName,
    ExtendedResource,
    Fingerprint,
    GpuModel,
    ImageReference,
    InterfaceName,
    Md5,
    PositiveFloat,
    Registry,
    RegistryHost,
    RepositoryUrl,
    S3Region,
    S3Url,
    SystemdCalendar,
    Text,
    Url,
)

# The Kubernetes minors this release installs: the versions table's (provision/inputs/versions.py).
OLDEST_KUBE_MINOR = versions.KUBERNETES_RELEASES[0].minor
NEWEST_KUBE_MINOR = versions.KUBERNETES_RELEASES[-1].minor
# kubeadm refuses an IPv4 service range wider than /12; the cluster's DNS service takes the range's 10th address.
WIDEST_SERVICE_PREFIX = 12
NARROWEST_SERVICE_PREFIX = 28
# kube-controller-manager gives each node a /24 and refuses a cluster range more than 16 bits wider than that.
WIDEST_POD_PREFIX = 8
# Ranges that cannot carry pod or service traffic.
UNUSABLE_RANGES = {
    "0.0.0.0/8": "'this network' (0.0.0.0/8)", "127.0.0.0/8": "loopback (127.0.0.0/8)",
    "169.254.0.0/16": "link-local (169.254.0.0/16)", "224.0.0.0/4": "multicast (224.0.0.0/4)",
    "240.0.0.0/4": "reserved (240.0.0.0/4)",
}
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
# The file the smoke test leaves in a cache folder (smoke_test.cache_path) it made its own; `reset` removes the
# folder only where it finds it (smoke/manifests.py writes it, the reset role looks for it).
CACHE_MARKER = ".cluster-bootstrap-cache"
# images/s per GPU (see SmokeTestSettings.throughput_floors): a quarter of airbench94's published A100 rate
# (500,000 images in 3.83 s, about 130,000/s), scaled by dense bf16 throughput relative to the A100.
DEFAULT_THROUGHPUT_FLOORS: dict[str, float] = {
    "A100": 32_000.0, "H100": 75_000.0, "H200": 75_000.0, "H800": 75_000.0, "B200": 110_000.0,
    "A800": 32_000.0, "L40S": 28_000.0, "A10": 10_000.0, "L4": 9_000.0, "T4": 3_000.0, "V100": 8_000.0,
}

# The shapes below under the names the fields give them (provision/inputs/values.py holds every shape).
CalicoVersion = Annotated[str, AfterValidator(RELEASE_TAG.named("a Calico release tag", "v3.33.1").parse)]
ToolkitVersion = Annotated[str, AfterValidator(VERSION.named("a container toolkit release", "1.19.1").parse)]
DevicePluginVersion = Annotated[str, AfterValidator(RELEASE_TAG.named("a device plugin release tag", "v0.20.1").parse)]
QueueName = Annotated[str, AfterValidator(DNS_LABEL.named("a valid queue name").parse)]
DevicePluginImage = Annotated[str, AfterValidator(IMAGE_NAME.parse)]
GpuResource = Annotated[str, AfterValidator(EXTENDED_RESOURCE.named("an extended resource name", "nvidia.com/gpu").parse)]
# Extended resources take whole amounts only (Kubernetes refuses 0.5 or 500m of one).
ResourceAmount = Annotated[str, AfterValidator(COUNT.named(
    "a Kubernetes quantity", "1").parse)]


def _text_of_number(value: object) -> object:
    """YAML reads `shm_size: 2` or `rdma/hca: 0.5` as numbers: their text, which the shape then checks (a whole
    float as the integer it is; a bool stays a bool, and is refused)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float)):
        return str(value)
    return value


SizeQuantity = Annotated[str, BeforeValidator(_text_of_number), AfterValidator(QUANTITY.parse)]


def kube_minor_problem(minor: int, *, allow_untested: bool = False) -> str | None:
    """Why Kubernetes 1.<minor> cannot be installed by this release (the versions table's range; a newer minor
    only with kubernetes.allow_untested_versions), or None."""
    return versions.kubernetes_minor_problem(minor, allow_untested=allow_untested)


def _cidr_problem(network: ipaddress.IPv4Network) -> str | None:
    for text, name in UNUSABLE_RANGES.items():
        if network.overlaps(ipaddress.ip_network(text)):
            return f"overlaps the {name} range: pick a private range such as 10.244.0.0/16"
    return None


class _Section(BaseModel):
    # Unknown keys are refused (with a did-you-mean) rather than silently ignored. Strict: YAML's `true` is not
    # the number 1, and 22.5 is not 22.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class KubernetesSettings(_Section):
    # A minor newer than the versions table knows is refused unless this says to try it anyway (declared before
    # version, whose check reads it).
    allow_untested_versions: bool = False
    # A minor ("1.36") installs that minor's newest patch; a full version ("1.36.4") pins it.
    version: str = versions.KUBERNETES_DEFAULT
    # Not the seed tutorials' 192.168.0.0/16: that collides with the usual 192.168.x node networks.
    pod_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/12"
    dns_domain: DnsSubdomain = "cluster.local"
    cni: Literal["calico"] = "calico"
    # ipvs needs kernel modules that many hosts (and every lab node here) lack; iptables works everywhere.
    kube_proxy_mode: Literal["iptables", "ipvs", "nftables"] = "iptables"

    @field_validator("version", mode="before")
    @classmethod
    def _version_format(cls, value: object, info: ValidationInfo) -> str:
        if isinstance(value, (int, float)):
            # YAML reads 1.30 as the number 1.3: a silent wrong version, so numbers are refused.
            raise ValueError(f"{value} is a number, not a version: quote it, e.g. version: '1.31'")
        if not isinstance(value, str):
            raise ValueError(f"{shown(value)} is not a version: write it as '1.31' or '1.31.4'")
        KUBERNETES_VERSION.parse(value)
        minor = int(value.lstrip("v").split(".")[1])
        problem = kube_minor_problem(minor, allow_untested=info.data.get("allow_untested_versions") is True)
        if problem:
            raise ValueError(f"Kubernetes {value} is {problem}")
        return value.lstrip("v")

    @field_validator("pod_cidr", "service_cidr")
    @classmethod
    def _cidr_format(cls, value: str) -> str:
        if "/" not in value:
            raise ValueError(f"{shown(value)} has no prefix length: write the range as 10.244.0.0/16")
        if ":" in value and value.isascii() and value.isprintable():
            raise ValueError(f"{shown(value)} is IPv6; only IPv4 clusters are supported for now")
        if not IPV4_NETWORK.pattern.fullmatch(value):
            raise ValueError(f"{shown(value)} is not a valid CIDR (four numbers, '/', a prefix length); write it as "
                             "10.244.0.0/16")
        try:
            network = ipaddress.ip_network(value, strict=True)
        except ValueError as exc:
            raise ValueError(f"{shown(value)} is not a valid CIDR ({exc}); write it as 10.244.0.0/16") from None
        if not isinstance(network, ipaddress.IPv4Network):
            raise ValueError(f"{shown(value)} is IPv6; only IPv4 clusters are supported for now")
        problem = _cidr_problem(network)
        if problem:
            raise ValueError(f"{network} {problem}")
        return str(network)

    @field_validator("pod_cidr")
    @classmethod
    def _pod_cidr_size(cls, value: str) -> str:
        if ipaddress.ip_network(value).prefixlen < WIDEST_POD_PREFIX:
            raise ValueError(f"{value} is wider than /{WIDEST_POD_PREFIX}, more than kube-controller-manager can "
                             "divide into per-node /24s: use a /16 such as 10.244.0.0/16")
        return value

    @field_validator("service_cidr")
    @classmethod
    def _service_cidr_size(cls, value: str) -> str:
        prefix = ipaddress.ip_network(value).prefixlen
        if prefix < WIDEST_SERVICE_PREFIX:
            raise ValueError(f"{value} is wider than /{WIDEST_SERVICE_PREFIX}, which kubeadm refuses: use e.g. "
                             "10.96.0.0/12")
        if prefix > NARROWEST_SERVICE_PREFIX:
            raise ValueError(f"{value} is narrower than /{NARROWEST_SERVICE_PREFIX}: the cluster DNS service takes "
                             "its 10th address; use e.g. 10.96.0.0/12")
        return value

    @model_validator(mode="after")
    def _cidrs_disjoint(self) -> KubernetesSettings:
        if ipaddress.ip_network(self.pod_cidr).overlaps(ipaddress.ip_network(self.service_cidr)):
            raise ValueError(f"pod_cidr {self.pod_cidr} overlaps service_cidr {self.service_cidr}: "
                             "choose disjoint ranges, e.g. pod_cidr 10.244.0.0/16 and service_cidr 10.96.0.0/12")
        return self

    @property
    def minor(self) -> str:
        """'1.31' for both '1.31' and '1.31.4'."""
        return ".".join(self.version.split(".")[:2])

    @property
    def patch(self) -> str | None:
        """The release the version pins ('1.31.4'), or None for a bare minor ('1.31': the newest patch the package
        repository has). Decided here once: the package specs, kubeadm's kubernetesVersion and the API server's
        check read it."""
        return self.version if self.version.count(".") == 2 else None

    def is_running(self, version: str) -> bool:
        """Whether a component reporting `version` ('v1.31.4', 'v1.31.4+k3s1') runs what this setting asks for:
        the pinned release, or any patch of the minor."""
        running = version.lstrip("v").split("+")[0]
        return running == self.patch if self.patch else running.startswith(self.minor + ".")

    @property
    def minor_number(self) -> int:
        return int(self.version.split(".")[1])


class ContainerRuntimeSettings(_Section):
    # containerd runs the pods; the Docker engine is installed beside it for building images (the kubelet does
    # not use it), from the same place as containerd: docker-ce with Docker's containerd.io, docker.io with the
    # distribution's containerd (Debian's docker.io cannot sit beside containerd.io).
    install_docker: bool = True
    # auto: Docker's containerd.io where the distribution's containerd is older than 2.0, else the distribution's.
    containerd_source: Literal["auto", "docker", "distribution"] = "auto"
    # Registry host -> mirror endpoints, written into containerd's hosts.toml files.
    registry_mirrors: dict[RegistryHost, list[Url]] = Field(default_factory=dict)

    @field_validator("registry_mirrors")
    @classmethod
    def _mirrors(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for registry, endpoints in value.items():
            if not endpoints:
                raise ValueError(f"{registry} has no mirror: list at least one URL, or leave the registry out")
        return value


class MirrorProfile(StrEnum):
    """Named sets of sources (inputs/sources.py PROFILES holds what each one points at)."""

    default = "default"
    # Mirrors reachable from mainland China.
    cn = "cn"


class MirrorSettings(_Section):
    # A named profile switches every source at once; a per-source value below overrides the profile.
    # Not strict: YAML gives the profile's name, which names the member.
    profile: MirrorProfile = Field(default=MirrorProfile.default, strict=False)
    os_repo: RepositoryUrl | None = None
    docker_repo: RepositoryUrl | None = None
    kubernetes_repo: RepositoryUrl | None = None
    nvidia_cuda_repo: RepositoryUrl | None = None
    nvidia_toolkit_repo: RepositoryUrl | None = None
    image_repository: Registry | None = None
    calico_manifest: RepositoryUrl | None = None
    pip_index: RepositoryUrl | None = None
    # The CIFAR-10 python archive the smoke test's pods fetch (dataset: cifar10), as a full URL.
    cifar10_archive: RepositoryUrl | None = None
    # Raw files of GitHub repositories (Volcano's installer): raw.githubusercontent.com or a mirror of it.
    github_raw: RepositoryUrl | None = None
    # A base URL holding the add-ons' release manifests already rendered, as <addon>/<version>/<part>.yaml
    # (docs/addons.md): replaces GitHub for every add-on, the Kubeflow ones included.
    addon_manifests: RepositoryUrl | None = None

    @field_validator("image_repository", mode="before")
    @classmethod
    def _registry(cls, value: object) -> object:
        # A trailing '/' is how a path is often copied; the registry is the same without it.
        return value.rstrip("/") if isinstance(value, str) else value


class OfflineSettings(_Section):
    # A local directory on the nodes (file://) or an HTTP repository that replaces every online source.
    # Layout expected under it is documented in docs/offline.md.
    source: RepositoryUrl | None = None
    image_repository: Registry | None = None
    # The key a bundle at `source` must be signed by (`bootstrap bundle build` prints it): with it set, `source`
    # must be a bundle that verifies against that key, checked before any node is touched.
    bundle_fingerprint: Fingerprint | None = None

    @field_validator("source", mode="before")
    @classmethod
    def _absolute_path_is_a_file_url(cls, value: object) -> object:
        if isinstance(value, str) and value.startswith("/"):
            value = "file://" + value
        if isinstance(value, str) and not re.match(r"(?:https?|file)://", value, re.ASCII | re.IGNORECASE):
            raise ValueError(f"{shown(value)} is neither an absolute path nor an http(s):// or file:// URL")
        # A trailing '/' is how a folder is often written; the source is the same without it (file:/// stays, and is
        # refused: the root is no source).
        return value.rstrip("/") if isinstance(value, str) and not value.endswith(":///") else value

    @field_validator("image_repository", mode="before")
    @classmethod
    def _registry(cls, value: object) -> object:
        return value.rstrip("/") if isinstance(value, str) else value


class CalicoSettings(_Section):
    # Left out: the release the versions table pairs with kubernetes.version (filled in by Settings).
    version: CalicoVersion = versions.kubernetes_release(int(versions.KUBERNETES_DEFAULT.split(".")[1])).calico

    @field_validator("version", mode="before")
    @classmethod
    def _a_tag(cls, value: object) -> object:
        if not isinstance(value, str):
            raise ValueError(f"{shown(value)} is not a Calico release tag: write it as v3.33.1 (quoted or not)")
        return value


# The extended resource the NVIDIA device plugin advertises and GPU pods request, also the key of the taint
# GPU nodes may carry. The device plugin fixes the name, so it is a constant beside the GPU settings, not one.
GPU_RESOURCE = "nvidia.com/gpu"


# A MIG profile as NVIDIA names it: compute slices and memory (1g.10gb, 3g.40gb); the media-extension variants
# (+me) give one instance per GPU and are not offered.
MIG_PROFILE_RE = re.compile(r"[1-8]g\.[0-9]{1,3}gb", re.ASCII)
SHARING_REPLICAS_MAX = 64


class MigSettings(_Section):
    # none: GPUs stay whole. single: every GPU of the GPU nodes is cut into instances of `profile`, each advertised
    # as nvidia.com/gpu; mixed: the same cut, advertised as nvidia.com/mig-<profile> (the device plugin's
    # strategies). Applied with `nvidia-smi mig` by the gpu phase; preflight refuses GPUs without MIG.
    strategy: Literal["none", "single", "mixed"] = "none"
    # One profile for every GPU, e.g. 1g.10gb (seven per A100 80GB or H100 80GB); versions.MIG_PRODUCTS lists them.
    profile: str | None = None

    @field_validator("profile")
    @classmethod
    def _profile(cls, value: str | None) -> str | None:
        if value is not None and not MIG_PROFILE_RE.fullmatch(value):
            raise ValueError(f"{shown(value)} is not a MIG profile: write it as NVIDIA names it, e.g. 1g.10gb or 3g.40gb")
        return value

    @model_validator(mode="after")
    def _profile_goes_with_strategy(self) -> MigSettings:
        if self.strategy != "none" and self.profile is None:
            raise ValueError(f"strategy {self.strategy} cuts every GPU into instances of one profile: set "
                             "gpu.mig.profile, e.g. 1g.10gb")
        if self.strategy == "none" and self.profile is not None:
            raise ValueError(f"profile {self.profile} is only applied with gpu.mig.strategy single or mixed: set "
                             "the strategy, or leave profile out")
        return self

    @property
    def enabled(self) -> bool:
        return self.strategy != "none"


class GpuSettings(_Section):
    # Driver branch from NVIDIA's CUDA repository (the nvidia-driver-<branch> / module stream).
    driver_branch: str = versions.DRIVER_BRANCH_DEFAULT
    container_toolkit_version: ToolkitVersion = versions.CONTAINER_TOOLKIT_DEFAULT
    device_plugin_version: DevicePluginVersion = versions.DEVICE_PLUGIN_DEFAULT
    # The device plugin image without its tag (the tag is device_plugin_version); offline.image_repository
    # replaces its registry host when set.
    device_plugin_image: DevicePluginImage = "nvcr.io/nvidia/k8s-device-plugin"
    # default: nvidia becomes containerd's default runtime; runtimeclass: pods opt in via RuntimeClass "nvidia".
    runtime: Literal["default", "runtimeclass"] = "default"
    # Several pods on one GPU, through the device plugin's own sharing: time-slicing (the GPU's time, memory shared
    # freely) or mps (CUDA MPS: memory and compute split evenly). Each GPU (or MIG instance) is advertised
    # `replicas` times.
    sharing: Literal["none", "time-slicing", "mps"] = "none"
    replicas: int | None = None
    mig: MigSettings = Field(default_factory=MigSettings)

    @field_validator("driver_branch")
    @classmethod
    def _known_branch(cls, value: str) -> str:
        # The branch becomes part of package names: its shape first, then the versions table.
        DRIVER_BRANCH.parse(value)
        branch = versions.DRIVER_BRANCHES.get(value)
        if branch is None or not branch.supported:
            known = ", ".join(versions.branch_text(b) for b in versions.DRIVER_BRANCHES.values() if b.supported)
            why = f"past its end of life ({branch.end_of_life})" if branch else "not in the versions table"
            raise ValueError(f"driver branch {value!r} is {why}: use one of {known}")
        return value

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, value: int | None) -> int | None:
        if value is not None and value < 2:
            raise ValueError(f"{value} replica shares nothing: give 2 to {SHARING_REPLICAS_MAX} pods per GPU, or "
                             "leave gpu.sharing and gpu.replicas out")
        if value is not None and value > SHARING_REPLICAS_MAX:
            raise ValueError(f"{value} is more than {SHARING_REPLICAS_MAX} pods per GPU: give 2 to "
                             f"{SHARING_REPLICAS_MAX}")
        return value

    @model_validator(mode="after")
    def _sharing_agrees(self) -> GpuSettings:
        if self.sharing != "none" and self.replicas is None:
            raise ValueError(f"sharing {self.sharing} needs gpu.replicas: how many pods share each GPU, e.g. 4")
        if self.sharing == "none" and self.replicas is not None:
            raise ValueError(f"replicas {self.replicas} is only used with gpu.sharing time-slicing or mps: set "
                             "sharing, or leave replicas out")
        if self.sharing == "mps" and self.mig.enabled:
            raise ValueError("sharing mps cannot run on MIG instances (the device plugin does not support MPS on "
                             "MIG devices): use sharing time-slicing, or gpu.mig.strategy none")
        return self

    @property
    def advertised_resource(self) -> str:
        """The extended resource the device plugin advertises the GPUs (or their MIG instances) as."""
        if self.mig.strategy == "mixed" and self.mig.profile:
            return f"nvidia.com/mig-{self.mig.profile}"
        return GPU_RESOURCE

    @field_validator("container_toolkit_version", "device_plugin_version")
    @classmethod
    def _not_older_than_tested(cls, value: str, info: ValidationInfo) -> str:
        minimum = {"container_toolkit_version": versions.CONTAINER_TOOLKIT_MINIMUM,
                   "device_plugin_version": versions.DEVICE_PLUGIN_MINIMUM}[str(info.field_name)]
        if versions.parse_version(value) < minimum:
            default = GpuSettings.model_fields[str(info.field_name)].default
            raise ValueError(f"{value} is older than {versions.shown_version(minimum)}, the oldest this release "
                             f"works with: use {default}")
        return value


class SmokeTestSettings(_Section):
    enabled: bool = True
    # auto: GPU when any node has one, CPU otherwise.
    mode: Literal["auto", "gpu", "cpu"] = "auto"
    # Left out: this CUDA 13 image, or on clusters with GPUs older than Turing the CUDA 12.6 one
    # (versions.SMOKE_IMAGES); a value set here is used on every cluster.
    image: ImageReference = versions.SMOKE_IMAGE_DEFAULT
    gpus: int = Field(default=1, ge=1)
    nodes: int = Field(default=1, ge=1)
    # With gpu.sharing: how many training pods run at once, each on one shared replica of a GPU (left out: as many
    # as gpu.replicas, so one GPU is filled).
    shared_pods: int | None = Field(default=None, ge=1, le=64)
    epochs: int = Field(default=10, ge=1)
    # The pass mark on the synthetic set (its best possible accuracy is 0.95: 5% of its labels are wrong on purpose).
    min_accuracy: float = Field(default=0.90, gt=0, le=1, allow_inf_nan=False)
    # The pass mark with `dataset: cifar10`: the airbench94 recipe reaches about 94% on the real set.
    cifar10_min_accuracy: float = Field(default=0.935, gt=0, le=1, allow_inf_nan=False)
    # Steady-state training images/s one GPU must reach, by GPU model (matched in the device name the trainer
    # reports, e.g. "NVIDIA H100 80GB HBM3"; the longest matching key wins). A model not listed is reported
    # without a floor. The defaults are a quarter of what airbench94's published A100 time (10 epochs of 50,000
    # images in 3.83 s) implies, scaled by each model's bf16 throughput: conservative, not measured here.
    throughput_floors: dict[GpuModel, PositiveFloat] = Field(default_factory=lambda: dict(DEFAULT_THROUGHPUT_FLOORS))
    timeout_s: int = Field(default=900, ge=60)
    # synthetic: a generated, learnable set in CIFAR-10's format (no download); cifar10: the real archive.
    dataset: Literal["synthetic", "cifar10"] = "synthetic"
    # What runs the training: a TrainJob (Kubeflow Trainer), a PyTorchJob (Training Operator) or a plain Job.
    # auto: a TrainJob when the cluster serves the TrainJob API, else a Job.
    workload: Literal["auto", "job", "pytorchjob", "trainjob"] = "auto"
    # auto: Volcano (a gang: every pod or none) when the cluster serves its PodGroup API, else the default scheduler.
    scheduler: Literal["auto", "default", "volcano"] = "auto"
    # The seeds' knobs for multi-node training: extra environment (NCCL_DEBUG, NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...),
    # the host's network namespace, the /dev/shm size, extra resources (rdma/hca), IPC_LOCK (for RDMA memory
    # registration) and the GPU resource name (a vendor's device plugin may advertise its own).
    env: dict[EnvName, Text] = Field(default_factory=dict)
    host_network: bool = False
    shm_size: SizeQuantity = "2Gi"
    extra_resources: dict[ExtendedResource, ResourceAmount] = Field(default_factory=dict)
    ipc_lock: bool = False
    gpu_resource: GpuResource = GPU_RESOURCE
    # The link speed under which preflight and the smoke test warn that multi-node training will be throttled.
    min_link_gbps: PositiveFloat = 10.0
    # The md5 the CIFAR-10 archive must have (its URL is mirrors.cifar10_archive, or the profile's).
    cifar10_md5: Md5 = CIFAR10_MD5
    # Where the archive (and, with `smoke-test --save`, the trained model) is kept between runs: a hostPath under
    # cache_path on each node, a PersistentVolumeClaim of the default StorageClass, or nothing (every pod fetches).
    # auto: the PVC for single-pod runs when a default StorageClass exists, else the hostPath.
    cache: Literal["auto", "hostpath", "pvc", "none"] = "auto"
    # `reset` removes it (where the smoke test marked it as its own: smoke/manifests.py CACHE_MARKER), so it is a
    # directory of its own, never a system one or a parent of one.
    cache_path: DeletablePath = "/var/lib/cluster-bootstrap/cache"
    cache_size: SizeQuantity = "2Gi"
    # The fetch into the cache has its own deadline, apart from training's timeout_s.
    data_timeout_s: int = Field(default=600, ge=30)

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: object) -> object:
        if not isinstance(value, dict):
            raise ValueError("write it as a mapping of variable names to values, e.g. {NCCL_DEBUG: INFO}")
        env = {}
        for name, setting in value.items():
            if isinstance(setting, (dict, list)) or setting is None:
                raise ValueError(f"{name}: give a single value (a string or a number), not '{setting}'")
            if isinstance(setting, float) and not math.isfinite(setting):
                raise ValueError(f"{name}: {setting} is not a number a program can read: write it as a string")
            env[name] = str(setting).lower() if isinstance(setting, bool) else str(setting)
        return env

    @field_validator("extra_resources", mode="before")
    @classmethod
    def _extra_resources(cls, value: object) -> object:
        if not isinstance(value, dict):
            raise ValueError("write it as a mapping of resource names to amounts, e.g. {rdma/hca: 1}")
        return {name: _text_of_number(amount) for name, amount in value.items()}

    @field_validator("cache_path", mode="before")
    @classmethod
    def _cache_path(cls, value: object) -> object:
        # A trailing '/' names the same directory; anything else not normalised is refused by the shape.
        if isinstance(value, str) and len(value) > 1 and value.endswith("/") and not value.endswith("//"):
            return value[:-1]
        return value

    @model_validator(mode="after")
    def _resources_not_twice(self) -> SmokeTestSettings:
        for name in self.extra_resources:
            if name in ("cpu", "memory") or name == self.gpu_resource:
                raise ValueError(f"extra_resources: {name} is requested by the smoke test itself (gpu_resource): leave "
                                 "it out of extra_resources")
        return self


class AddonsSettings(_Section):
    # The add-ons `up` installs after the gpu phase, each from its pinned release: none by default.
    enabled: tuple[AddonName, ...] = ()
    volcano_version: str = ADDONS["volcano"].version
    training_operator_version: str = ADDONS["training_operator"].version
    trainer_version: str = ADDONS["trainer"].version
    cert_manager_version: str = ADDONS["cert_manager"].version
    kserve_version: str = ADDONS["kserve"].version
    pipelines_version: str = ADDONS["pipelines"].version
    node_feature_discovery_version: str = ADDONS["node_feature_discovery"].version
    gpu_feature_discovery_version: str = ADDONS["gpu_feature_discovery"].version
    dcgm_exporter_version: str = ADDONS["dcgm_exporter"].version
    # The Volcano queue the smoke test's gangs wait in (the volcano add-on creates it).
    volcano_queue: QueueName = "cluster-bootstrap"
    # How long an add-on phase waits for its CRDs to be Established and its controllers Available.
    timeout_s: int = Field(default=600, ge=30)

    @field_validator("enabled", mode="before")
    @classmethod
    def _listed_once(cls, value: object) -> object:
        if isinstance(value, str):
            raise ValueError(f"write it as a list, e.g. [{value}]")
        if isinstance(value, (list, tuple)):
            if len(set(map(str, value))) != len(value):
                raise ValueError(f"{list(value)} names an add-on twice")
            # YAML gives a list; the settings keep it as a tuple (strict types take no list for one).
            return tuple(value)
        return value

    @field_validator("enabled")
    @classmethod
    def _with_requirements(cls, value: tuple[AddonName, ...]) -> tuple[AddonName, ...]:
        """What an enabled add-on needs is enabled with it (KServe's cert-manager), in install order."""
        wanted = set(value)
        for name in value:
            wanted |= set(ADDONS[name].requires)
        return tuple(name for name in ADDON_ORDER if name in wanted)

    @field_validator(*(f"{name}_version" for name in ADDON_ORDER))
    @classmethod
    def _release_tag(cls, value: str, info: ValidationInfo) -> str:
        addon = ADDONS[str(info.field_name).removesuffix("_version")]  # type: ignore[index]
        if not re.fullmatch(addon.version_pattern, value, re.ASCII):
            raise ValueError(f"{shown(value)} is not a release tag of {addon.title}: write it as {addon.version}")
        return value

    def version(self, name: AddonName) -> str:
        return str(getattr(self, f"{name}_version"))


class VerifySettings(_Section):
    # How long `up` waits for every node to be Ready and every kube-system pod to run.
    timeout_s: int = Field(default=600, ge=10)
    # A small image with nslookup; the verify phase runs it once to prove cluster DNS answers.
    dns_probe_image: ImageReference = "docker.io/library/busybox:1.36"


class UpgradeSettings(_Section):
    # How long `bootstrap upgrade` waits for a node's pods to be evicted (a PodDisruptionBudget may hold one back)
    # before it stops, naming the pod that blocks; the node stays cordoned and a re-run goes on from it.
    drain_timeout_s: int = Field(default=300, ge=10, le=86400)


class CertificatesSettings(_Section):
    # A systemd timer on every control plane renews kubeadm's certificates (and restarts the control-plane static
    # pods) once one of them expires within renew_before_days. Off: `bootstrap certs renew` does it when asked.
    renew_timer: bool = False
    # The renewal timer's threshold; `bootstrap certs check` warns about certificates below it too.
    renew_before_days: int = Field(default=30, ge=1, le=300)


class AnsibleSettings(_Section):
    # auto: Mitogen's mitogen_linear strategy when it is installed and supports this Ansible, else the stock one.
    # Mitogen costs far less controller CPU per task and host; stock is the fallback and the reference.
    executor: Literal["auto", "mitogen", "stock"] = "auto"


class SshSettings(_Section):
    # Host keys are always checked; accepting unknown keys on first contact must be asked for.
    accept_new_host_keys: bool = False
    known_hosts_file: str = "~/.ssh/known_hosts"
    connect_timeout_s: int = Field(default=10, ge=1, le=300)

    @field_validator("known_hosts_file")
    @classmethod
    def _known_hosts(cls, value: str) -> str:
        problem = known_hosts_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @property
    def known_hosts_path(self) -> Path:
        return Path(self.known_hosts_file).expanduser()


def known_hosts_problem(value: str) -> str | None:
    """Why `value` cannot be a known_hosts file (host keys are read from it and new ones appended), or None."""
    if not value.strip() or LOCAL_PATH.problem(value):
        return f"{shown(value)} is not a file name: name the known_hosts file, e.g. ~/.ssh/known_hosts"
    try:
        path = Path(value).expanduser()
    except RuntimeError:
        return f"{shown(value)} names a home directory that does not exist: write the path out"
    try:
        if path.exists() and not path.is_file():
            return f"{path} is a directory, not a known_hosts file: name the file in it, e.g. {path / 'known_hosts'}"
        blocker = next((p for p in path.parents if p.exists()), None)
    except OSError as exc:
        return f"{shown(value)} cannot name a file here ({exc.strerror})"
    if blocker is not None and not blocker.is_dir():
        return f"{path}: {blocker} is a file, so the known_hosts file cannot be there"
    return None


class KubeletSettings(_Section):
    # From Kubernetes 1.35 the kubelet refuses cgroup v1 hosts (KEP-5573). true sets failCgroupV1: false and
    # skips kubeadm's SystemVerification check, so such hosts still run: unsupported, warned about on every run.
    allow_cgroup_v1: bool = False
    # The other way out: prepare boots cgroup v1 nodes with systemd.unified_cgroup_hierarchy=1 (a reboot).
    switch_to_cgroup_v2: bool = False

    @model_validator(mode="after")
    def _one_way_out(self) -> KubeletSettings:
        if self.allow_cgroup_v1 and self.switch_to_cgroup_v2:
            raise ValueError("allow_cgroup_v1 and switch_to_cgroup_v2 are both true: they are two ways out of cgroup "
                             "v1, keep one (switch_to_cgroup_v2 reboots the nodes into cgroup v2, the supported way)")
        return self


class PackagesSettings(_Section):
    # How long a package transaction waits for a dpkg/apt or rpm/dnf lock another process holds (unattended-upgrades
    # or cloud-init on a freshly booted machine) before it fails, naming the lock and its holder.
    lock_timeout_s: int = Field(default=300, ge=1, le=86400)


class DownloadsSettings(_Section):
    # Tries per download (repository keys and package lists, packages, Calico's manifest) when it fails transiently
    # (a mirror's 5xx, a reset connection, a slow read), with a doubling pause between them; permanent failures
    # (404, a bad signature) fail at once.
    attempts: int = Field(default=4, ge=1, le=10)


class ControlPlaneSettings(_Section):
    # Where the nodes and this machine reach the API servers. vip: a virtual IP address kube-vip (a static pod on
    # every control plane) moves to a healthy one; proxy: a local proxy on every node in front of all API servers;
    # none: the (only) control plane's own address. auto: vip when `vip` is set, else proxy with several control
    # planes, else none.
    endpoint: Literal["auto", "vip", "proxy", "none"] = "auto"
    # The virtual IP: a free address in the control planes' own subnet (checked by preflight), held by one of
    # them at a time (ARP).
    vip: str | None = None
    # The interface kube-vip announces the VIP on; left out, each control plane's route to the VIP decides.
    interface: InterfaceName | None = None
    kube_vip_image: ImageReference = versions.KUBE_VIP_IMAGE
    proxy_image: ImageReference = versions.API_PROXY_IMAGE

    @field_validator("vip")
    @classmethod
    def _vip(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if IPV4_UNICAST.problem(value):
            raise ValueError(f"{shown(value)} is not an IPv4 address of a machine: write a free address of the "
                             "control planes' subnet, e.g. 192.168.10.100")
        address = ipaddress.IPv4Address(value)
        if address.is_unspecified or address.is_loopback or address.is_multicast or address.is_reserved \
                or address.is_link_local:
            raise ValueError(f"{value} cannot be a virtual IP (unspecified, loopback, link-local, multicast or "
                             "reserved): pick a free address of the control planes' subnet")
        return str(address)

    @model_validator(mode="after")
    def _vip_goes_with_its_mode(self) -> ControlPlaneSettings:
        if self.endpoint == "vip" and self.vip is None:
            raise ValueError("endpoint vip needs control_plane.vip: a free address of the control planes' subnet")
        if self.vip is not None and self.endpoint in ("proxy", "none"):
            raise ValueError(f"vip {self.vip} is only used with endpoint vip (it is {self.endpoint}): set endpoint "
                             "vip (or auto), or leave vip out")
        if self.interface is not None and self.vip is None:
            raise ValueError("interface names where kube-vip announces control_plane.vip, which is not set: set vip, "
                             "or leave interface out")
        return self


class FirewallSettings(_Section):
    # open-ports: open the kubeadm and Calico ports in firewalld/ufw; disable: stop the firewall; leave: touch nothing.
    mode: Literal["open-ports", "disable", "leave"] = "open-ports"


class EtcdSettings(_Section):
    # How many snapshots are kept: on this machine (`bootstrap etcd snapshot`) and on each control plane (the timer).
    snapshot_keep: int = Field(default=5, ge=1, le=1000)
    # Opt in: a systemd timer on each control plane takes a snapshot on `snapshot_schedule`, keeping the last N there.
    snapshot_timer: bool = False
    # When the timer fires: systemd's OnCalendar (hourly, daily, or an expression such as '*-*-* 00/6:00:00').
    snapshot_schedule: SystemdCalendar = "hourly"
    # Also send each `bootstrap etcd snapshot` to an S3-compatible store (s3://BUCKET/PREFIX), with the control
    # plane's /etc/kubernetes/pki sealed with the operator's key (pki_key_file): losing every control plane is then
    # recoverable (`bootstrap etcd restore --from s3://...`). Credentials: the AWS environment or profile.
    snapshot_target: S3Url | None = None
    # The store's endpoint: an S3-compatible server (MinIO, Ceph RGW, OSS, ...); unset: AWS's own.
    s3_endpoint: Url | None = None
    s3_region: S3Region = "us-east-1"
    # A file on this machine whose first line is the passphrase the certificates are sealed with (mode 0600).
    pki_key_file: str | None = None

    @field_validator("pki_key_file")
    @classmethod
    def _key_file(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or LOCAL_PATH.problem(value)):
            raise ValueError(f"{shown(value)} is not a file name: name the file that holds your passphrase")
        return value

    @model_validator(mode="after")
    def _target_needs_a_key(self) -> EtcdSettings:
        if self.snapshot_target is not None and self.pki_key_file is None:
            raise ValueError("snapshot_target sends /etc/kubernetes/pki off the nodes with each snapshot, sealed with "
                             "your key: set pki_key_file too (a file whose first line is your passphrase, mode 0600)")
        return self


class Settings(_Section):
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    kubelet: KubeletSettings = Field(default_factory=KubeletSettings)
    container_runtime: ContainerRuntimeSettings = Field(default_factory=ContainerRuntimeSettings)
    mirrors: MirrorSettings = Field(default_factory=MirrorSettings)
    offline: OfflineSettings = Field(default_factory=OfflineSettings)
    calico: CalicoSettings = Field(default_factory=CalicoSettings)
    gpu: GpuSettings = Field(default_factory=GpuSettings)
    smoke_test: SmokeTestSettings = Field(default_factory=SmokeTestSettings)
    addons: AddonsSettings = Field(default_factory=AddonsSettings)
    verify: VerifySettings = Field(default_factory=VerifySettings)
    upgrade: UpgradeSettings = Field(default_factory=UpgradeSettings)
    certificates: CertificatesSettings = Field(default_factory=CertificatesSettings)
    ssh: SshSettings = Field(default_factory=SshSettings)
    firewall: FirewallSettings = Field(default_factory=FirewallSettings)
    control_plane: ControlPlaneSettings = Field(default_factory=ControlPlaneSettings)
    packages: PackagesSettings = Field(default_factory=PackagesSettings)
    downloads: DownloadsSettings = Field(default_factory=DownloadsSettings)
    ansible: AnsibleSettings = Field(default_factory=AnsibleSettings)
    etcd: EtcdSettings = Field(default_factory=EtcdSettings)

    @model_validator(mode="before")
    @classmethod
    def _calico_follows_kubernetes(cls, data: Any) -> Any:
        """calico.version left out: the Calico release the versions table pairs with kubernetes.version."""
        if not isinstance(data, dict):
            return data
        calico, kube = data.get("calico", {}), data.get("kubernetes", {})
        if not isinstance(calico, dict) or "version" in calico or not isinstance(kube, dict):
            return data
        version = kube.get("version", versions.KUBERNETES_DEFAULT)
        # A version that does not parse, or is refused, is reported by its own validator.
        if KUBERNETES_VERSION.problem(version):
            return data
        minor = int(str(version).lstrip("v").split(".")[1])
        if versions.kubernetes_minor_problem(minor, allow_untested=True):
            return data
        return {**data, "calico": {**calico, "version": versions.kubernetes_release(minor).calico}}

    def addons_kubernetes_problem(self) -> str | None:
        """Why an enabled add-on cannot run on kubernetes.version (its stated support range), or None. Settings
        refuse it when read; `bootstrap upgrade` asks again of each step's settings (model_copy validates nothing).
        Only a stated support range refuses (a tested range warns: validation.addon_warnings), and only for the
        table's own release at a minor the versions table knows (a pinned release's range is not known here; a
        newer minor is allowed as untested, as Calico's pairing is)."""
        minor = self.kubernetes.minor_number
        if minor > versions.KUBERNETES_RELEASES[-1].minor:
            return None
        for name in self.addons.enabled:
            addon = ADDONS[name]
            problem = addon.kubernetes_problem(minor) if addon.kubernetes_required else None
            if problem and self.addons.version(name) == addon.version:
                needed_by = [n for n in self.addons.enabled if name in ADDONS[n].requires]
                why = f" (needed by {', '.join(needed_by)})" if needed_by else ""
                return (f"addons.enabled: {problem}{why}: choose a kubernetes.version it supports, or "
                        f"leave {', '.join(needed_by) or name} out of addons.enabled")
        return None

    @model_validator(mode="after")
    def _addons_fit_kubernetes(self) -> Settings:
        problem = self.addons_kubernetes_problem()
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _sharing_fits_the_smoke_test(self) -> Settings:
        # The device plugin refuses a request of more than one shared GPU (failRequestsGreaterThanOne): a shared
        # replica is a slice of one GPU, and two of them are not two GPUs.
        if self.gpu.sharing != "none" and self.smoke_test.gpus > 1:
            raise ValueError(f"gpu.sharing {self.gpu.sharing} hands out slices of one GPU, so smoke_test.gpus "
                             f"{self.smoke_test.gpus} cannot be granted: set smoke_test.gpus: 1 (and "
                             "smoke_test.shared_pods for several pods on a GPU)")
        if self.gpu.sharing == "none" and self.smoke_test.shared_pods is not None:
            raise ValueError("smoke_test.shared_pods runs several pods on shared GPUs, and gpu.sharing is none: set "
                             "gpu.sharing (time-slicing or mps) and gpu.replicas, or leave shared_pods out")
        if self.gpu.sharing != "none" and self.smoke_test.nodes > 1:
            raise ValueError("smoke_test.nodes trains one model across nodes, which shared GPUs cannot carry: set "
                             "smoke_test.nodes: 1 with gpu.sharing (smoke_test.shared_pods runs several pods)")
        return self

    @property
    def smoke_gpu_resource(self) -> str:
        """The resource the smoke test's pods request: smoke_test.gpu_resource when set, else what the device
        plugin advertises (nvidia.com/mig-<profile> with gpu.mig.strategy mixed)."""
        if "gpu_resource" in self.smoke_test.model_fields_set:
            return self.smoke_test.gpu_resource
        return self.gpu.advertised_resource

    @property
    def shared_pods(self) -> int:
        """How many pods the smoke test runs on shared GPUs (1: no sharing)."""
        if self.gpu.sharing == "none":
            return 1
        return self.smoke_test.shared_pods or self.gpu.replicas or 1

    @model_validator(mode="after")
    def _versions_agree(self) -> Settings:
        problem = versions.calico_problem(self.calico.version, self.kubernetes.minor_number)
        if problem:
            raise ValueError(f"calico.version: {problem}")
        cuda = versions.image_cuda_major(self.smoke_test.image)
        problem = versions.cuda_problem(cuda, self.gpu.driver_branch) if cuda else None
        if problem:
            raise ValueError(f"smoke_test.image {self.smoke_test.image}: {problem}; set gpu.driver_branch: "
                             f"'{versions.DRIVER_BRANCH_DEFAULT}', or smoke_test.image to a CUDA "
                             f"{versions.DRIVER_BRANCHES[self.gpu.driver_branch].cuda_major} image")
        return self


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The settings section a validation error location points into (for did-you-mean suggestions)."""
    model: type[BaseModel] = Settings
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _describe(error: Mapping[str, Any], source: str) -> str:
    loc = tuple(error["loc"])
    if loc and loc[-1] == "[key]":
        # A mapping's key was refused: the message names it, so the path ends at the mapping.
        loc = loc[:-2]
    # A key the user wrote may be anything (a newline, markup): shown quoted unless it is a plain name.
    dotted = ".".join(str(p) if re.fullmatch(r"[\w./-]{1,60}", str(p), re.ASCII) else shown(p) for p in loc)
    if error["type"] == "extra_forbidden":
        model = _model_at(loc)
        known = sorted(model.model_fields) if model else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean '{'.'.join([*map(str, loc[:-1]), close[0]])}'?" if close else \
            f"known keys here: {', '.join(known)}"
        return f"{source}: unknown key '{dotted}': {hint}"
    message = error["msg"].removeprefix("Value error, ")
    # A check across sections names its fields itself.
    return f"{source}: {dotted}: {message}" if dotted else f"{source}: {message}"


def parse_settings(data: Any, source: str = "cluster.yaml") -> Settings:
    """Validate a settings mapping; raise InputError with one line naming the field and the fix."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"{source}: the top level must be a mapping of sections (kubernetes:, mirrors:, ...)")
    # A section whose keys are all commented out reads as None: treat it as "all defaults".
    data = {key: value for key, value in data.items() if value is not None}
    # A section written as a value: say what a section looks like (pydantic would name its class).
    for key, value in data.items():
        if not isinstance(value, dict) and key in Settings.model_fields:
            raise InputError(f"{source}: {key}: must be a mapping of settings ({key}: followed by indented keys), "
                             f"not {shown(value)}")
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise InputError(_describe(exc.errors()[0], source)) from None


def with_overrides(settings: Settings, overrides: Mapping[str, tuple[str, object]]) -> Settings:
    """`settings` with command-line options that stand for settings applied, checked exactly as the settings
    themselves are (their types and every check across sections). `overrides`: dotted setting ->
    (option, value); a value of None is left out. Refused in one line naming the option."""
    given = {key: option_value for key, option_value in overrides.items() if option_value[1] is not None}
    if not given:
        return settings
    data: dict[str, Any] = settings.model_dump(exclude_unset=True)
    for key, (_option, value) in given.items():
        section, _, name = key.partition(".")
        data[section] = {**data.get(section, {}), name: value}
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        option = next((option for key, (option, _value) in given.items() if where.startswith(key)), None)
        message = str(error["msg"]).removeprefix("Value error, ")
        if option is None:
            options = ", ".join(option for option, _value in given.values())
            raise InputError(f"{options}: {message}") from None
        raise InputError(f"{option}: {message}") from None


def read_settings_document(path: Path) -> Any:
    """cluster.yaml as YAML data (read safely: bounded, UTF-8, no duplicate keys), not yet validated."""
    text = read_text(path, "settings file", "pass an existing cluster.yaml or leave --config out")
    refuse_vault_file(text, path, "settings file")
    return parse_yaml(text, str(path))


def load_settings(path: Path | None) -> Settings:
    """Settings from cluster.yaml; None means every default."""
    if path is None:
        return Settings()
    return parse_settings(read_settings_document(path), str(path))
