"""The engine that runs phases: what a phase is, what it runs with, and how a run is recorded and resumed.

A Phase is a name, an optional playbook, a Python check that runs after it (or alone, for phases that are pure
API work), and what it needs from earlier phases. The phases themselves live one module each beside this one;
`provision/phases/__init__.py` puts them in order for each command.

Every phase is safe to re-run, so a failed `up`, re-run, finishes the job: the playbooks are idempotent, and so is
each check. A check judges what its playbook left and hands on what it found (PhaseResults, and the cluster's
state on this machine); some checks also do the Python side of their phase's work, each in a way a re-run repeats
without harm: preflight probes the nodes over SSH and records what it counted, control_plane installs the admin
kubeconfig on this machine, drain cordons and evicts through the API, etcd_snapshot copies the snapshot here over
SSH, the upgrade's node phases drain each node and wait for its kubelet. A phase marked `read_only` changes nothing
a node or the cluster runs: it reads them and records here what it read (etcd_probe leaves a copy of etcdctl on a
control plane, a tool and no more), which is why it may be run again on its own when a later phase needs what it
provides. Since each phase's outcome is recorded with the fingerprint of the inputs it was reached with, `up` re-run
with the same inputs resumes by itself at the phase that did not complete (`resume_point`).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kubernetes.client.exceptions import ApiException

from provision.errors import BootstrapError, InputError
from provision.inputs.files import shown
from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState, PhaseRecord, inputs_fingerprint
from provision.inputs.values import NodeName
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.nodes.runner import PlaybookResult, RunProgress, run_playbook
from provision.render.endpoint import endpoint_mode

if TYPE_CHECKING:
    from provision.inputs.upgrade import ClusterVersions, Step, UpgradeOptions, UpgradePlan
    from provision.kube.drain import DrainResult
    from provision.kube.verify import VerifyReport
    from provision.nodes.certs import CertsReport
    from provision.nodes.etcd.members import JoinPlan
    from provision.nodes.etcd.report import EtcdSurvey
    from provision.nodes.etcd.restore import RestorePlan
    from provision.nodes.etcd.snapshot import LocalSnapshot
    from provision.nodes.preflight.run import PreflightReport
    from provision.nodes.prepare import PrepareResult
    from provision.smoke.verdict import Verdict

Status = Literal["ok", "failed", "skipped", "not run"]
# A need is satisfied by the phase that provides it (in this run or an earlier one). vip_interfaces: where each
# control plane announces the VIP (kube-vip's manifests are rendered with it); etcd: every control plane's etcd as
# the probe found it in this run (never left by an earlier run: etcd changes by itself); kubernetes_version: the
# release of the kubeadm prepare installed on the first control plane (kubeadm init's kubernetesVersion).
Need = Literal["gpus", "kubeconfig", "vip_interfaces", "etcd", "kubernetes_version"]


@dataclass
class PhaseResults:
    """What phases hand to the phases after them and to the CLI's closing lines, each set by the phase named."""
    preflight: PreflightReport | None = None
    prepare: PrepareResult | None = None
    kubeconfig: Path | None = None  # control_plane: the admin kubeconfig installed on this machine
    verify: VerifyReport | None = None
    smoke: Verdict | None = None
    drain: DrainResult | None = None
    # upgrade_plan: the versions read from the cluster and the plan made from them.
    versions: ClusterVersions | None = None
    upgrade: UpgradePlan | None = None
    # certs_check: every control plane's certificates and their expiry.
    certs: CertsReport | None = None
    etcd: EtcdSurvey | None = None  # etcd_probe: every control plane's etcd
    etcd_snapshot: LocalSnapshot | None = None  # etcd_snapshot: the snapshot on this machine (path, revision, keys, hash)
    etcd_restore: RestorePlan | None = None  # etcd_restore_check: what the restore does on each member
    etcd_join: JoinPlan | None = None  # etcd_member_join: how the replaced control plane's member rejoins


@dataclass(frozen=True)
class EtcdOptions:
    """What the etcd commands ask of their phases."""

    # `etcd snapshot --dir`: where the snapshot goes (None: the cluster's state directory).
    snapshot_dir: Path | None = None
    # `etcd restore SNAPSHOT`: the snapshot, checked; and `--survivors`: the control planes restored (None: all).
    restore: LocalSnapshot | None = None
    survivors: tuple[str, ...] | None = None
    # `node replace NAME`: the control plane replaced.
    replace: str | None = None
    # `etcd restore --from s3://...`: the certificates sealed beside the snapshot, opened with the operator's key.
    pki_archive: bytes | None = None


@dataclass
class PhaseContext:
    cluster: Cluster
    settings: Settings
    state: ClusterState
    # The nodes this run is about (`node add NAME`, `reset NAMES`); None: the whole cluster.
    nodes: tuple[NodeName, ...] | None = None
    verbose: bool = False
    become_password: str | None = None
    on_progress: Callable[[RunProgress], None] | None = None
    on_message: Callable[[str], None] | None = None
    # The smoke test's live view (provision.smoke.driver.SmokeProgress).
    on_smoke_progress: Callable[[Any], None] | None = None
    # `bootstrap upgrade`: what was asked, and the step its phases run for.
    upgrade: UpgradeOptions | None = None
    step: Step | None = None
    playbook_results: list[PlaybookResult] = field(default_factory=list)
    results: PhaseResults = field(default_factory=PhaseResults)
    etcd: EtcdOptions = field(default_factory=EtcdOptions)
    # The phases this run is to run (set by run_phases): preflight proves the sources those will use.
    planned: tuple[str, ...] = ()

    def say(self, message: str) -> None:
        if self.on_message:
            self.on_message(message)

    @property
    def target_nodes(self) -> tuple[NodeName, ...]:
        return self.nodes if self.nodes is not None else tuple(n.name for n in self.cluster.nodes)


@dataclass(frozen=True)
class Phase:
    name: str
    title: str
    # Runs after the playbook (or alone): judges, records, and does the phase's Python side (re-runnable, above);
    # returns a one-line detail for the summary, raises on failure.
    check: Callable[[PhaseContext], str]
    playbook: str | None = None
    # The playbook's own variables beyond playbook_vars: one of render/playbook_vars.py's functions.
    extra_vars: Callable[[PhaseContext], dict[str, Any]] | None = None
    # Nodes (node names) the playbook is limited to (None: every host its plays target).
    limit: Callable[[PhaseContext], list[str] | None] | None = None
    needs: tuple[Need, ...] = ()
    provides: tuple[Need, ...] = ()
    # Why the phase has nothing to do in this run (None: it runs).
    skip_reason: Callable[[PhaseContext], str | None] | None = None
    # Changes nothing a node or the cluster runs (it reads, and records here what it read): re-run on its own when
    # a later phase needs what it provides.
    read_only: bool = False
    # The check reads the playbook's failures itself (to say more than the first failed task).
    checks_playbook: bool = False
    # It takes nodes apart (drain, reset): once it starts, the recorded outcomes of the other phases no longer
    # describe the nodes, and `up` must not resume after them.
    undoes: bool = False
    # Runs before the playbook and refuses (raises BootstrapError) what must not start: nothing has changed yet.
    before: Callable[[PhaseContext], None] | None = None


@dataclass(frozen=True)
class PhaseOutcome:
    name: str
    status: Status
    seconds: float
    detail: str = ""
    error: BootstrapError | None = field(default=None, compare=False, repr=False)
    # The nodes it failed on, each with how ("failed", "unreachable", "not ready"), for the summary.
    nodes: dict[str, str] = field(default_factory=dict)


@dataclass
class PipelineResult:
    outcomes: list[PhaseOutcome]
    error: BootstrapError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def total_seconds(self) -> float:
        return sum(o.seconds for o in self.outcomes)


def select_phases(catalog: Mapping[str, Phase], names: Sequence[str], *, from_phase: str | None = None,
                  only: str | None = None) -> list[Phase]:
    """The phases to run: all of `names`, or from `from_phase` on, or `only` one."""
    if from_phase is not None and only is not None:
        raise InputError("--from and --only exclude each other: pass one of them")
    # An empty --only '' names no phase: refused, not read as "no choice" (which would run every phase).
    wanted = only if only is not None else from_phase
    if wanted is not None and wanted not in names:
        raise InputError(f"unknown phase {shown(wanted)}: phases are {', '.join(names)}")
    if only is not None:
        return [catalog[only]]
    start = names.index(from_phase) if from_phase else 0
    return [catalog[n] for n in names[start:]]


def resume_point(names: Sequence[str], state: ClusterState, fingerprint: str) -> tuple[str, list[str]] | None:
    """Where `up` resumes by itself: the first of `names` that did not complete (ok or skipped) with these inputs,
    and the ones before it that did; None when there is nothing to resume (none completed, or all did: a full
    run, which changes nothing where nothing needs it)."""
    completed: list[str] = []
    for name in names:
        record = state.phases.get(name)
        if record is None or record.status not in ("ok", "skipped") or record.inputs != fingerprint:
            return (name, completed) if completed else None
        completed.append(name)
    return None


def satisfied(need: Need, ctx: PhaseContext) -> bool:
    """Whether what `need` names is already there for this run's nodes, left by an earlier run."""
    if need == "gpus":
        return ctx.state.gpus is not None and all(n in ctx.state.gpus for n in ctx.target_nodes)
    if need == "vip_interfaces":
        return (endpoint_mode(ctx.cluster, ctx.settings) != "vip" or ctx.settings.control_plane.interface is not None
                or all(n.name in ctx.state.vip_interfaces for n in ctx.cluster.control_planes))
    if need == "etcd":
        return ctx.results.etcd is not None
    if need == "kubernetes_version":
        return ctx.state.kubernetes_version is not None
    return admin_kubeconfig_path(ctx.cluster).exists()


def _run_one(phase: Phase, ctx: PhaseContext) -> PhaseOutcome:
    reason = phase.skip_reason(ctx) if phase.skip_reason else None
    if reason:
        return PhaseOutcome(phase.name, "skipped", 0.0, reason)
    started = time.monotonic()
    try:
        if phase.before:
            phase.before(ctx)
        if phase.playbook:
            ctx.say(f"{phase.name}: running {phase.playbook}")
            limit = phase.limit(ctx) if phase.limit else None
            result = run_playbook(phase.playbook, ctx.cluster, ctx.settings, phase=phase.name,
                                  limit=ctx.cluster.hosts(limit) if limit is not None else None,
                                  extra_vars=phase.extra_vars(ctx) if phase.extra_vars else None,
                                  pythons=ctx.state.pythons,
                                  on_progress=ctx.on_progress, verbose=ctx.verbose,
                                  become_password=ctx.become_password)
            ctx.playbook_results.append(result)
            if not phase.checks_playbook:
                result.raise_for_failure()
        detail = phase.check(ctx)
    except BootstrapError as exc:
        return PhaseOutcome(phase.name, "failed", time.monotonic() - started, str(exc), exc, exc.nodes)
    except ApiException as exc:
        # The checks turn the answers they expect into named causes; any other refusal still ends the phase in
        # one line rather than a traceback.
        error = BootstrapError(f"{phase.name}: the API server answered HTTP {exc.status} ({exc.reason}) to a "
                               f"request this phase needed; see `kubectl get events -A` on the cluster")
        return PhaseOutcome(phase.name, "failed", time.monotonic() - started, str(error), error)
    return PhaseOutcome(phase.name, "ok", time.monotonic() - started, detail)


def _now() -> str:
    """The time a record is written, for `bootstrap status` (the last run)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def _record(ctx: PhaseContext, outcome: PhaseOutcome, fingerprint: str) -> None:
    ctx.state.phases[outcome.name] = PhaseRecord(outcome.status, round(outcome.seconds, 1), outcome.detail,
                                                 fingerprint, _now())


def _run_recorded(catalog: Mapping[str, Phase], phase: Phase, ctx: PhaseContext, fingerprint: str) -> PhaseOutcome:
    """Run one phase with its record saved first as `running`: a run killed in the middle leaves it so, and the
    next `up` resumes there, not after it."""
    if phase.undoes:
        for name in [n for n, p in catalog.items() if not p.undoes]:
            ctx.state.phases.pop(name, None)
    ctx.state.phases[phase.name] = PhaseRecord("running", 0.0, "", fingerprint, _now())
    ctx.state.save(ctx.cluster)
    outcome = _run_one(phase, ctx)
    _record(ctx, outcome, fingerprint)
    ctx.state.save(ctx.cluster)
    return outcome


def run_phases(catalog: Mapping[str, Phase], phases: Sequence[Phase], ctx: PhaseContext) -> PipelineResult:
    """Run phases in order, stopping at the first failure; every outcome (and its time, and the fingerprint of
    the inputs) is recorded in the cluster's state so the next run can resume. A need of a phase that no
    earlier phase of this run provides, and that is not already there, runs its provider first when that one
    only reads (preflight); otherwise the run is refused with the phase to start from."""
    outcomes: list[PhaseOutcome] = []
    planned = [p.name for p in phases]
    ctx.planned = tuple(planned)
    providers = {need: phase for phase in catalog.values() for need in phase.provides}
    fingerprint = inputs_fingerprint(ctx.cluster, ctx.settings, ctx.nodes)
    error: BootstrapError | None = None
    try:
        for index, phase in enumerate(phases):
            # A phase with nothing to do needs nothing: its needs' providers are not run for it.
            needs = () if phase.skip_reason and phase.skip_reason(ctx) else phase.needs
            for need in needs:
                provider = providers.get(need)
                if satisfied(need, ctx) or provider is None or provider.name in planned[:index]:
                    continue
                if not provider.read_only:
                    raise InputError(f"phase {phase.name} needs what phase {provider.name} makes ({need}), and it has "
                                     f"not run for this cluster: run `bootstrap up --from {provider.name}`")
                ctx.say(f"{phase.name} needs {need}: running {provider.name} first")
                outcome = _run_recorded(catalog, provider, ctx, fingerprint)
                outcomes.append(outcome)
                if outcome.error:
                    raise outcome.error
            ctx.say(f"{phase.name}: {phase.title}")
            outcome = _run_recorded(catalog, phase, ctx, fingerprint)
            outcomes.append(outcome)
            if outcome.error:
                error = outcome.error
                break
    except BootstrapError as exc:
        error = exc
    finally:
        ctx.state.save(ctx.cluster)
    done = {o.name for o in outcomes}
    outcomes.extend(PhaseOutcome(name, "not run", 0.0) for name in planned if name not in done)
    return PipelineResult(outcomes, error)
