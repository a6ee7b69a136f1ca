"""The phases of `up`, `node add`, `node remove`, `reset`, `down` and the etcd commands: the engine (engine.py)
and one module per phase, put in order here for each command. The listing of this folder reads as the steps of
`up`."""
from __future__ import annotations

from collections.abc import Sequence

from provision.inputs.addons import ADDON_ORDER
from provision.phases import (
    addons,
    control_plane,
    drain,
    etcd_probe,
    etcd_remove,
    etcd_snapshot,
    etcd_timer,
    gpu,
    join,
    network,
    preflight,
    prepare,
    reset,
    smoke,
    verify,
)
from provision.phases import engine as _engine
from provision.phases.engine import Phase, PhaseContext, PhaseOutcome, PhaseResults, PipelineResult, resume_point

PHASES: dict[str, Phase] = {p.name: p for p in (
    preflight.PHASE, prepare.PHASE, control_plane.PHASE, network.PHASE, join.PHASE, gpu.PHASE, *addons.PHASES,
    verify.PHASE, smoke.PHASE, drain.PHASE, etcd_remove.PHASE, reset.PHASE, etcd_probe.PHASE, etcd_snapshot.PHASE,
    etcd_timer.PHASE,
)}

UP_PHASES: tuple[str, ...] = ("preflight", "prepare", "control_plane", "network", "join", "etcd_timer", "gpu",
                              *ADDON_ORDER, "verify", "smoke")
NODE_ADD_PHASES: tuple[str, ...] = ("preflight", "prepare", "join", "gpu", "verify")
RESET_PHASES: tuple[str, ...] = ("drain", "etcd", "reset")
ETCD_SNAPSHOT_PHASES: tuple[str, ...] = ("etcd_probe", "etcd_snapshot")
ETCD_LIST_PHASES: tuple[str, ...] = ("etcd_probe",)


def select_phases(names: Sequence[str], *, from_phase: str | None = None, only: str | None = None) -> list[Phase]:
    """The phases to run: all of `names`, or from `from_phase` on, or `only` one."""
    return _engine.select_phases(PHASES, names, from_phase=from_phase, only=only)


def run_phases(phases: Sequence[Phase], ctx: PhaseContext) -> PipelineResult:
    """Run phases in order (engine.run_phases), with every phase known for what each needs."""
    return _engine.run_phases(PHASES, phases, ctx)


__all__ = ["ETCD_LIST_PHASES", "ETCD_SNAPSHOT_PHASES", "NODE_ADD_PHASES", "PHASES", "RESET_PHASES", "UP_PHASES",
           "Phase", "PhaseContext", "PhaseOutcome", "PhaseResults", "PipelineResult", "resume_point", "run_phases",
           "select_phases"]
