"""Cluster settings: the optional cluster.yaml, validated into one typed model whose defaults all work.

Every repository, registry and download location is a setting (see `sources.py` for how a named profile
and per-source overrides resolve into the sources a run uses), so a mirror or an offline source never
needs a code change.

Split at the seam an inventory has too: the sections are models of their own (settings_cluster.py,
settings_sources.py, settings_workloads.py, on settings_base.py); this module holds the whole (`Settings`, with
the checks across sections), reads cluster.yaml (`read_settings_document`: bounded, safe YAML) and validates it
into the model (`parse_settings`, one line naming the field). Every name the sections define is re-exported
here, so `from provision.inputs.settings import GpuSettings` keeps working.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    model_validator,
)

from provision.errors import InputError
from provision.inputs import versions
from provision.inputs.addons import ADDONS
from provision.inputs.files import parse_yaml, read_text, refuse_vault_file, shown
from provision.inputs.settings_base import CACHE_MARKER as CACHE_MARKER
from provision.inputs.settings_base import CIFAR10_MD5 as CIFAR10_MD5
from provision.inputs.settings_base import DEFAULT_THROUGHPUT_FLOORS as DEFAULT_THROUGHPUT_FLOORS
from provision.inputs.settings_base import NARROWEST_SERVICE_PREFIX as NARROWEST_SERVICE_PREFIX
from provision.inputs.settings_base import NEWEST_KUBE_MINOR as NEWEST_KUBE_MINOR
from provision.inputs.settings_base import OLDEST_KUBE_MINOR as OLDEST_KUBE_MINOR
from provision.inputs.settings_base import UNUSABLE_RANGES as UNUSABLE_RANGES
from provision.inputs.settings_base import WIDEST_POD_PREFIX as WIDEST_POD_PREFIX
from provision.inputs.settings_base import WIDEST_SERVICE_PREFIX as WIDEST_SERVICE_PREFIX
from provision.inputs.settings_base import CalicoVersion as CalicoVersion
from provision.inputs.settings_base import DevicePluginImage as DevicePluginImage
from provision.inputs.settings_base import DevicePluginVersion as DevicePluginVersion
from provision.inputs.settings_base import GpuResource as GpuResource
from provision.inputs.settings_base import QueueName as QueueName
from provision.inputs.settings_base import ResourceAmount as ResourceAmount
from provision.inputs.settings_base import SizeQuantity as SizeQuantity
from provision.inputs.settings_base import ToolkitVersion as ToolkitVersion
from provision.inputs.settings_base import _cidr_problem as _cidr_problem
from provision.inputs.settings_base import _Section as _Section
from provision.inputs.settings_base import _text_of_number as _text_of_number
from provision.inputs.settings_base import kube_minor_problem as kube_minor_problem
from provision.inputs.settings_cluster import CertificatesSettings as CertificatesSettings
from provision.inputs.settings_cluster import ControlPlaneSettings as ControlPlaneSettings
from provision.inputs.settings_cluster import EtcdSettings as EtcdSettings
from provision.inputs.settings_cluster import FirewallSettings as FirewallSettings
from provision.inputs.settings_cluster import KubeletSettings as KubeletSettings
from provision.inputs.settings_cluster import KubernetesSettings as KubernetesSettings
from provision.inputs.settings_cluster import UpgradeSettings as UpgradeSettings
from provision.inputs.settings_sources import AnsibleSettings as AnsibleSettings
from provision.inputs.settings_sources import CalicoSettings as CalicoSettings
from provision.inputs.settings_sources import ContainerRuntimeSettings as ContainerRuntimeSettings
from provision.inputs.settings_sources import DownloadsSettings as DownloadsSettings
from provision.inputs.settings_sources import MirrorProfile as MirrorProfile
from provision.inputs.settings_sources import MirrorSettings as MirrorSettings
from provision.inputs.settings_sources import OfflineSettings as OfflineSettings
from provision.inputs.settings_sources import PackagesSettings as PackagesSettings
from provision.inputs.settings_sources import SshSettings as SshSettings
from provision.inputs.settings_sources import known_hosts_problem as known_hosts_problem
from provision.inputs.settings_workloads import GPU_RESOURCE as GPU_RESOURCE
from provision.inputs.settings_workloads import MIG_PROFILE_RE as MIG_PROFILE_RE
from provision.inputs.settings_workloads import NVIDIA_RUNTIME_CLASS as NVIDIA_RUNTIME_CLASS
from provision.inputs.settings_workloads import SHARING_REPLICAS_MAX as SHARING_REPLICAS_MAX
from provision.inputs.settings_workloads import AddonsSettings as AddonsSettings
from provision.inputs.settings_workloads import GpuSettings as GpuSettings
from provision.inputs.settings_workloads import MigSettings as MigSettings
from provision.inputs.settings_workloads import SmokeTestSettings as SmokeTestSettings
from provision.inputs.settings_workloads import VerifySettings as VerifySettings
from provision.inputs.values import (
    KUBERNETES_VERSION,
)


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
