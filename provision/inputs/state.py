"""What the tool keeps on the operator's machine, under one private state directory.

The state directory is `$BOOTSTRAP_STATE_DIR` (set by `bootstrap --state-dir`), else
`$XDG_STATE_HOME/cluster-bootstrap`, else `~/.local/state/cluster-bootstrap`, mode 0700. Under it:
`clusters/<control plane>@<address>/` per cluster (the admin kubeconfig and what one `up` run leaves for the
next: the GPUs preflight found, each phase's outcome and the fingerprint of the inputs it was reached with, so
`up` resumes by itself at the phase that did not complete, and `up --from gpu` without repeating the work
before it), `runs/<time>-<phase>/` per playbook run (artifacts and a plain log), and `lab/` for the Vagrant lab.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import BootstrapError, InputError
from provision.inputs.inventory import Cluster
from provision.inputs.platforms import NodePython
from provision.inputs.settings import Settings
from provision.inputs.values import NodeName, creatable_directory_problem

STATE_DIR_ENV = "BOOTSTRAP_STATE_DIR"
APP_NAME = "cluster-bootstrap"
# Where `bootstrap etcd snapshot` keeps a cluster's snapshots, in its directory; `down` leaves them.
ETCD_SNAPSHOTS_DIRNAME = "etcd-snapshots"


def state_root() -> Path:
    """The state directory (not created here: refused commands create nothing)."""
    configured = os.environ.get(STATE_DIR_ENV)
    if configured:
        return Path(configured).expanduser().absolute()
    xdg = os.environ.get("XDG_STATE_HOME")
    # XDG: a relative XDG_STATE_HOME is invalid and must be ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / APP_NAME


def check_state_root() -> Path:
    """The state directory, refused in one line when it cannot be one (a file, say); nothing is created."""
    root = state_root()
    for candidate in (root, *root.parents):
        if candidate.exists():
            if not candidate.is_dir():
                raise InputError(f"state directory {root}: {candidate} exists and is not a directory: "
                                 f"pass another --state-dir (or {STATE_DIR_ENV})")
            break
    problem = creatable_directory_problem(root)
    if problem:
        raise InputError(f"state directory {problem}: pass another --state-dir (or {STATE_DIR_ENV})")
    return root


def private_dir(path: Path) -> Path:
    """Create `path` (and the state directory above it) readable by this user only. A directory that exists
    keeps its mode: the state directory may be one the user named (--state-dir ~ must not close their home)."""
    root = check_state_root()
    for directory in (root, path):
        if not directory.is_dir():
            directory.mkdir(parents=True, mode=0o700)
            directory.chmod(0o700)
    return path


def runs_root() -> Path:
    return state_root() / "runs"


def lab_root() -> Path:
    return state_root() / "lab"


def cluster_dir(cluster: Cluster, *, create: bool = True) -> Path:
    """The cluster's private directory (it holds admin credentials: mode 0700)."""
    # The address too: two inventories may both call their control plane "master", and must not share state.
    control_plane = cluster.control_plane
    name = f"{control_plane.name}@{control_plane.address}"
    # The inventory is validated before this, but a path must never climb out of the state directory.
    if "/" in name or "\\" in name or name.startswith(".") or "\0" in name:
        raise InputError(f"{cluster.inventory_path}: control plane '{control_plane.name}' at "
                         f"'{control_plane.address}' cannot name a state directory: fix its name or ansible_host")
    path = state_root() / "clusters" / name
    if create:
        private_dir(path.parent)
        private_dir(path)
    return path


def inputs_fingerprint(cluster: Cluster, settings: Settings, nodes: Sequence[str] | None = None) -> str:
    """What a phase's outcome was reached with: each node as the phases use it (its node name and inventory host
    name, the address we reach it on and the one the other nodes reach it on, its role, login, port, whether it
    is a GPU node, the interpreter the inventory names for it), the settings, and the nodes the run was about
    (None: all). How we connect (ssh.*, ansible.*) changes no outcome and is left out; nothing secret is in
    either input. Two runs with the same fingerprint may trust each other's outcomes."""
    document = {
        "nodes": [{"name": n.name, "host": n.host, "address": n.address, "ip": n.ip, "role": n.role,
                   "user": n.user, "port": n.port, "gpu": n.gpu, "python": n.python_interpreter or ""}
                  for n in cluster.nodes],
        "settings": settings.model_dump(mode="json", exclude={"ssh", "ansible"}),
        "scope": sorted(nodes) if nodes is not None else None,
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class PhaseRecord:
    # ok, failed, skipped, or running (a run ended while the phase ran: killed, or the machine went down).
    status: str
    seconds: float
    detail: str = ""
    # inputs_fingerprint of the run that reached this outcome ("" in state written before it was recorded).
    inputs: str = ""
    # When it was recorded (UTC, ISO 8601): when it started for `running`, else when it ended ("" in older state).
    at: str = ""


@dataclass
class NodeStage:
    """Where one node is in its step of an upgrade (`bootstrap upgrade`)."""

    # The release its step moves it to.
    release: str
    # cordoned (by the upgrade), drained, upgraded (its packages and kubeadm's part done), done (uncordoned, its
    # kubelet reporting the release).
    stage: str
    # It was unschedulable before the upgrade cordoned it: it stays so afterwards.
    was_unschedulable: bool = False


@dataclass
class UpgradeRecord:
    """The upgrade under way (or the last one): what was asked, the release chosen for each minor (a re-run keeps
    it), and each node's stage; a re-run reads it to finish the job."""

    target: str
    # "1.36" -> "1.36.4": the release each minor of the upgrade moves to, once chosen.
    releases: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, NodeStage] = field(default_factory=dict)
    # The steps as planned by the run that recorded them (each: minor, version, control planes, workers).
    plan: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> UpgradeRecord | None:
        if not data:
            return None
        return cls(target=str(data["target"]), releases=dict(data.get("releases") or {}),
                   nodes={name: NodeStage(**stage) for name, stage in (data.get("nodes") or {}).items()},
                   plan=list(data.get("plan") or []), finished=bool(data.get("finished")))


@dataclass
class ClusterState:
    # Node name -> GPUs preflight found (0 for none); None until preflight has run.
    gpus: dict[NodeName, int] | None = None
    # Node name -> the generations of those GPUs (the NVIDIA kernel module and the smoke image follow them).
    gpu_generations: dict[NodeName, list[str]] = field(default_factory=dict)
    # Node name -> {resource: count} the device plugin will advertise there (the GPUs, their MIG instances, each
    # gpu.replicas times when shared), as preflight decided it; verify holds allocatable to it.
    gpu_offered: dict[str, dict[str, int]] = field(default_factory=dict)
    # Node name -> the interpreter preflight chose for it (every playbook run's inventory names it).
    pythons: dict[str, NodePython] = field(default_factory=dict)
    # Name -> outcome of the last time each phase ran.
    phases: dict[str, PhaseRecord] = field(default_factory=dict)
    # Control plane -> the interface its route to the control-plane VIP takes (kube-vip announces it there), as
    # preflight found it.
    vip_interfaces: dict[str, str] = field(default_factory=dict)
    # Node name -> the link speed (Gb/s) multi-node training crosses there, where preflight could read it.
    link_gbps: dict[str, float] = field(default_factory=dict)
    # The Kubernetes release (1.36.4) of the kubeadm prepare installed on the first control plane, as its report
    # gave it: kubeadm init's kubernetesVersion (a bare minor in the settings is resolved here, never by kubeadm).
    kubernetes_version: str | None = None
    # The control planes where the etcd snapshot timer is installed (so that turning it off removes it).
    etcd_timer: list[str] = field(default_factory=list)
    # A restore under way (id, snapshot, started): a restore killed midway and run again carries on under the same
    # id, so the members' data from before it stays the one kept aside.
    etcd_restore: dict[str, str] | None = None
    # The upgrade under way, or the last one (`bootstrap upgrade`); a finished one moves kubernetes_version.
    upgrade: UpgradeRecord | None = None
    # The certificate renewal timer is installed on the control planes (certificates.renew_timer).
    certs_timer: bool = False

    @classmethod
    def load(cls, cluster: Cluster) -> ClusterState:
        path = cluster_dir(cluster, create=False) / "state.json"
        if not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text())
            return cls(gpus=data.get("gpus"), gpu_generations=data.get("gpu_generations") or {},
                       gpu_offered={k: dict(v) for k, v in (data.get("gpu_offered") or {}).items()},
                       pythons={k: NodePython(**v) for k, v in (data.get("pythons") or {}).items()},
                       phases={k: PhaseRecord(**v) for k, v in (data.get("phases") or {}).items()},
                       vip_interfaces=dict(data.get("vip_interfaces") or {}),
                       link_gbps=dict(data.get("link_gbps") or {}),
                       kubernetes_version=data.get("kubernetes_version"),
                       etcd_timer=list(data.get("etcd_timer") or []),
                       etcd_restore=data.get("etcd_restore") or None,
                       upgrade=UpgradeRecord.from_dict(data.get("upgrade")), certs_timer=bool(data.get("certs_timer")))
        except (ValueError, TypeError, KeyError) as exc:
            raise BootstrapError(f"{path}: unreadable state ({exc}); delete it and re-run `bootstrap up`") from None

    def save(self, cluster: Cluster) -> None:
        path = cluster_dir(cluster) / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"gpus": self.gpus, "gpu_generations": self.gpu_generations,
                                   "gpu_offered": self.gpu_offered,
                                   "pythons": {k: asdict(v) for k, v in self.pythons.items()},
                                   "phases": {k: asdict(v) for k, v in self.phases.items()},
                                   "vip_interfaces": self.vip_interfaces,
                                   "link_gbps": self.link_gbps,
                                   "kubernetes_version": self.kubernetes_version, "etcd_timer": self.etcd_timer,
                                   "etcd_restore": self.etcd_restore,
                                   "upgrade": asdict(self.upgrade) if self.upgrade else None,
                                   "certs_timer": self.certs_timer}, indent=2))
        tmp.replace(path)


def forget_cluster(cluster: Cluster) -> bool:
    """Remove the cluster's directory (kubeconfig and state), keeping its etcd snapshots (they may be all that is
    left of it); True if there was anything to remove."""
    path = cluster_dir(cluster, create=False)
    if not path.exists():
        return False
    removed = False
    for entry in path.iterdir():
        if entry.name == ETCD_SNAPSHOTS_DIRNAME and entry.is_dir():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed = True
    if not any(path.iterdir()):
        path.rmdir()
    return removed
