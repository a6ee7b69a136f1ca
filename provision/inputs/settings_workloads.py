"""The settings' sections about what runs on the cluster: the GPUs (driver, sharing, MIG), the smoke test, the
add-ons, and what verification waits for."""
from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from provision.inputs import versions
from provision.inputs.addons import ADDON_ORDER, ADDONS, AddonName
from provision.inputs.files import shown
from provision.inputs.settings_base import (
    CIFAR10_MD5,
    DEFAULT_THROUGHPUT_FLOORS,
    DevicePluginImage,
    DevicePluginVersion,
    GpuResource,
    QueueName,
    ResourceAmount,
    SizeQuantity,
    ToolkitVersion,
    _Section,
    _text_of_number,
)
from provision.inputs.values import (
    DRIVER_BRANCH,
    DeletablePath,
    EnvName,
    ExtendedResource,
    GpuModel,
    ImageReference,
    Md5,
    PositiveFloat,
    Text,
)

# The extended resource the NVIDIA device plugin advertises and GPU pods request, also the key of the taint
# GPU nodes may carry. The device plugin fixes the name, so it is a constant beside the GPU settings, not one.
GPU_RESOURCE = "nvidia.com/gpu"
# The RuntimeClass (manifests/runtimeclass-nvidia.yaml, handler "nvidia": containerd's runtime the prepare phase
# registers) that pods name to run under the NVIDIA runtime when it is not containerd's default.
NVIDIA_RUNTIME_CLASS = "nvidia"
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

    @property
    def runtime_class(self) -> str | None:
        """The runtimeClassName of every pod that uses a GPU or NVML (GPU requests, the device plugin, GFD, the
        DCGM exporter): decided here, once; None where the NVIDIA runtime is containerd's default."""
        return NVIDIA_RUNTIME_CLASS if self.runtime == "runtimeclass" else None

    @field_validator("driver_branch", mode="before")
    @classmethod
    def _branch_text(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool):
            # YAML reads 580 as a number; the branch is part of package names, written as text.
            raise ValueError(f"{value} is a number to YAML, not a branch: quote it, driver_branch: '{value}'")
        return value

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
    # The same bounds as the options that stand for these (cli/option_table.py; a test holds them equal).
    gpus: int = Field(default=1, ge=1, le=64)
    nodes: int = Field(default=1, ge=1, le=5000)
    # With gpu.sharing: how many training pods run at once, each on one shared replica of a GPU (left out: as many
    # as gpu.replicas, so one GPU is filled).
    shared_pods: int | None = Field(default=None, ge=1, le=64)
    epochs: int = Field(default=10, ge=1, le=1000)
    # The pass mark on the synthetic set (its best possible accuracy is 0.95: 5% of its labels are wrong on purpose).
    min_accuracy: float = Field(default=0.90, gt=0, le=1, allow_inf_nan=False)
    # The pass mark with `dataset: cifar10`: the airbench94 recipe reaches about 94% on the real set.
    cifar10_min_accuracy: float = Field(default=0.935, gt=0, le=1, allow_inf_nan=False)
    # Steady-state training images/s one GPU must reach, by GPU model (matched in the device name the trainer
    # reports, e.g. "NVIDIA H100 80GB HBM3"; the longest matching key wins). A model not listed is reported
    # without a floor. The defaults are a quarter of what airbench94's published A100 time (10 epochs of 50,000
    # images in 3.83 s) implies, scaled by each model's bf16 throughput: conservative, not measured here.
    throughput_floors: dict[GpuModel, PositiveFloat] = Field(default_factory=lambda: dict(DEFAULT_THROUGHPUT_FLOORS))
    timeout_s: int = Field(default=900, ge=60, le=7 * 24 * 3600)
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
