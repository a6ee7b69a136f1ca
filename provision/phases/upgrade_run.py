"""`bootstrap upgrade`'s workflow: the plan's steps in order, each with the settings of its release, and what each
step records for a rollback.

Before anything changes: preflight with the target's rules on every node. Then each step (one minor): an etcd
snapshot (a rollback restores the state of the cluster from before the step: kubeadm-upgrade.md asks for a backup,
and an upgraded API server may have written objects the older one cannot read), the Kubernetes repository of the
step's minor (which chooses the step's release), the release's images pulled on the step's nodes before the first
drain, then the nodes and the cluster's add-ons at that release; last, the smoke test. The cluster's state records
the plan, the release chosen for each minor, each node's stage, and, per step, what a rollback needs: the snapshot
taken before it and each node's versions before it (docs/upgrade.md, "Going back"). A re-run planned from what the
cluster then runs finishes the job; a failure stops the run.

The phases are looked up by name through `runner` (the catalog's runner: provision/phases/__init__.py), so this
module owns the order and the loop, and the catalog stays the one list of phases.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from provision.errors import BootstrapError
from provision.inputs.addons import ADDON_ORDER
from provision.inputs.state import StepRecord, UpgradeRecord
from provision.inputs.upgrade import ClusterVersions, Step, UpgradeOptions, UpgradePlan, step_settings
from provision.inputs.workflows import ETCD_SNAPSHOT_PHASES
from provision.phases.engine import PhaseContext, PhaseOutcome, PipelineResult

# The phases' names, in order.
BEFORE: tuple[str, ...] = ("preflight",)
STEP: tuple[str, ...] = ("upgrade_repositories", "upgrade_prepull", "upgrade_control_planes", "upgrade_workers",
                         "network", "gpu", *ADDON_ORDER, "verify")
# After the Kubernetes steps (also when there are none): the NVIDIA driver where `--gpu-driver` asks (skipped
# otherwise), then the smoke test.
AFTER: tuple[str, ...] = ("upgrade_gpu_driver", "smoke")

Runner = Callable[[Sequence[str], PhaseContext], PipelineResult]


@dataclass(frozen=True)
class UpgradeRun:
    """What one `bootstrap upgrade` works from: what was asked, and the plan made from what the cluster runs."""

    options: UpgradeOptions
    plan: UpgradePlan
    # The versions the plan was made from (the nodes' versions before the first step).
    versions: ClusterVersions | None = None


def _named(result: PipelineResult, suffix: str) -> list[PhaseOutcome]:
    return [replace(o, name=f"{o.name} {suffix}") for o in result.outcomes] if suffix else list(result.outcomes)


def _before(run: UpgradeRun, step: Step, index: int) -> dict[str, dict[str, str | None]]:
    """Each node of the step's versions before it: as read for the plan (the first step), else the release of the
    step before (every node of a step ends at its release)."""
    def text(release: object) -> str | None:
        return str(release) if release is not None else None
    found: dict[str, dict[str, str | None]] = {}
    for name in step.nodes:
        if index == 0 and run.versions is not None:
            node = run.versions.node(name)
            found[name] = {"kubelet": text(node.kubelet), "kubeadm": text(node.kubeadm),
                           "static_pods": text(node.static_pods)}
        else:
            previous = run.plan.steps[index - 1].version
            found[name] = {"kubelet": previous, "kubeadm": previous,
                           "static_pods": previous if name in step.control_planes else None}
    return found


def _snapshot(ctx: PhaseContext, run: UpgradeRun, step: Step, record: UpgradeRecord, index: int,
              runner: Runner) -> tuple[list[PhaseOutcome], BootstrapError | None]:
    """The etcd snapshot before the step (or the operator's, with --skip-etcd-snapshot), recorded with the nodes'
    versions before it; a step already begun keeps the first snapshot it recorded."""
    minor = f"1.{step.minor}"
    kept = record.steps.get(minor)
    if kept is None:
        kept = record.steps[minor] = StepRecord(started=datetime.now(UTC).isoformat(timespec="seconds"),
                                               before=_before(run, step, index))
        ctx.state.save(ctx.cluster)
    if run.options.skip_etcd_snapshot:
        return [PhaseOutcome("etcd_snapshot", "skipped", 0.0, "--skip-etcd-snapshot: the operator took one")], None
    result = runner(ETCD_SNAPSHOT_PHASES, ctx)
    snapshot = ctx.results.etcd_snapshot
    if result.error is None and snapshot is not None and kept.snapshot is None:
        kept.snapshot = snapshot.summary()
        ctx.state.save(ctx.cluster)
    return list(result.outcomes), result.error


def run_upgrade(ctx: PhaseContext, run: UpgradeRun, runner: Runner) -> PipelineResult:
    """The plan's phases in order (see the module docstring); stops at the first failure."""
    base = ctx.settings
    plan = run.plan
    record = ctx.state.upgrade
    if record is None or record.finished:
        record = UpgradeRecord(target=str(plan.target))
    record.target = str(plan.target)
    record.plan = [step.as_dict() for step in plan.steps]
    ctx.state.upgrade = record
    ctx.state.save(ctx.cluster)
    final = replace(ctx, settings=step_settings(base, str(plan.target)))
    first = runner(BEFORE, final)
    outcomes = list(first.outcomes)
    if first.error:
        return PipelineResult(outcomes, first.error)
    for index, step in enumerate(plan.steps):
        label = f"({step.version})"
        step_ctx = replace(ctx, settings=step_settings(base, step.version), step=step)
        snapshot, error = _snapshot(step_ctx, run, step, record, index, runner)
        outcomes += _named(PipelineResult(snapshot), label)
        if error:
            return PipelineResult(outcomes, error)
        repositories = runner(STEP[:1], step_ctx)
        outcomes += _named(repositories, label)
        if repositories.error:
            return PipelineResult(outcomes, repositories.error)
        release = record.releases[f"1.{step.minor}"]
        chosen = replace(step_ctx, settings=step_settings(base, release), step=replace(step, version=release))
        rest = runner(STEP[1:], chosen)
        outcomes += _named(rest, f"({release})")
        if rest.error:
            return PipelineResult(outcomes, rest.error)
    record.finished = True
    # What the first control plane's kubeadm now is, as prepare records it: a later `up` or `node add` builds on it.
    ctx.state.kubernetes_version = record.releases.get(f"1.{plan.target.minor}", ctx.state.kubernetes_version)
    ctx.state.save(ctx.cluster)
    last = runner(AFTER, final)
    return PipelineResult(outcomes + list(last.outcomes), last.error)
