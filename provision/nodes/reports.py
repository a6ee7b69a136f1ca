"""The documents roles send back to Python, validated. A prepared node reports itself through the
cb_node_report module (playbooks/library/cb_node_report.py) as one JSON document under `cb_report`;
NodeReport is its shape. A document of another schema version, or one missing a field, is refused as a whole
rather than read half-way."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from provision.inputs.versions import parse_version

# The module's SCHEMA: bumped together with it when the document's shape changes.
NODE_REPORT_SCHEMA = 5
# The key the module returns the document under; events carrying it are node reports, whatever the task's title.
NODE_REPORT_KEY = "cb_report"


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Swap(_Document):
    active: list[str]  # active swap areas (/proc/swaps)
    fstab: list[str]  # /etc/fstab swap lines not commented out


class Unit(_Document):
    active: str  # `systemctl is-active`: "active", "inactive", "failed", "activating", or "" when unknown
    enabled: str  # `systemctl is-enabled`: "enabled", "disabled", "masked", or ""


class Containerd(_Document):
    """containerd's effective configuration and its CRI plugin."""

    config_dump: str  # `containerd config dump` as printed (TOML): provision/nodes/containerd_config.py reads it
    cri: str | None  # the CRI plugin's status in `ctr plugins ls` ("ok"); None when it is not listed


class Crictl(_Document):
    endpoint: str | None  # runtime-endpoint in /etc/crictl.yaml
    works: bool | None  # `crictl version` succeeded; None when crictl is not installed


class Package(_Document):
    installed: bool
    held: bool  # apt-mark hold / dnf versionlock


class NodeReport(_Document):
    schema_version: int = Field(alias="schema")
    python: str  # the version of the interpreter the module ran under on the node (3.9.2)
    hostname: str
    swap: Swap
    modules_load: list[str]  # the modules the play's modules-load.d file loads at boot
    sysctls: dict[str, str | None]  # key -> live value; None when the key does not exist
    units: dict[str, Unit]
    containerd: Containerd
    crictl: Crictl
    packages: dict[str, Package]
    # Every package prepare installs on the node (its one spec each, as the roles name it) -> installed at a
    # matching version; None where the package database cannot say (a dnf module stream).
    package_plan: dict[str, bool | None]
    # The installed kubeadm package's version as the package database writes it (1.36.4-1.1, 1.36.4); None when
    # it is not installed.
    kubeadm_version: str | None
    gpu_node: bool  # the play prepared it as a GPU node
    nvidia_gpus: int | None  # GPUs `nvidia-smi -L` lists; None when nvidia-smi is not installed

    @field_validator("schema_version")
    @classmethod
    def _readable(cls, value: int) -> int:
        if value != NODE_REPORT_SCHEMA:
            raise ValueError(f"schema {value}, but this version of cluster-bootstrap reads schema {NODE_REPORT_SCHEMA}")
        return value

    @property
    def kubeadm_release(self) -> str | None:
        """The installed kubeadm as a Kubernetes release, 1.36.4; None when it is not installed or unreadable."""
        found = parse_version(self.kubeadm_version or "")
        return ".".join(map(str, found)) if len(found) == 3 else None

    def unit(self, name: str) -> Unit:
        return self.units.get(name, Unit(active="", enabled=""))
