"""What one `up` run leaves for the next on the operator's machine: per cluster, in a private directory
named after the control plane and its address. It holds the admin kubeconfig and the outputs later phases need from earlier
ones (the GPUs preflight found), so `up --from gpu` can resume without repeating the work before it.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from provision import PROJECT_ROOT
from provision.errors import BootstrapError
from provision.inventory import Cluster


def state_root() -> Path:
    return Path(os.environ.get("BOOTSTRAP_STATE_DIR", PROJECT_ROOT / ".bootstrap" / "clusters"))


def cluster_dir(cluster: Cluster, *, create: bool = True) -> Path:
    """The cluster's private directory (it holds admin credentials: mode 0700)."""
    # The address too: two inventories may both call their control plane "master", and must not share state.
    control_plane = cluster.control_plane
    path = state_root() / f"{control_plane.name}@{control_plane.address}"
    if create:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.chmod(0o700)
    return path


@dataclass
class PhaseRecord:
    status: str
    seconds: float
    detail: str = ""


@dataclass
class ClusterState:
    # Node name -> GPUs preflight found (0 for none); None until preflight has run.
    gpus: dict[str, int] | None = None
    # Name -> outcome of the last time each phase ran.
    phases: dict[str, PhaseRecord] = field(default_factory=dict)

    @classmethod
    def load(cls, cluster: Cluster) -> ClusterState:
        path = cluster_dir(cluster, create=False) / "state.json"
        if not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text())
            return cls(gpus=data.get("gpus"),
                       phases={k: PhaseRecord(**v) for k, v in (data.get("phases") or {}).items()})
        except (ValueError, TypeError) as exc:
            raise BootstrapError(f"{path}: unreadable state ({exc}); delete it and re-run `bootstrap up`") from None

    def save(self, cluster: Cluster) -> None:
        path = cluster_dir(cluster) / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"gpus": self.gpus,
                                   "phases": {k: asdict(v) for k, v in self.phases.items()}}, indent=2))
        tmp.replace(path)


def forget_cluster(cluster: Cluster) -> bool:
    """Remove the cluster's directory (kubeconfig and state); True if there was one."""
    path = cluster_dir(cluster, create=False)
    if not path.exists():
        return False
    shutil.rmtree(path)
    return True
