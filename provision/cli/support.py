"""What the commands that act on nodes share: loading the inputs with the connection choices the options
made, and running phases with the live view, then the summary (a table, or one JSON document)."""
from __future__ import annotations

import getpass
from collections.abc import Callable, Sequence
from typing import Any

from provision.bundle.check import check_offline_bundle
from provision.cli.console import echo_json, warn
from provision.cli.invocation import carry
from provision.cli.options import NodeOptions, Output
from provision.cli.views import PhaseView, console, print_summary
from provision.errors import InputError
from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState, check_state_root, inputs_fingerprint
from provision.inputs.upgrade import settings_behind
from provision.inputs.validation import load_cluster, settings_warnings
from provision.inputs.values import NodeName
from provision.phases import (
    NODE_ADD_PHASES,
    UP_PHASES,
    PhaseContext,
    PipelineResult,
    resume_point,
    run_phases,
    select_phases,
)
from provision.phases.engine import EtcdOptions


def with_host_key_choice(settings: Settings, accept_new_host_keys: bool) -> Settings:
    if not accept_new_host_keys:
        return settings
    return settings.model_copy(update={"ssh": settings.ssh.model_copy(update={"accept_new_host_keys": True})})


def load_inputs(nodes: NodeOptions) -> tuple[Cluster, Settings]:
    """Inventory and settings validated (bad input refused here, before any connection), with the host-key
    choice the options made."""
    check_state_root()
    cluster, settings = load_cluster(nodes.inventory, nodes.config)
    warn([*cluster.warnings, *settings_warnings(settings)])
    # A bundle as offline.source verifies and holds what these settings need, or nothing goes further.
    check_offline_bundle(settings, cluster)
    return cluster, with_host_key_choice(settings, nodes.accept_new_host_keys)


def ask_become_password(ask: bool) -> str | None:
    return getpass.getpass("BECOME (sudo) password: ") if ask else None


def pipeline_document(result: PipelineResult, command: str) -> dict[str, Any]:
    return {
        "command": command,
        "ok": result.ok,
        "phases": [{"name": o.name, "status": o.status, "seconds": round(o.seconds, 1), "detail": o.detail,
                    "nodes": o.nodes} for o in result.outcomes],
        "total_seconds": round(result.total_seconds, 1),
        "error": carry(str(result.error)) if result.error else None,
    }


def new_context(cluster: Cluster, settings: Settings, nodes: NodeOptions, view: PhaseView, *,
                state: ClusterState | None = None, targets: tuple[NodeName, ...] | None = None,
                etcd: EtcdOptions | None = None) -> PhaseContext:
    """A run's context: the cluster's state, the connection choices, the live view's callbacks."""
    return PhaseContext(cluster=cluster, settings=settings, state=state or ClusterState.load(cluster), nodes=targets,
                        verbose=nodes.verbose, become_password=ask_become_password(nodes.ask_become_pass),
                        on_progress=view.playbook, on_message=view.message, on_smoke_progress=view.smoke,
                        etcd=etcd or EtcdOptions())


def show_result(result: PipelineResult, title: str, output: Output, extra: dict[str, Any] | None = None) -> None:
    """The summary: a table on stderr, or the one JSON document on stdout."""
    if output is Output.json:
        echo_json(pipeline_document(result, title) | (extra or {}))
    else:
        print_summary(result, title)


def run_pipeline(phase_names: Sequence[str], cluster: Cluster, settings: Settings, nodes: NodeOptions, *, title: str,
                 from_phase: str | None = None, only: str | None = None, targets: Sequence[str] | None = None,
                 output: Output = Output.text, extra: Callable[[PhaseContext], dict[str, Any]] | None = None,
                 etcd: EtcdOptions | None = None) -> PhaseContext:
    """Run the phases with the live view, then show the summary (table, or JSON on stdout), then raise the
    first failure. `extra`, called with the run's context once the phases are done, adds fields to the JSON
    document; `etcd` is what the etcd commands ask of their phases. `up` without --from or --only resumes by
    itself where the state says the phases before completed with the same inputs."""
    state = ClusterState.load(cluster)
    if tuple(phase_names) in (UP_PHASES, NODE_ADD_PHASES):
        behind = settings_behind(settings, state.kubernetes_version)
        if behind:
            raise InputError(behind)
    view = PhaseView(nodes.verbose)
    # Named by node name or inventory host name on the command line; the phases take node names.
    chosen = tuple(cluster.node(name).name for name in targets) if targets is not None else None
    if tuple(phase_names) == UP_PHASES and from_phase is None and only is None:
        resume = resume_point(UP_PHASES, state, inputs_fingerprint(cluster, settings, chosen))
        if resume is not None:
            from_phase, completed = resume
            view.message(f"resuming at {from_phase}: {', '.join(completed)} completed with these same inputs "
                         f"(--from {UP_PHASES[0]} runs every phase again)")
    phases = select_phases(tuple(phase_names), from_phase=from_phase, only=only)
    ctx = new_context(cluster, settings, nodes, view, state=state, targets=chosen, etcd=etcd)
    try:
        result = run_phases(phases, ctx)
    finally:
        view.stop()
    show_result(result, title, output, extra(ctx) if extra else None)
    if result.error is not None:
        failed = next((o.name for o in result.outcomes if o.status == "failed"), None)
        if failed and tuple(phase_names) == UP_PHASES:
            # As printed, with the inventory, settings and state directory this run was given: the same run.
            console.print(carry(f"fix the cause, then re-run `bootstrap up`: with the same inputs it resumes at "
                                f"{failed} (`--from PHASE` chooses another start)"), style="yellow", soft_wrap=True)
        raise result.error
    return ctx
