"""The phases of `up`, `node add`, `node remove`, `reset`, `down`, the etcd commands, `upgrade` and `certs`: the
engine (engine.py) and one module per phase, put in order here for each command. The listing of this folder reads
as the steps of `up`."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from provision.errors import BootstrapError
from provision.inputs.addons import ADDON_ORDER
from provision.inputs.inventory import Node
from provision.inputs.state import UpgradeRecord
from provision.inputs.upgrade import UpgradePlan, step_settings
from provision.inputs.workflows import NODE_ADD_PHASES, UP_PHASES
from provision.nodes.etcd.report import EtcdSurvey
from provision.phases import (
    addons,
    certs_check,
    certs_renew,
    certs_timer,
    control_plane,
    drain,
    etcd_defrag,
    etcd_member_join,
    etcd_member_remove,
    etcd_pki,
    etcd_probe,
    etcd_remove,
    etcd_replace_check,
    etcd_restore_api,
    etcd_restore_check,
    etcd_restore_data,
    etcd_restore_stage,
    etcd_restore_start,
    etcd_restore_stop,
    etcd_snapshot,
    etcd_snapshot_upload,
    etcd_timer,
    gpu,
    join,
    network,
    preflight,
    prepare,
    reset,
    smoke,
    upgrade_control_planes,
    upgrade_plan,
    upgrade_repositories,
    upgrade_workers,
    verify,
)
from provision.phases import engine as _engine
from provision.phases.engine import Phase, PhaseContext, PhaseOutcome, PhaseResults, PipelineResult, resume_point

PHASES: dict[str, Phase] = {p.name: p for p in (
    preflight.PHASE, prepare.PHASE, control_plane.PHASE, network.PHASE, join.PHASE, gpu.PHASE, *addons.PHASES,
    verify.PHASE, smoke.PHASE, drain.PHASE, etcd_remove.PHASE, reset.PHASE, etcd_probe.PHASE, etcd_snapshot.PHASE,
    etcd_timer.PHASE, etcd_restore_check.PHASE, etcd_restore_stage.PHASE, etcd_restore_stop.PHASE,
    etcd_restore_data.PHASE, etcd_restore_start.PHASE, etcd_restore_api.PHASE, etcd_member_remove.PHASE,
    etcd_member_join.PHASE, etcd_replace_check.PHASE, etcd_snapshot_upload.PHASE, etcd_pki.PHASE,
    etcd_defrag.PHASE,
    upgrade_plan.PHASE, upgrade_repositories.PHASE, upgrade_control_planes.PHASE, upgrade_workers.PHASE,
    certs_check.PHASE, certs_renew.PHASE, certs_timer.PHASE,
)}

RESET_PHASES: tuple[str, ...] = ("drain", "etcd", "reset")
ETCD_SNAPSHOT_PHASES: tuple[str, ...] = ("etcd_probe", "etcd_snapshot", "etcd_snapshot_upload")
ETCD_LIST_PHASES: tuple[str, ...] = ("etcd_probe",)
ETCD_DEFRAG_PHASES: tuple[str, ...] = ("etcd_probe", "etcd_defrag")
# `node replace NAME`, in kubeadm's and kubespray's order: refused before anything changes if it cannot finish; the
# node drained (its API server still serves from its local etcd until its member goes), its member removed through a
# healthy one, then the join: etcd's own under systemd, kubeadm's (the node's own phases) under static pods, where a
# reachable machine is reset first.
REPLACE_REMOVE_PHASES: tuple[str, ...] = ("etcd_probe", "etcd_replace_check", "drain", "etcd_member_remove")
REPLACE_JOIN_SYSTEMD_PHASES: tuple[str, ...] = ("etcd_member_join",)
REPLACE_JOIN_KUBEADM_PHASES: tuple[str, ...] = ("reset", *NODE_ADD_PHASES)
ETCD_RESTORE_PHASES: tuple[str, ...] = ("etcd_probe", "etcd_restore_check", "etcd_restore_stage", "etcd_restore_stop",
                                        "etcd_restore_data", "etcd_restore_start", "etcd_restore_api")
# `etcd restore --from s3://...` of a snapshot sent with its certificates: those put back where there are none first.
ETCD_RESTORE_FROM_PHASES: tuple[str, ...] = ("etcd_pki", *ETCD_RESTORE_PHASES)


def replace_join_phases(survey: EtcdSurvey, node: Node) -> tuple[str, ...]:
    """After `node replace NAME` took its member out of etcd: how the fresh machine joins, decided by how etcd runs
    in this cluster; BootstrapError when the machine does not answer (its member is out; a re-run joins it)."""
    if node.name not in survey.reports:
        raise BootstrapError(f"{node.name}'s etcd member is out of etcd, but {node.name} does not answer "
                             f"({survey.unreachable.get(node.name, 'no report')}): bring the fresh machine up at "
                             f"{node.address} (change ansible_host in the inventory if its address changed), then run "
                             f"`bootstrap node replace {node.name}` again")
    return REPLACE_JOIN_SYSTEMD_PHASES if survey.kind() == "systemd" else REPLACE_JOIN_KUBEADM_PHASES
# `bootstrap upgrade`: the plan (only reads), then before anything changes the target's rules checked on every node
# and the etcd snapshot (etcd read first: the snapshot's source is a healthy member); then each step of the plan (one
# minor); then the smoke test.
UPGRADE_BEFORE: tuple[str, ...] = ("preflight", *ETCD_SNAPSHOT_PHASES)
UPGRADE_STEP_PHASES: tuple[str, ...] = ("upgrade_repositories", "upgrade_control_planes", "upgrade_workers", "network",
                                        "gpu", *ADDON_ORDER, "verify")
UPGRADE_AFTER: tuple[str, ...] = ("smoke",)
CERTS_CHECK_PHASES: tuple[str, ...] = ("certs_check",)
CERTS_RENEW_PHASES: tuple[str, ...] = ("certs_renew", "certs_timer", "certs_check")


def select_phases(names: Sequence[str], *, from_phase: str | None = None, only: str | None = None) -> list[Phase]:
    """The phases to run: all of `names`, or from `from_phase` on, or `only` one."""
    return _engine.select_phases(PHASES, names, from_phase=from_phase, only=only)


def run_phases(phases: Sequence[Phase], ctx: PhaseContext) -> PipelineResult:
    """Run phases in order (engine.run_phases), with every phase known for what each needs."""
    return _engine.run_phases(PHASES, phases, ctx)


def plan_upgrade_run(ctx: PhaseContext) -> PipelineResult:
    """The upgrade_plan phase alone (`bootstrap upgrade --dry-run` stops after it): ctx.results.upgrade holds the
    plan."""
    return run_phases([PHASES["upgrade_plan"]], ctx)


def _named(result: PipelineResult, suffix: str) -> list[PhaseOutcome]:
    return [replace(o, name=f"{o.name} {suffix}") for o in result.outcomes] if suffix else list(result.outcomes)


def run_upgrade(ctx: PhaseContext, plan: UpgradePlan) -> PipelineResult:
    """The plan's phases in order, each step's with the settings of its release (kubernetes.version, and Calico
    where it follows the versions table): its repositories first, which choose the release, then the rest. The
    cluster's state records the plan, the release chosen for each minor and each node's stage, so a re-run planned
    from what the cluster then runs finishes the job. Stops at the first failure."""
    if ctx.upgrade is None:
        raise BootstrapError("internal: run_upgrade needs the upgrade's options")
    base = ctx.settings
    record = ctx.state.upgrade
    if record is None or record.finished:
        record = UpgradeRecord(target=str(plan.target))
    record.target = str(plan.target)
    record.plan = [step.as_dict() for step in plan.steps]
    ctx.state.upgrade = record
    ctx.state.save(ctx.cluster)
    final = replace(ctx, settings=step_settings(base, str(plan.target)))
    skip = ctx.upgrade.skip_etcd_snapshot
    first = run_phases([PHASES[name] for name in UPGRADE_BEFORE if not (skip and name in ETCD_SNAPSHOT_PHASES)], final)
    outcomes = list(first.outcomes)
    if skip:
        outcomes.append(PhaseOutcome("etcd_snapshot", "skipped", 0.0, "--skip-etcd-snapshot: the operator took one"))
    if first.error:
        return PipelineResult(outcomes, first.error)
    for step in plan.steps:
        label = f"({step.version})"
        step_ctx = replace(ctx, settings=step_settings(base, step.version), step=step)
        repositories = run_phases([PHASES["upgrade_repositories"]], step_ctx)
        outcomes += _named(repositories, label)
        if repositories.error:
            return PipelineResult(outcomes, repositories.error)
        release = record.releases[f"1.{step.minor}"]
        chosen = replace(step_ctx, settings=step_settings(base, release), step=replace(step, version=release))
        rest = run_phases([PHASES[name] for name in UPGRADE_STEP_PHASES[1:]], chosen)
        outcomes += _named(rest, f"({release})")
        if rest.error:
            return PipelineResult(outcomes, rest.error)
    record.finished = True
    # What the first control plane's kubeadm now is, as prepare records it: a later `up` or `node add` builds on it.
    ctx.state.kubernetes_version = record.releases.get(f"1.{plan.target.minor}", ctx.state.kubernetes_version)
    ctx.state.save(ctx.cluster)
    last = run_phases([PHASES[name] for name in UPGRADE_AFTER], final)
    return PipelineResult(outcomes + list(last.outcomes), last.error)


__all__ = ["CERTS_CHECK_PHASES", "CERTS_RENEW_PHASES", "ETCD_LIST_PHASES", "ETCD_RESTORE_PHASES",
           "ETCD_SNAPSHOT_PHASES", "NODE_ADD_PHASES", "PHASES", "REPLACE_JOIN_KUBEADM_PHASES",
           "REPLACE_JOIN_SYSTEMD_PHASES", "REPLACE_REMOVE_PHASES", "RESET_PHASES", "UPGRADE_AFTER", "UPGRADE_BEFORE",
           "UPGRADE_STEP_PHASES", "UP_PHASES", "Phase", "PhaseContext", "PhaseOutcome", "PhaseResults",
           "PipelineResult", "plan_upgrade_run", "replace_join_phases", "resume_point", "run_phases", "run_upgrade",
           "select_phases"]
