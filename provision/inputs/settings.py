"""Cluster settings: the optional cluster.yaml, validated into one typed model whose defaults all work.

Every repository, registry and download location is a setting (see `sources.py` for how a named profile
and per-source overrides resolve into the sources a run uses), so a mirror or an offline source never
needs a code change.
"""
from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from provision.errors import InputError

KUBE_VERSION_RE = re.compile(r"^v?1\.(\d+)(?:\.(\d+))?$")


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


class MirrorProfile(StrEnum):
    """Named sets of sources (inputs/sources.py PROFILES holds what each one points at)."""

    default = "default"
    # Mirrors reachable from mainland China.
    cn = "cn"


class MirrorSettings(_Section):
    # A named profile switches every source at once; a per-source value below overrides the profile.
    profile: MirrorProfile = MirrorProfile.default
    os_repo: str | None = None
    docker_repo: str | None = None
    kubernetes_repo: str | None = None
    nvidia_cuda_repo: str | None = None
    nvidia_toolkit_repo: str | None = None
    image_repository: str | None = None
    calico_manifest: str | None = None
    pip_index: str | None = None


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


class PackagesSettings(_Section):
    # How long a package transaction waits for a dpkg/apt or rpm/dnf lock another process holds (unattended-upgrades
    # or cloud-init on a freshly booted machine) before it fails, naming the lock and its holder.
    lock_timeout_s: int = Field(default=300, ge=1, le=86400)


class DownloadsSettings(_Section):
    # Tries per download (repository keys and package lists, packages, Calico's manifest) when it fails transiently
    # (a mirror's 5xx, a reset connection, a slow read), with a doubling pause between them; permanent failures
    # (404, a bad signature) fail at once.
    attempts: int = Field(default=4, ge=1, le=10)


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
    verify: VerifySettings = Field(default_factory=VerifySettings)
    ssh: SshSettings = Field(default_factory=SshSettings)
    firewall: FirewallSettings = Field(default_factory=FirewallSettings)
    packages: PackagesSettings = Field(default_factory=PackagesSettings)
    downloads: DownloadsSettings = Field(default_factory=DownloadsSettings)
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


def _describe(error: Mapping[str, Any], source: str) -> str:
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
