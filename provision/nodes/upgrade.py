"""What the upgrade's plays report from the nodes: each node's Kubernetes versions (the cb_kube_versions module's
document), validated, and turned into the versions the plan is made from (provision/inputs/upgrade.py)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from provision.inputs.inventory import Cluster
from provision.inputs.upgrade import Release
from provision.inputs.versions import parse_version
from provision.nodes.documents import read_documents
from provision.nodes.runner import PlaybookResult

# The module's SCHEMA and key (playbooks/library/cb_kube_versions.py): bumped together when the shape changes.
KUBE_VERSIONS_SCHEMA = 1
KUBE_VERSIONS_KEY = "cb_kube_versions"
CONTROL_PLANE_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


class KubeVersions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = Field(alias="schema")
    kubeadm: str | None
    kubelet: str | None
    kubectl: str | None
    # containerd's version (1.7.28, 2.1.5), as `containerd --version` says it; None: none installed.
    containerd: str | None = None
    # Component -> its image's tag in the static pod manifest (None: a manifest whose image names no release).
    static_pods: dict[str, str | None]
    # The kubeadm releases the node's repositories offer (asked on the first control plane only).
    available: list[str] | None
    # What the module could not read, for the run's log.
    notes: list[str]

    @field_validator("schema_version")
    @classmethod
    def _readable(cls, value: int) -> int:
        if value != KUBE_VERSIONS_SCHEMA:
            raise ValueError(f"schema {value}, but this version of cluster-bootstrap reads schema "
                             f"{KUBE_VERSIONS_SCHEMA}")
        return value

    @property
    def static_pods_release(self) -> Release | None:
        """The oldest release among the control plane's static pods; None without all three of them."""
        found = [Release.parse(self.static_pods.get(c)) for c in CONTROL_PLANE_COMPONENTS]
        releases = [r for r in found if r is not None]
        return min(releases) if len(releases) == len(CONTROL_PLANE_COMPONENTS) else None

    @property
    def containerd_release(self) -> tuple[int, ...] | None:
        return parse_version(self.containerd) if self.containerd else None

    @property
    def offered(self) -> tuple[Release, ...]:
        return tuple(r for r in (Release.parse(text) for text in self.available or []) if r is not None)


def read_kube_versions(playbook: PlaybookResult, cluster: Cluster, nodes: list[str] | None = None,
                       ) -> dict[str, KubeVersions]:
    """Node name -> its report, for `nodes` (default: all); raises BootstrapError for a node that failed, sent
    none, or sent one this version cannot read."""
    chosen = [cluster.node(name) for name in nodes] if nodes is not None else cluster.nodes
    return read_documents(playbook, chosen, KUBE_VERSIONS_KEY, KubeVersions, "its Kubernetes versions")
