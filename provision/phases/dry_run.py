"""`up --dry-run`: the plan of a run, made from the inputs and this machine's record of the cluster alone.

Nothing is touched: no connection, no file written (the state is read, never saved). For each phase: whether it
would run, be skipped (and why) or be passed over because an earlier run completed it with the same inputs (the
resume point `up` takes by itself); its playbook's plays, each with the nodes it would change; and the sources
the run would fetch (package repositories, images, manifests), as the settings resolve them. What only the nodes
can say (the GPUs preflight finds, each node's platform and its exact repository paths) is said as such.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings
from provision.inputs.sources import resolve_sources
from provision.inputs.state import ClusterState, inputs_fingerprint
from provision.nodes.sources_check import manifest_indexes
from provision.phases import PHASES, select_phases
from provision.phases.engine import Phase, PhaseContext, resume_point
from provision.resources import PLAYBOOKS_DIR

Action = Literal["run", "skip", "done"]


@dataclass(frozen=True)
class PlannedPlay:
    """One play of a phase's playbook: what it does (its name) and the nodes it would change."""

    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class PlannedPhase:
    name: str
    title: str
    # run; skip (nothing to do: `reason` says why); done (completed with these inputs by an earlier run).
    action: Action
    reason: str = ""
    playbook: str | None = None
    plays: tuple[PlannedPlay, ...] = ()


@dataclass(frozen=True)
class PlannedSource:
    name: str
    url: str
    # The setting that moves it elsewhere (mirrors.*, offline.source).
    setting: str


@dataclass(frozen=True)
class UpPlan:
    phases: tuple[PlannedPhase, ...]
    # Where the run would start: the first phase that did not complete with these inputs (None: the first).
    resume_from: str | None
    sources: tuple[PlannedSource, ...]
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "resume_from": self.resume_from,
            "phases": [{"name": p.name, "title": p.title, "action": p.action, "reason": p.reason,
                        "playbook": p.playbook, "plays": [{"name": play.name, "nodes": list(play.nodes)}
                                                          for play in p.plays]} for p in self.phases],
            "sources": [{"name": s.name, "url": s.url, "setting": s.setting} for s in self.sources],
            "notes": list(self.notes),
        }


def _pattern_nodes(pattern: str, cluster: Cluster) -> list[str]:
    """The nodes an Ansible host pattern of our playbooks names (groups joined by ':', '!' excluding, '&'
    intersecting), in inventory order."""
    first = cluster.control_plane.name
    groups = {"all": [n.name for n in cluster.nodes], "k8s_cluster": [n.name for n in cluster.nodes],
              "control_plane": [n.name for n in cluster.control_planes], "first_control_plane": [first],
              "workers": [n.name for n in cluster.workers]}
    chosen: list[str] = []
    for part in pattern.split(":"):
        if part.startswith("!"):
            chosen = [n for n in chosen if n not in groups.get(part[1:], [])]
        elif part.startswith("&"):
            chosen = [n for n in chosen if n in groups.get(part[1:], [])]
        else:
            named = [n.name for n in cluster.nodes if part in (n.name, n.host)]
            chosen += [n for n in groups.get(part, named) if n not in chosen]
    return chosen


def playbook_plays(playbook: str, cluster: Cluster, limit: list[str] | None) -> tuple[PlannedPlay, ...]:
    """The plays of one of our playbooks, each with the nodes it targets (within `limit`, the phase's own)."""
    plays = yaml.safe_load((PLAYBOOKS_DIR / playbook).read_text()) or []
    found: list[PlannedPlay] = []
    for play in plays:
        if not isinstance(play, dict) or "hosts" not in play:
            continue
        nodes = _pattern_nodes(str(play["hosts"]), cluster)
        if limit is not None:
            nodes = [n for n in nodes if n in limit]
        if nodes:
            found.append(PlannedPlay(str(play.get("name") or play["hosts"]), tuple(nodes)))
    return tuple(found)


def _skip_reason(phase: Phase, ctx: PhaseContext) -> str | None:
    if "gpus" in phase.needs and ctx.state.gpus is None:
        # What preflight finds decides it; gpu=true in the inventory already does.
        if any(n.gpu == "true" for n in ctx.cluster.nodes):
            return None
        return None if any(n.gpu == "auto" for n in ctx.cluster.nodes) else "no node is a GPU node (gpu=false)"
    return phase.skip_reason(ctx) if phase.skip_reason else None


def plan_up(cluster: Cluster, settings: Settings, names: tuple[str, ...], *, from_phase: str | None = None,
            only: str | None = None) -> UpPlan:
    """What `bootstrap up` with these inputs would do, phase by phase; reads this machine's state, writes nothing."""
    state = ClusterState.load(cluster)
    ctx = PhaseContext(cluster=cluster, settings=settings, state=state)
    completed: list[str] = []
    if from_phase is None and only is None:
        resume = resume_point(names, state, inputs_fingerprint(cluster, settings))
        if resume is not None:
            from_phase, completed = resume
    chosen = select_phases(names, from_phase=from_phase, only=only)
    ctx.planned = tuple(p.name for p in chosen)
    planned: list[PlannedPhase] = [PlannedPhase(name, PHASES[name].title, "done",
                                                "completed with these same inputs (`--from` runs it again)")
                                   for name in completed]
    notes: list[str] = []
    for phase in chosen:
        reason = _skip_reason(phase, ctx)
        if reason:
            planned.append(PlannedPhase(phase.name, phase.title, "skip", reason, phase.playbook))
            continue
        plays: tuple[PlannedPlay, ...] = ()
        if phase.playbook:
            limit = phase.limit(ctx) if phase.limit else None
            plays = playbook_plays(phase.playbook, cluster, limit)
        planned.append(PlannedPhase(phase.name, phase.title, "run", "", phase.playbook, plays))
    if state.gpus is None and any(n.gpu == "auto" for n in cluster.nodes):
        notes.append("the GPU nodes are those preflight finds GPUs on (gpu=auto); the NVIDIA stack and the gpu "
                     "phase follow them")
    return UpPlan(tuple(planned), from_phase, sources(settings, ctx.planned), tuple(notes))


def sources(settings: Settings, planned: tuple[str, ...]) -> tuple[PlannedSource, ...]:
    """The sources the planned phases fetch from, as the settings resolve them: the package repositories (each
    node's exact path follows its platform, which preflight reads), the image registry and the manifests."""
    found: list[PlannedSource] = []
    resolved = resolve_sources(settings)
    if "prepare" in planned:
        for key in ("os_repo", "docker_repo", "kubernetes_repo", "nvidia_cuda_repo", "nvidia_toolkit_repo"):
            url = getattr(resolved, key)
            if url:
                found.append(PlannedSource(key.replace("_", " "), str(url), f"mirrors.{key}"))
    found.append(PlannedSource("images", str(resolved.image_repository), "mirrors.image_repository"))
    addons = tuple(name for name in settings.addons.enabled if name in planned)
    narrowed = settings.model_copy(update={"addons": settings.addons.model_copy(update={"enabled": addons})})
    for index in manifest_indexes(narrowed, calico="network" in planned):
        found.append(PlannedSource(index.name, index.url, index.setting))
    return tuple(found)
