"""Cluster settings: the optional cluster.yaml, validated into one typed model whose defaults all work.

Every repository, registry and download location is a setting (see `mirrors.py` for how a named profile
and per-source overrides resolve into the sources a run uses), so a mirror or an offline source never
needs a code change.
"""
from __future__ import annotations

import difflib
import ipaddress
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from provision.errors import InputError
from provision.inputs.addons import ADDONS, VERSION_PATTERN, AddonName

KUBE_VERSION_RE = re.compile(r"^v?1\.(\d+)(?:\.(\d+))?$")
# Kubernetes' own shapes: a resource quantity (2Gi, 500m, 1), a DNS-1123 label, an environment variable name,
# and a qualified resource name (rdma/hca, nvidia.com/gpu).
QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$")
DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESOURCE_NAME_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"


class _Section(BaseModel):
    # Unknown keys are refused (with a did-you-mean) rather than silently ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)


class KubernetesSettings(_Section):
    # A minor ("1.31") installs that minor's newest patch; a full version ("1.31.4") pins it.
    version: str = "1.31"
    # Not the seed tutorials' 192.168.0.0/16: that collides with the usual 192.168.x node networks.
    pod_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/12"
    dns_domain: str = "cluster.local"
    cni: Literal["calico"] = "calico"
    # ipvs needs kernel modules that many hosts (and every lab node here) lack; iptables works everywhere.
    kube_proxy_mode: Literal["iptables", "ipvs", "nftables"] = "iptables"

    @field_validator("version", mode="before")
    @classmethod
    def _version_format(cls, value: object) -> str:
        if isinstance(value, (int, float)):
            # YAML reads 1.30 as the number 1.3: a silent wrong version, so numbers are refused.
            raise ValueError(f"{value} is a number, not a version: quote it, e.g. version: '1.31'")
        match = KUBE_VERSION_RE.match(str(value).strip())
        if not match:
            raise ValueError(f"'{value}' is not a Kubernetes version: write it as 1.31 or 1.31.4")
        if int(match.group(1)) < 27:
            raise ValueError(f"Kubernetes {value} is too old: pkgs.k8s.io starts at 1.27; choose 1.27 or newer")
        return str(value).strip().lstrip("v")

    @field_validator("pod_cidr", "service_cidr")
    @classmethod
    def _cidr_format(cls, value: str) -> str:
        try:
            network = ipaddress.ip_network(value, strict=True)
        except ValueError as exc:
            raise ValueError(f"'{value}' is not a valid CIDR ({exc}); write it as 10.244.0.0/16") from None
        if network.version != 4:
            raise ValueError(f"'{value}' is IPv6; only IPv4 clusters are supported for now")
        return str(network)

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
    def minor_number(self) -> int:
        return int(self.version.split(".")[1])


class ContainerRuntimeSettings(_Section):
    # containerd runs the pods; Docker engine is installed beside it for operators who expect `docker`.
    install_docker: bool = True
    # auto: docker-ce from Docker's repository, except Debian where Debian's docker.io is used.
    docker_source: Literal["auto", "docker-ce", "docker.io"] = "auto"
    # Registry host -> mirror endpoints, written into containerd's hosts.toml files.
    registry_mirrors: dict[str, list[str]] = Field(default_factory=dict)


class MirrorSettings(_Section):
    # A named profile switches every source at once; a per-source value below overrides the profile.
    profile: Literal["default", "cn"] = "default"
    os_repo: str | None = None
    docker_repo: str | None = None
    kubernetes_repo: str | None = None
    nvidia_cuda_repo: str | None = None
    nvidia_toolkit_repo: str | None = None
    image_repository: str | None = None
    calico_manifest: str | None = None
    pip_index: str | None = None
    # The CIFAR-10 python archive the smoke test's pods fetch (dataset: cifar10), as a full URL.
    cifar10_archive: str | None = None
    # Raw files of GitHub repositories (Volcano's installer): raw.githubusercontent.com or a mirror of it.
    github_raw: str | None = None
    # A base URL holding the add-ons' release manifests already rendered, as <addon>/<version>/<part>.yaml
    # (docs/addons.md): replaces GitHub for every add-on, the Kubeflow ones included.
    addon_manifests: str | None = None

    @field_validator("cifar10_archive", "github_raw", "addon_manifests")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(https?|file)://[^\s]+$", value):
            raise ValueError(f"'{value}' is not an http(s):// or file:// URL")
        return value


class OfflineSettings(_Section):
    # A local directory on the nodes (file://) or an HTTP repository that replaces every online source.
    # Layout expected under it is documented in docs/offline.md.
    source: str | None = None
    image_repository: str | None = None

    @field_validator("source")
    @classmethod
    def _source_scheme(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if value.startswith("/"):
            return "file://" + value
        if not re.match(r"^(https?|file)://", value):
            raise ValueError(f"'{value}' is neither an absolute path nor an http(s):// or file:// URL")
        return value.rstrip("/")


class CalicoSettings(_Section):
    version: str = "v3.28.2"

    @field_validator("version", mode="before")
    @classmethod
    def _version_format(cls, value: object) -> str:
        if not isinstance(value, str) or not re.match(r"^v\d+\.\d+\.\d+$", value):
            raise ValueError(f"'{value}' is not a Calico release tag: write it as v3.28.2")
        return value


# The extended resource the NVIDIA device plugin advertises and GPU pods request, also the key of the taint
# GPU nodes may carry. The device plugin fixes the name, so it is a constant beside the GPU settings, not one.
GPU_RESOURCE = "nvidia.com/gpu"


class GpuSettings(_Section):
    # Driver branch from NVIDIA's CUDA repository (the nvidia-driver-<branch> / module stream).
    driver_branch: str = "565"
    container_toolkit_version: str = "1.17.3"
    device_plugin_version: str = "v0.17.0"
    # The device plugin image without its tag (the tag is device_plugin_version); offline.image_repository
    # replaces its registry host when set.
    device_plugin_image: str = "nvcr.io/nvidia/k8s-device-plugin"
    # default: nvidia becomes containerd's default runtime; runtimeclass: pods opt in via RuntimeClass "nvidia".
    runtime: Literal["default", "runtimeclass"] = "default"


def _quantity(value: object, example: str) -> str:
    text = str(value).strip()
    if isinstance(value, bool) or not QUANTITY_RE.match(text):
        raise ValueError(f"'{value}' is not a Kubernetes quantity: write it as {example}")
    return text


class SmokeTestSettings(_Section):
    enabled: bool = True
    # auto: GPU when any node has one, CPU otherwise.
    mode: Literal["auto", "gpu", "cpu"] = "auto"
    image: str = "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    gpus: int = Field(default=1, ge=1)
    nodes: int = Field(default=1, ge=1)
    epochs: int = Field(default=10, ge=1)
    min_accuracy: float = Field(default=0.90, gt=0, le=1)
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
    env: dict[str, str] = Field(default_factory=dict)
    host_network: bool = False
    shm_size: str = "2Gi"
    extra_resources: dict[str, str] = Field(default_factory=dict)
    ipc_lock: bool = False
    gpu_resource: str = GPU_RESOURCE
    # The link speed under which preflight and the smoke test warn that multi-node training will be throttled.
    min_link_gbps: float = Field(default=10.0, gt=0)
    # The md5 the CIFAR-10 archive must have (its URL is mirrors.cifar10_archive, or the profile's).
    cifar10_md5: str = CIFAR10_MD5
    # Where the archive (and, with `smoke-test --save`, the trained model) is kept between runs: a hostPath under
    # cache_path on each node, a PersistentVolumeClaim of the default StorageClass, or nothing (every pod fetches).
    # auto: the PVC for single-pod runs when a default StorageClass exists, else the hostPath.
    cache: Literal["auto", "hostpath", "pvc", "none"] = "auto"
    cache_path: str = "/var/lib/cluster-bootstrap/cache"
    cache_size: str = "2Gi"
    # The fetch into the cache has its own deadline, apart from training's timeout_s.
    data_timeout_s: int = Field(default=600, ge=30)

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: object) -> dict[str, str]:
        if not isinstance(value, dict):
            raise ValueError("write it as a mapping of variable names to values, e.g. {NCCL_DEBUG: INFO}")
        env = {}
        for name, setting in value.items():
            if not ENV_NAME_RE.match(str(name)):
                raise ValueError(f"'{name}' is not an environment variable name (letters, digits and _)")
            if isinstance(setting, (dict, list)) or setting is None:
                raise ValueError(f"{name}: give a single value (a string or a number), not '{setting}'")
            env[str(name)] = str(setting).lower() if isinstance(setting, bool) else str(setting)
        return env

    @field_validator("extra_resources", mode="before")
    @classmethod
    def _extra_resources(cls, value: object) -> dict[str, str]:
        if not isinstance(value, dict):
            raise ValueError("write it as a mapping of resource names to amounts, e.g. {rdma/hca: 1}")
        resources = {}
        for name, amount in value.items():
            if not RESOURCE_NAME_RE.match(str(name)) or "/" not in str(name):
                raise ValueError(f"'{name}' is not an extended resource name: write it as vendor.example/device")
            resources[str(name)] = _quantity(amount, "1")
        return resources

    @field_validator("shm_size", "cache_size", mode="before")
    @classmethod
    def _size(cls, value: object) -> str:
        return _quantity(value, "2Gi")

    @field_validator("gpu_resource")
    @classmethod
    def _gpu_resource(cls, value: str) -> str:
        if not RESOURCE_NAME_RE.match(value) or "/" not in value:
            raise ValueError(f"'{value}' is not an extended resource name: write it as {GPU_RESOURCE}")
        return value

    @field_validator("cifar10_md5")
    @classmethod
    def _md5(cls, value: str) -> str:
        if not re.match(r"^[0-9a-f]{32}$", value.lower()):
            raise ValueError(f"'{value}' is not an md5 (32 hex digits); CIFAR-10's is {CIFAR10_MD5}")
        return value.lower()

    @field_validator("cache_path")
    @classmethod
    def _cache_path(cls, value: str) -> str:
        path = value.rstrip("/")
        if not path.startswith("/") or ".." in path.split("/"):
            raise ValueError(f"'{value}' must be an absolute path on the nodes, e.g. /var/lib/cluster-bootstrap/cache")
        # `reset` removes it: a system directory must never be one.
        if path.count("/") < 2 or path.split("/")[1] in ("etc", "usr", "bin", "sbin", "lib", "boot", "dev", "proc",
                                                        "sys", "root", "home"):
            raise ValueError(f"'{value}' is too close to the root or a system directory (reset removes it): "
                             "use a directory of its own, e.g. /var/lib/cluster-bootstrap/cache")
        return path

    @field_validator("extra_resources")
    @classmethod
    def _not_managed(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if name in ("cpu", "memory") or name == GPU_RESOURCE:
                raise ValueError(f"{name} is requested by the smoke test itself: leave it out of extra_resources")
        return value


class AddonsSettings(_Section):
    # The add-ons `up` installs after the gpu phase, each from its pinned release: none by default.
    enabled: tuple[AddonName, ...] = ()
    volcano_version: str = ADDONS["volcano"].version
    training_operator_version: str = ADDONS["training_operator"].version
    trainer_version: str = ADDONS["trainer"].version
    # The Volcano queue the smoke test's gangs wait in (the volcano add-on creates it).
    volcano_queue: str = "cluster-bootstrap"
    # How long an add-on phase waits for its CRDs to be Established and its controllers Available.
    timeout_s: int = Field(default=600, ge=30)

    @field_validator("enabled", mode="before")
    @classmethod
    def _listed_once(cls, value: object) -> object:
        if isinstance(value, str):
            raise ValueError(f"write it as a list, e.g. [{value}]")
        if isinstance(value, (list, tuple)) and len(set(map(str, value))) != len(value):
            raise ValueError(f"{list(value)} names an add-on twice")
        return value

    @field_validator("volcano_version", "training_operator_version", "trainer_version")
    @classmethod
    def _release_tag(cls, value: str) -> str:
        if not re.match(VERSION_PATTERN, value):
            raise ValueError(f"'{value}' is not a release tag: write it as v1.2.3")
        return value

    @field_validator("volcano_queue")
    @classmethod
    def _queue_name(cls, value: str) -> str:
        if not DNS_LABEL_RE.match(value) or len(value) > 63:
            raise ValueError(f"'{value}' is not a valid queue name (lowercase letters, digits and '-')")
        return value

    def version(self, name: AddonName) -> str:
        return str(getattr(self, f"{name}_version"))


class VerifySettings(_Section):
    # How long `up` waits for every node to be Ready and every kube-system pod to run.
    timeout_s: int = Field(default=600, ge=10)
    # A small image with nslookup; the verify phase runs it once to prove cluster DNS answers.
    dns_probe_image: str = "docker.io/library/busybox:1.36"


class AnsibleSettings(_Section):
    # auto: Mitogen's mitogen_linear strategy when it is installed and supports this Ansible, else the stock one.
    # Mitogen costs far less controller CPU per task and host; stock is the fallback and the reference.
    executor: Literal["auto", "mitogen", "stock"] = "auto"


class SshSettings(_Section):
    # Host keys are always checked; accepting unknown keys on first contact must be asked for.
    accept_new_host_keys: bool = False
    known_hosts_file: str = "~/.ssh/known_hosts"
    connect_timeout_s: int = Field(default=10, ge=1, le=300)

    @property
    def known_hosts_path(self) -> Path:
        return Path(self.known_hosts_file).expanduser()


class FirewallSettings(_Section):
    # open-ports: open the kubeadm and Calico ports in firewalld/ufw; disable: stop the firewall; leave: touch nothing.
    mode: Literal["open-ports", "disable", "leave"] = "open-ports"


class Settings(_Section):
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    container_runtime: ContainerRuntimeSettings = Field(default_factory=ContainerRuntimeSettings)
    mirrors: MirrorSettings = Field(default_factory=MirrorSettings)
    offline: OfflineSettings = Field(default_factory=OfflineSettings)
    calico: CalicoSettings = Field(default_factory=CalicoSettings)
    gpu: GpuSettings = Field(default_factory=GpuSettings)
    smoke_test: SmokeTestSettings = Field(default_factory=SmokeTestSettings)
    addons: AddonsSettings = Field(default_factory=AddonsSettings)
    verify: VerifySettings = Field(default_factory=VerifySettings)
    ssh: SshSettings = Field(default_factory=SshSettings)
    firewall: FirewallSettings = Field(default_factory=FirewallSettings)
    ansible: AnsibleSettings = Field(default_factory=AnsibleSettings)


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


def _describe(error: dict[str, Any], source: str) -> str:
    loc = error["loc"]
    dotted = ".".join(str(p) for p in loc)
    if error["type"] == "extra_forbidden":
        model = _model_at(loc)
        known = sorted(model.model_fields) if model else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean '{'.'.join([*map(str, loc[:-1]), close[0]])}'?" if close else \
            f"known keys here: {', '.join(known)}"
        return f"{source}: unknown key '{dotted}': {hint}"
    message = error["msg"].removeprefix("Value error, ")
    return f"{source}: {dotted or 'settings'}: {message}"


def parse_settings(data: Any, source: str = "cluster.yaml") -> Settings:
    """Validate a settings mapping; raise InputError with one line naming the field and the fix."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"{source}: the top level must be a mapping of sections (kubernetes:, mirrors:, ...)")
    # A section whose keys are all commented out reads as None: treat it as "all defaults".
    data = {key: value for key, value in data.items() if value is not None}
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise InputError(_describe(exc.errors()[0], source)) from None


def load_settings(path: Path | None) -> Settings:
    """Settings from cluster.yaml; None means every default."""
    if path is None:
        return Settings()
    if not path.is_file():
        raise InputError(f"{path}: settings file not found; pass an existing cluster.yaml or leave --config out")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InputError(f"{path}: not valid YAML{where}: fix the syntax ({getattr(exc, 'problem', exc)})") from None
    return parse_settings(data, str(path))
