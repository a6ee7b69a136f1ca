"""`bootstrap up`: every phase in order, a live view while they run, a summary table of phases and times; with
--dry-run, the plan alone."""
from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Annotated, Any

import typer

from provision.cli import complete
from provision.cli.option_table import checked, options_of
from provision.cli.options import NodeOptions, Output, OutputOption, node_options
from provision.errors import InputError
from provision.inputs.workflows import UP_PHASES

if TYPE_CHECKING:
    from provision.phases import PhaseContext
    from provision.phases.dry_run import UpPlan

OPTIONS = options_of("up")


def run_up_command(nodes: NodeOptions, *, from_phase: str | None = None, only: str | None = None,
                   merge_kubeconfig: bool = False, context: str | None = None, output: Output = Output.text) -> None:
    from provision.cli.console import console
    from provision.cli.support import load_inputs, run_pipeline
    from provision.kube import kubeconfig as kubeconfigs

    if context is not None and not merge_kubeconfig:
        raise InputError("--context names the context --merge-kubeconfig writes: add --merge-kubeconfig, "
                         "or leave --context out")  # `lab up` calls this without the command line's check
    cluster, settings = load_inputs(nodes)
    kubeconfig = kubeconfigs.admin_kubeconfig_path(cluster)

    def closing(_ctx: PhaseContext) -> dict[str, Any]:
        return {"kubeconfig": str(kubeconfig) if kubeconfig.exists() else None}

    try:
        run_pipeline(UP_PHASES, cluster, settings, nodes, title=f"bootstrap up: {nodes.inventory}",
                     from_phase=from_phase, only=only, output=output, extra=closing)
    finally:
        # Even after a later phase failed, the operator gets the kubeconfig to look at the cluster with.
        if kubeconfig.exists():
            console.print(f"admin kubeconfig (mode 0600): {kubeconfig}")
            if merge_kubeconfig:
                name = context or kubeconfigs.default_context_name(cluster)
                merged = kubeconfigs.merge_kubeconfig(kubeconfig, name)
                console.print(f"merged into {merged} as context '{name}' (now current)")
            else:
                console.print(f"  export KUBECONFIG={shlex.quote(str(kubeconfig))}   # or re-run with "
                              "--merge-kubeconfig")


def dry_run(nodes: NodeOptions, *, from_phase: str | None, only: str | None, output: Output) -> UpPlan:
    """The plan, printed: nothing is touched, here or on the nodes (the inputs are checked as a run checks them)."""
    from provision.cli.console import echo_json
    from provision.cli.support import load_inputs
    from provision.phases.dry_run import plan_up

    cluster, settings = load_inputs(nodes)
    plan = plan_up(cluster, settings, UP_PHASES, from_phase=from_phase, only=only)
    if output is Output.json:
        echo_json({"inventory": str(nodes.inventory),
                   "nodes": [{"name": n.name, "role": n.role, "address": n.address, "gpu": n.gpu}
                             for n in cluster.nodes]} | plan.as_dict())
        return plan
    lines = [f"bootstrap up --dry-run: {len(cluster.nodes)} nodes ({', '.join(n.name for n in cluster.nodes)}), "
             f"Kubernetes {settings.kubernetes.version}; nothing was touched"]
    if plan.resume_from:
        lines.append(f"resumes at {plan.resume_from}")
    for phase in plan.phases:
        if phase.action == "done":
            lines.append(f"  done  {phase.name}: {phase.reason}")
        elif phase.action == "skip":
            lines.append(f"  skip  {phase.name}: {phase.reason}")
        else:
            lines.append(f"  run   {phase.name}: {phase.title}" + (f" ({phase.playbook})" if phase.playbook else ""))
            for play in phase.plays:
                lines.append(f"          {play.name}: {', '.join(play.nodes)}")
    lines.append("(each play with the nodes it reaches: what it finds done already, it leaves)")
    lines.append("sources it fetches:")
    lines += [f"  {source.name}: {source.url}  ({source.setting})" for source in plan.sources]
    lines += [f"note: {note}" for note in plan.notes]
    typer.echo("\n".join(lines))
    return plan


def register(app: typer.Typer) -> None:
    @app.command("up")
    @checked("up")
    @node_options
    def up(
        nodes: NodeOptions,
        from_phase: Annotated[str | None, OPTIONS.option(
            "--from", help=f"Resume from this phase ({', '.join(UP_PHASES)}).", show_default=False,
            autocompletion=complete.phases)] = None,
        only: Annotated[str | None, OPTIONS.option("--only", help="Run this one phase only.", show_default=False,
                                                   autocompletion=complete.phases)] = None,
        merge_kubeconfig: Annotated[bool, OPTIONS.option(
            "--merge-kubeconfig", help="Also merge the admin kubeconfig into ~/.kube/config (the context becomes "
                                       "current).")] = False,
        context: Annotated[str | None, OPTIONS.option(
            "--context", help="Context name for --merge-kubeconfig (default: bootstrap-<control plane>).",
            show_default=False)] = None,
        dry: Annotated[bool, OPTIONS.option(
            "--dry-run", help="Print the plan (the phases, the nodes each would change, the sources it would "
                              "fetch) and stop: nothing is touched.")] = False,
        output: OutputOption = Output.text,
    ) -> None:
        """Form the cluster: preflight, prepare, control plane, network, join, GPU, verify, smoke test.

        Every phase is safe to re-run: a failed or killed run, run again, finishes the job, resuming by itself at
        the first phase that did not complete with the same inputs (--from PHASE starts elsewhere).
        """
        if dry:
            dry_run(nodes, from_phase=from_phase, only=only, output=output)
            return
        run_up_command(nodes, from_phase=from_phase, only=only, merge_kubeconfig=merge_kubeconfig, context=context,
                       output=output)
