"""`bootstrap up`: every phase in order, a live view while they run, a summary table of phases and times."""
from __future__ import annotations

import shlex
from typing import Annotated, Any

import typer

from provision.cli.option_table import checked, options_of
from provision.cli.options import NodeOptions, Output, OutputOption, node_options
from provision.cli.support import load_inputs, run_pipeline
from provision.cli.views import console
from provision.errors import InputError
from provision.kube import kubeconfig as kubeconfigs
from provision.phases import UP_PHASES, PhaseContext

OPTIONS = options_of("up")


def run_up_command(nodes: NodeOptions, *, from_phase: str | None = None, only: str | None = None,
                   merge_kubeconfig: bool = False, context: str | None = None, output: Output = Output.text) -> None:
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
            console.print(f"admin kubeconfig (mode 0600): {kubeconfig}", soft_wrap=True)
            if merge_kubeconfig:
                name = context or kubeconfigs.default_context_name(cluster)
                merged = kubeconfigs.merge_kubeconfig(kubeconfig, name)
                console.print(f"merged into {merged} as context '{name}' (now current)", soft_wrap=True)
            else:
                console.print(f"  export KUBECONFIG={shlex.quote(str(kubeconfig))}   # or re-run with "
                              "--merge-kubeconfig", soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command("up")
    @checked("up")
    @node_options
    def up(
        nodes: NodeOptions,
        from_phase: Annotated[str | None, OPTIONS.option(
            "--from", help=f"Resume from this phase ({', '.join(UP_PHASES)}).", show_default=False)] = None,
        only: Annotated[str | None, OPTIONS.option("--only", help="Run this one phase only.", show_default=False)] = None,
        merge_kubeconfig: Annotated[bool, OPTIONS.option(
            "--merge-kubeconfig", help="Also merge the admin kubeconfig into ~/.kube/config (the context becomes "
                                       "current).")] = False,
        context: Annotated[str | None, OPTIONS.option(
            "--context", help="Context name for --merge-kubeconfig (default: bootstrap-<control plane>).",
            show_default=False)] = None,
        output: OutputOption = Output.text,
    ) -> None:
        """Form the cluster: preflight, prepare, control plane, network, join, GPU, verify, smoke test.

        Every phase is safe to re-run: a failed or killed run, run again, finishes the job, resuming by itself at
        the first phase that did not complete with the same inputs (--from PHASE starts elsewhere).
        """
        run_up_command(nodes, from_phase=from_phase, only=only, merge_kubeconfig=merge_kubeconfig, context=context,
                       output=output)
