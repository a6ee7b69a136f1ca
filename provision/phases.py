"""The phases of `up`, `node add`, `node remove`, `reset` and `down`.

A Phase is a name, an optional playbook, a Python check that runs after it (or alone, for phases that are
pure API work), and what it needs from earlier phases. `up` is the ordered list UP_PHASES; the other
commands reuse the same phases with a narrower scope. Every phase is safe to re-run: the playbooks are
idempotent and the checks only read, so a failed `up`, re-run, finishes the job; and since each phase's outcome
is recorded with the fingerprint of the inputs it was reached with, `up` re-run with the same inputs resumes by
itself at the phase that did not complete (`resume_point`).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kubernetes.client.exceptions import ApiException

from provision.errors import BootstrapError, InputError
from provision.inputs.addons import ADDON_ORDER, ADDONS, AddonName
from provision.inputs.files import shown
from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState, PhaseRecord, inputs_fingerprint
from provision.nodes.runner import PlaybookResult, RunProgress, run_playbook

Status = Literal["ok", "failed", "skipped", "not run"]
# A need is satisfied by the phase that provides it (in this run or an earlier one).
Need = Literal["gpus", "kubeconfig"]


@dataclass
class PhaseContext:
    cluster: Cluster
    settings: Settings
    state: ClusterState
    # The nodes this run is about (`node add NAME`, `reset NAMES`); None: the whole cluster.
    nodes: tuple[str, ...] | None = None
    verbose: bool = False
    become_password: str | None = None
    on_progress: Callable[[RunProgress], None] | None = None
    on_message: Callable[[str], None] | None = None
    # The smoke test's live view (provision.kube.smoke.SmokeProgress).
    on_smoke_progress: Callable[[Any], None] | None = None
    playbook_results: list[PlaybookResult] = field(default_factory=list)
    # Filled by phases for the ones after them and for the CLI's closing lines.
    facts: dict[str, Any] = field(default_factory=dict)

    def say(self, message: str) -> None:
        if self.on_message:
            self.on_message(message)

    @property
    def target_nodes(self) -> tuple[str, ...]:
        return self.nodes if self.nodes is not None else tuple(n.name for n in self.cluster.nodes)


@dataclass(frozen=True)
class Phase:
    name: str
    title: str
    # Runs after the playbook (or alone) and returns a one-line detail for the summary; raises on failure.
    check: Callable[[PhaseContext], str]
    playbook: str | None = None
    # Extra playbook variables beyond playbook_vars (rendered configs, manifests).
    extra_vars: Callable[[PhaseContext], dict[str, Any]] | None = None
    # Hosts the playbook is limited to (None: every host its plays target).
    limit: Callable[[PhaseContext], list[str] | None] | None = None
    needs: tuple[Need, ...] = ()
    provides: tuple[Need, ...] = ()
    # Why the phase has nothing to do in this run (None: it runs).
    skip_reason: Callable[[PhaseContext], str | None] | None = None
    # Read-only phases are re-run on their own when a later phase needs what they provide.
    read_only: bool = False
    # The check reads the playbook's failures itself (to say more than the first failed task).
    checks_playbook: bool = False
    # It takes nodes apart (drain, reset): once it starts, the recorded outcomes of the other phases no longer
    # describe the nodes, and `up` must not resume after them.
    undoes: bool = False


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


# --- helpers the phases share ----------------------------------------------------------------------------

def _api(ctx: PhaseContext):  # type: ignore[no-untyped-def]
    from provision.kube.client import load_api_client
    from provision.kube.kubeconfig import admin_kubeconfig_path

    return load_api_client(admin_kubeconfig_path(ctx.cluster))


def _expectations(ctx: PhaseContext, nodes: Sequence[str] | None = None):  # type: ignore[no-untyped-def]
    from provision.kube.verify import Expectations

    settings = ctx.settings
    scope = tuple(nodes) if nodes is not None else ctx.target_nodes
    gpus = {name: count for name, count in (ctx.state.gpus or {}).items() if name in scope}
    return Expectations(nodes=scope, gpus=gpus, pod_cidr=settings.kubernetes.pod_cidr,
                        dns_domain=settings.kubernetes.dns_domain, gpu_runtime=settings.gpu.runtime,
                        dns_probe_image=_dns_probe_image(settings),
                        pods_on=None if ctx.nodes is None else tuple(scope),
                        dns_node=scope[0] if ctx.nodes is not None and len(scope) == 1 else None)


def _dns_probe_image(settings: Settings) -> str:
    from provision.render.manifests import image_ref

    return image_ref(settings, settings.verify.dns_probe_image)


def _gpu_nodes(ctx: PhaseContext) -> dict[str, int]:
    return {name: count for name, count in (ctx.state.gpus or {}).items()
            if count > 0 and name in ctx.target_nodes}


# --- preflight ---------------------------------------------------------------------------------------------

def _preflight(ctx: PhaseContext) -> str:
    from provision.nodes.preflight.run import run_preflight

    report = run_preflight(ctx.cluster, ctx.settings, nodes=list(ctx.target_nodes), on_progress=ctx.on_progress,
                           become_password=ctx.become_password)
    ctx.facts["preflight"] = report
    gpus = dict(ctx.state.gpus or {})
    gpus.update({name: int(report.gpu_counts.get(name, 0)) for name in ctx.target_nodes})
    ctx.state.gpus = gpus
    ctx.state.link_gbps = {name: speed for name, speed in ctx.state.link_gbps.items() if name not in ctx.target_nodes} \
        | report.link_speeds
    pythons = {name: python for name, python in ctx.state.pythons.items() if name not in ctx.target_nodes}
    ctx.state.pythons = pythons | report.pythons
    ctx.state.gpu_generations |= {name: report.gpu_generations.get(name, []) for name in ctx.target_nodes}
    # What the settings accept but upstream no longer supports (containerd 1.x on 1.35, cgroup v1 allowed) is said
    # on every run, not only by `bootstrap preflight`.
    for problem in report.warnings:
        ctx.say(f"warning: {problem.describe()}")
    if report.blocking:
        more = (f" (and {len(report.blocking) - 1} more; `bootstrap preflight` lists them)"
                if len(report.blocking) > 1 else "")
        raise BootstrapError(f"preflight: {report.blocking[0].describe()}{more}")
    total = sum(gpus.get(n, 0) for n in ctx.target_nodes)
    warned = f", {len(report.warnings)} warnings" if report.warnings else ""
    return f"{len(ctx.target_nodes)} nodes ready to prepare, {total} GPUs found{warned}"


# --- prepare -----------------------------------------------------------------------------------------------

def _prepare_vars(ctx: PhaseContext) -> dict[str, Any]:
    from provision.render.playbook_vars import prepare_vars

    return prepare_vars(ctx.cluster, ctx.state.gpus or {}, ctx.state.gpu_generations)


def _prepared(ctx: PhaseContext) -> str:
    from provision.nodes.prepare import PrepareResult, check_prepared

    result = ctx.playbook_results[-1]
    ctx.facts["prepare"] = PrepareResult(result, check_prepared(result, ctx.cluster, ctx.settings, ctx.nodes))
    return f"{len(result.tally)} nodes ready for kubeadm, {sum(result.changed.values())} changes"


# --- control plane -----------------------------------------------------------------------------------------

def _control_plane_vars(ctx: PhaseContext) -> dict[str, Any]:
    from provision.kube.kubeconfig import fetched_kubeconfig_path
    from provision.render.kubeadm_config import CONFIG_PATH, render_init_config

    return {"cb_kubeadm_config": render_init_config(ctx.cluster, ctx.settings),
            "cb_kubeadm_config_path": CONFIG_PATH,
            "cb_kubeconfig_fetch_dest": str(fetched_kubeconfig_path(ctx.cluster))}


def _control_plane_check(ctx: PhaseContext) -> str:
    from provision.kube.kubeconfig import fetched_kubeconfig_path, install_admin_kubeconfig
    from provision.kube.verify import wait_for_api

    kubeconfig = install_admin_kubeconfig(fetched_kubeconfig_path(ctx.cluster), ctx.cluster)
    ctx.facts["kubeconfig"] = kubeconfig
    version = wait_for_api(_api(ctx), timeout_s=120)
    wanted = ctx.settings.kubernetes.version
    running = version.lstrip("v").split("+")[0]
    if not (running == wanted if wanted.count(".") == 2 else running.startswith(wanted + ".")):
        raise BootstrapError(f"the API server runs {version} but kubernetes.version is {wanted}: the control plane "
                             "was initialised with another version; `bootstrap down` and `up` again to change it")
    return f"API server {version}; kubeconfig {kubeconfig}"


# --- network -----------------------------------------------------------------------------------------------

def _network_vars(ctx: PhaseContext) -> dict[str, Any]:
    from provision.render.manifests import calico_source

    source = calico_source(ctx.settings)
    return {"cb_calico_url": source.url, "cb_calico_upstream_file": source.upstream_file,
            "cb_calico_kustomization": source.kustomization}


def _network_check(ctx: PhaseContext) -> str:
    from provision.kube.verify import verify_cluster

    control_plane = ctx.cluster.control_plane.name
    report = verify_cluster(_api(ctx), _expectations(ctx, [control_plane]), checks=("nodes", "pods"),
                            timeout_s=ctx.settings.verify.timeout_s, on_message=ctx.say)
    report.raise_for_problems("network")
    return f"Calico {ctx.settings.calico.version} up, {control_plane} Ready"


# --- join --------------------------------------------------------------------------------------------------

def _join_limit(ctx: PhaseContext) -> list[str] | None:
    if ctx.nodes is None:
        return None
    # The control plane mints the join command; only the named workers join.
    return [ctx.cluster.control_plane.name, *ctx.nodes]


def _join_vars(ctx: PhaseContext) -> dict[str, Any]:
    from provision.render.kubeadm_config import ignored_preflight_errors, node_ip

    return {"cb_node_ips": {n.name: node_ip(n) for n in ctx.cluster.nodes if node_ip(n)},
            "cb_ignore_preflight_errors": ignored_preflight_errors(ctx.settings)}


def _join_check(ctx: PhaseContext) -> str:
    from provision.kube.nodes import label_workers
    from provision.kube.verify import verify_cluster

    api = _api(ctx)
    report = verify_cluster(api, _expectations(ctx), checks=("nodes",),
                            timeout_s=ctx.settings.verify.timeout_s, on_message=ctx.say)
    report.raise_for_problems("join")
    workers = [n.name for n in ctx.cluster.nodes if not n.is_control_plane and n.name in ctx.target_nodes]
    labelled = label_workers(api, workers)
    return f"{len(report.ready_nodes)} nodes Ready" + (f", {len(labelled)} labelled worker" if labelled else "")


# --- GPU device plugin -------------------------------------------------------------------------------------

def _gpu_skip(ctx: PhaseContext) -> str | None:
    return None if _gpu_nodes(ctx) else "no GPU found by preflight"


def _gpu_vars(ctx: PhaseContext) -> dict[str, Any]:
    from provision.inputs.versions import GPU_GENERATION_LABEL, oldest_generation
    from provision.render.manifests import device_plugin_manifest, runtimeclass_manifest

    return {"cb_gpu_nodes": sorted(_gpu_nodes(ctx)),
            # The smoke test picks its image for the oldest generation among the nodes it runs on.
            "cb_gpu_node_labels": {name: [f"{GPU_GENERATION_LABEL}={oldest_generation(ctx.state.gpu_generations[name])}"]
                                   for name in sorted(_gpu_nodes(ctx)) if ctx.state.gpu_generations.get(name)},
            "cb_device_plugin_manifest": device_plugin_manifest(ctx.settings),
            "cb_runtimeclass_manifest": runtimeclass_manifest()}


def _gpu_check(ctx: PhaseContext) -> str:
    from provision.kube.verify import verify_cluster

    report = verify_cluster(_api(ctx), _expectations(ctx, sorted(_gpu_nodes(ctx))), checks=("gpus",),
                            timeout_s=ctx.settings.verify.timeout_s, on_message=ctx.say)
    report.raise_for_problems("gpu")
    found = sum(f for _, f in report.gpus.values())
    plugin = ctx.settings.gpu.device_plugin_version
    return f"device plugin {plugin}: {found} GPUs allocatable on {len(report.gpus)} nodes"


# --- add-ons (one phase each, after gpu) ------------------------------------------------------------------

def _addon_skip(name: AddonName) -> Callable[[PhaseContext], str | None]:
    return lambda ctx: None if name in ctx.settings.addons.enabled else "not in addons.enabled"


def _addon_vars(name: AddonName, state: Literal["present", "absent"]) -> Callable[[PhaseContext], dict[str, Any]]:
    def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
        from provision.render.addons import addon_plan

        return {"cb_addon": addon_plan(ctx.settings, name).as_vars(), "cb_addon_state": state,
                "cb_addon_timeout_s": ctx.settings.addons.timeout_s}
    return extra_vars


def _addon_check(name: AddonName) -> Callable[[PhaseContext], str]:
    def check(ctx: PhaseContext) -> str:
        from provision.kube.addons import wait_for_addon

        status = wait_for_addon(_api(ctx), name, ctx.settings, timeout_s=ctx.settings.addons.timeout_s)
        if not status.ok:
            more = f" (and {len(status.problems) - 1} more problems)" if len(status.problems) > 1 else ""
            raise BootstrapError(f"{name}: {status.problems[0].describe()}{more}")
        return status.summary()
    return check


def _addon_removed(name: AddonName) -> Callable[[PhaseContext], str]:
    def check(ctx: PhaseContext) -> str:
        from provision.kube.addons import wait_for_removal

        status = wait_for_removal(_api(ctx), name, timeout_s=ctx.settings.addons.timeout_s)
        if not status.ok:
            raise BootstrapError(f"{name} removal: {status.problems[0].describe()}")
        return f"{ADDONS[name].title} removed: no CRD and no namespace {ADDONS[name].namespace} left"
    return check


def _addon_phases() -> list[Phase]:
    phases = []
    for name in ADDON_ORDER:
        addon = ADDONS[name]
        phases.append(Phase(name, f"{addon.title}: {addon.provides}", _addon_check(name), playbook="addon.yml",
                            extra_vars=_addon_vars(name, "present"), needs=("kubeconfig",),
                            skip_reason=_addon_skip(name)))
        phases.append(Phase(f"remove_{name}", f"{addon.title} deleted", _addon_removed(name), playbook="addon.yml",
                            extra_vars=_addon_vars(name, "absent"), needs=("kubeconfig",)))
    return phases


# --- verify ------------------------------------------------------------------------------------------------

def _verify(ctx: PhaseContext) -> str:
    from provision.kube.verify import verify_cluster

    report = verify_cluster(_api(ctx), _expectations(ctx), timeout_s=ctx.settings.verify.timeout_s,
                            on_message=ctx.say)
    ctx.facts["verify_report"] = report
    report.raise_for_problems()
    return report.summary()


# --- smoke test --------------------------------------------------------------------------------------------

def _smoke_skip(ctx: PhaseContext) -> str | None:
    return None if ctx.settings.smoke_test.enabled else "smoke_test.enabled is false"


def _smoke(ctx: PhaseContext) -> str:
    from provision.kube.kubeconfig import admin_kubeconfig_path
    from provision.kube.smoke import run_smoke_test

    # smoke_test.mode (auto: GPU when the cluster advertises one) is applied by the smoke test itself.
    # The slowest link preflight read between the nodes, to set beside the all-reduce bandwidth.
    links = ctx.state.link_gbps.values()
    verdict = run_smoke_test(admin_kubeconfig_path(ctx.cluster), ctx.settings, on_progress=ctx.on_smoke_progress,
                             link_gbps=min(links) if links else None)
    ctx.facts["smoke_verdict"] = verdict
    if not verdict.passed:
        # A FAIL summary already carries the cause and its detail.
        raise BootstrapError(f"smoke test: {verdict.summary}")
    return verdict.summary


# --- drain and reset (reset, down, node remove) ------------------------------------------------------------

def _drain(ctx: PhaseContext) -> str:
    from provision.kube.drain import drain_and_delete
    from provision.kube.kubeconfig import admin_kubeconfig_path

    path = admin_kubeconfig_path(ctx.cluster)
    api = None
    if path.exists():
        try:
            api = _api(ctx)
        except BootstrapError:
            api = None
    result = drain_and_delete(api, ctx.target_nodes)
    ctx.facts["drain"] = result
    return result.summary()


def _reset_check(ctx: PhaseContext) -> str:
    result = ctx.playbook_results[-1]
    changed = {h: c for h, c in result.changed.items() if c}
    return (f"{len(result.tally)} nodes clean; changed: {', '.join(sorted(changed))}" if changed
            else f"{len(result.tally)} nodes were already clean")


def _reset_limit(ctx: PhaseContext) -> list[str] | None:
    return list(ctx.nodes) if ctx.nodes is not None else None


PHASES: dict[str, Phase] = {p.name: p for p in (
    Phase("preflight", "check every node can take part", _preflight, provides=("gpus",), read_only=True),
    # The NVIDIA stack goes where preflight found GPUs: `prepare` alone runs preflight first when it has not.
    Phase("prepare", "packages, containerd, kubelet, NVIDIA stack", _prepared, playbook="prepare.yml",
          extra_vars=_prepare_vars, limit=lambda ctx: list(ctx.nodes) if ctx.nodes is not None else None,
          needs=("gpus",), checks_playbook=True),
    Phase("control_plane", "kubeadm init and the admin kubeconfig", _control_plane_check,
          playbook="control_plane.yml", extra_vars=_control_plane_vars, provides=("kubeconfig",)),
    Phase("network", "Calico pod network", _network_check, playbook="network.yml", extra_vars=_network_vars,
          needs=("kubeconfig",)),
    Phase("join", "workers join with a freshly minted token", _join_check, playbook="join.yml",
          extra_vars=_join_vars, limit=_join_limit, needs=("kubeconfig",)),
    Phase("gpu", "NVIDIA device plugin on GPU nodes", _gpu_check, playbook="gpu_plugin.yml", extra_vars=_gpu_vars,
          needs=("gpus", "kubeconfig"), skip_reason=_gpu_skip),
    *_addon_phases(),
    Phase("verify", "nodes Ready, system pods, DNS, GPUs", _verify, needs=("gpus", "kubeconfig"), read_only=True),
    Phase("smoke", "CIFAR-10 training Job", _smoke, needs=("kubeconfig",), skip_reason=_smoke_skip),
    Phase("drain", "cordon, evict and delete through the API", _drain, undoes=True),
    Phase("reset", "kubeadm reset and every trace it leaves", _reset_check, playbook="reset.yml",
          limit=_reset_limit, undoes=True),
)}

UP_PHASES: tuple[str, ...] = ("preflight", "prepare", "control_plane", "network", "join", "gpu", *ADDON_ORDER,
                              "verify", "smoke")
NODE_ADD_PHASES: tuple[str, ...] = ("preflight", "prepare", "join", "gpu", "verify")
RESET_PHASES: tuple[str, ...] = ("drain", "reset")


def select_phases(names: Sequence[str], *, from_phase: str | None = None, only: str | None = None) -> list[Phase]:
    """The phases to run: all of `names`, or from `from_phase` on, or `only` one."""
    if from_phase is not None and only is not None:
        raise InputError("--from and --only exclude each other: pass one of them")
    # An empty --only '' names no phase: refused, not read as "no choice" (which would run every phase).
    wanted = only if only is not None else from_phase
    if wanted is not None and wanted not in names:
        raise InputError(f"unknown phase {shown(wanted)}: phases are {', '.join(names)}")
    if only is not None:
        return [PHASES[only]]
    start = names.index(from_phase) if from_phase else 0
    return [PHASES[n] for n in names[start:]]


def _satisfied(need: Need, ctx: PhaseContext) -> bool:
    if need == "gpus":
        return ctx.state.gpus is not None and all(n in ctx.state.gpus for n in ctx.target_nodes)
    from provision.kube.kubeconfig import admin_kubeconfig_path

    return admin_kubeconfig_path(ctx.cluster).exists()


def _providers() -> dict[Need, Phase]:
    return {need: phase for phase in PHASES.values() for need in phase.provides}


def _run_one(phase: Phase, ctx: PhaseContext) -> PhaseOutcome:
    reason = phase.skip_reason(ctx) if phase.skip_reason else None
    if reason:
        return PhaseOutcome(phase.name, "skipped", 0.0, reason)
    started = time.monotonic()
    try:
        if phase.playbook:
            ctx.say(f"{phase.name}: running {phase.playbook}")
            result = run_playbook(phase.playbook, ctx.cluster, ctx.settings, phase=phase.name,
                                  limit=phase.limit(ctx) if phase.limit else None,
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


def _record(ctx: PhaseContext, outcome: PhaseOutcome, fingerprint: str) -> None:
    ctx.state.phases[outcome.name] = PhaseRecord(outcome.status, round(outcome.seconds, 1), outcome.detail,
                                                 fingerprint)


def _run_recorded(phase: Phase, ctx: PhaseContext, fingerprint: str) -> PhaseOutcome:
    """Run one phase with its record saved first as `running`: a run killed in the middle leaves it so, and the
    next `up` resumes there, not after it."""
    if phase.undoes:
        for name in [n for n, p in PHASES.items() if not p.undoes]:
            ctx.state.phases.pop(name, None)
    ctx.state.phases[phase.name] = PhaseRecord("running", 0.0, "", fingerprint)
    ctx.state.save(ctx.cluster)
    outcome = _run_one(phase, ctx)
    _record(ctx, outcome, fingerprint)
    ctx.state.save(ctx.cluster)
    return outcome


def run_phases(phases: Sequence[Phase], ctx: PhaseContext) -> PipelineResult:
    """Run phases in order, stopping at the first failure; every outcome (and its time, and the fingerprint of
    the inputs) is recorded in the cluster's state so the next run can resume."""
    outcomes: list[PhaseOutcome] = []
    planned = [p.name for p in phases]
    fingerprint = inputs_fingerprint(ctx.cluster, ctx.settings, ctx.nodes)
    error: BootstrapError | None = None
    try:
        for index, phase in enumerate(phases):
            for need in phase.needs:
                provider = _providers().get(need)
                if _satisfied(need, ctx) or provider is None or provider.name in planned[:index]:
                    continue
                if not provider.read_only:
                    raise InputError(f"phase {phase.name} needs what phase {provider.name} makes ({need}), and it has "
                                     f"not run for this cluster: run `bootstrap up --from {provider.name}`")
                ctx.say(f"{phase.name} needs {need}: running {provider.name} first")
                outcome = _run_recorded(provider, ctx, fingerprint)
                outcomes.append(outcome)
                if outcome.error:
                    raise outcome.error
            ctx.say(f"{phase.name}: {phase.title}")
            outcome = _run_recorded(phase, ctx, fingerprint)
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
