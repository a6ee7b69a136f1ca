"""`bootstrap up`: every phase in order, a live view while they run, a summary table of phases and times.

Also the rendering that `reset`, `down` and `node` share (they run the same phases).
"""
from __future__ import annotations

import getpass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from provision.cli.options import (
    AcceptHostKeysOption,
    AskBecomePassOption,
    ConfigOption,
    InventoryOption,
    VerboseOption,
)
from provision.cli.views import console, progress_table
from provision.errors import InputError
from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState
from provision.inputs.validation import load_cluster
from provision.nodes.runner import RunProgress
from provision.phases import UP_PHASES, PhaseContext, PipelineResult, run_phases, select_phases

STATUS_STYLE = {"ok": "green", "failed": "bold red", "skipped": "yellow", "not run": "dim"}


class PhaseView:
    """What the operator sees while phases run: a live table for a playbook or the smoke test, status lines
    for the checks in between. Without a terminal (or with --verbose), plain lines only."""

    def __init__(self, verbose: bool) -> None:
        self.interactive = console.is_terminal and not verbose
        self.live: Live | None = None
        self.last_wait = ""

    def _live(self) -> Live:
        if self.live is None:
            self.live = Live(console=console, refresh_per_second=8, transient=True)
            self.live.start()
        return self.live

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def message(self, text: str) -> None:
        if text.startswith("waiting: "):
            # Repeated on every poll: a transient status line, printed once per change without a terminal.
            if self.interactive:
                self._live().update(Text(text, style="dim"))
            elif text != self.last_wait:
                console.print(f"  {text}", markup=False, soft_wrap=True)
            self.last_wait = text
            return
        self.stop()
        console.print(f"[bold cyan]>[/] {escape(text)}", soft_wrap=True)

    def playbook(self, progress: RunProgress) -> None:
        if self.interactive:
            self._live().update(progress_table(progress))

    def smoke(self, progress: Any) -> None:
        from provision.cli.commands.smoke_test import progress_view

        for line in progress.new_lines:
            (self._live().console if self.interactive else console).print(f"  {line}", markup=False)
        if self.interactive:
            self._live().update(progress_view(progress))


def print_summary(result: PipelineResult, title: str) -> None:
    table = Table(title=title, title_justify="left", box=None, pad_edge=False, header_style="bold")
    table.add_column("phase")
    table.add_column("status")
    table.add_column("time", justify="right")
    table.add_column("detail", overflow="fold")
    for outcome in result.outcomes:
        seconds = f"{outcome.seconds:.1f}s" if outcome.status in ("ok", "failed") else "-"
        detail = outcome.detail if outcome.status != "failed" else "see the error below"
        table.add_row(outcome.name, Text(outcome.status, style=STATUS_STYLE[outcome.status]), seconds, Text(detail))
    table.add_row("total", "", f"{result.total_seconds:.1f}s", "", style="bold")
    console.print(table)


def with_host_key_choice(settings: Settings, accept_new_host_keys: bool) -> Settings:
    if not accept_new_host_keys:
        return settings
    return settings.model_copy(update={"ssh": settings.ssh.model_copy(update={"accept_new_host_keys": True})})


def ask_become_password(ask: bool) -> str | None:
    return getpass.getpass("BECOME (sudo) password: ") if ask else None


def run_pipeline(phase_names: tuple[str, ...], cluster: Cluster, settings: Settings, *, title: str,
                 from_phase: str | None = None, only: str | None = None, nodes: tuple[str, ...] | None = None,
                 verbose: bool = False, become_password: str | None = None) -> PhaseContext:
    """Run the phases with the live view, print the summary table, raise the first failure."""
    phases = select_phases(phase_names, from_phase=from_phase, only=only)
    view = PhaseView(verbose)
    ctx = PhaseContext(cluster=cluster, settings=settings, state=ClusterState.load(cluster), nodes=nodes,
                       verbose=verbose, become_password=become_password, on_progress=view.playbook,
                       on_message=view.message, on_smoke_progress=view.smoke)
    try:
        result = run_phases(phases, ctx)
    finally:
        view.stop()
    print_summary(result, title)
    if result.error is not None:
        failed = next((o.name for o in result.outcomes if o.status == "failed"), None)
        if failed and phase_names == UP_PHASES:
            console.print(f"fix the cause, then re-run `bootstrap up --inventory {cluster.inventory_path}` "
                          f"(or resume with `--from {failed}`)", style="yellow", soft_wrap=True)
        raise result.error
    return ctx


def run_up_command(inventory: Path, config: Path | None, *, from_phase: str | None = None, only: str | None = None,
                   verbose: bool = False, accept_new_host_keys: bool = False, ask_become_pass: bool = False,
                   merge_kubeconfig: bool = False, context: str | None = None) -> None:
    from provision.kube import kubeconfig as kubeconfigs

    if context is not None and not merge_kubeconfig:
        raise InputError("--context names the context --merge-kubeconfig writes: add --merge-kubeconfig, "
                         "or leave --context out")
    cluster, settings = load_cluster(inventory, config)
    settings = with_host_key_choice(settings, accept_new_host_keys)
    try:
        run_pipeline(UP_PHASES, cluster, settings, title=f"bootstrap up: {inventory}", from_phase=from_phase,
                     only=only, verbose=verbose, become_password=ask_become_password(ask_become_pass))
    finally:
        # Even after a later phase failed, the operator gets the kubeconfig to look at the cluster with.
        kubeconfig = kubeconfigs.admin_kubeconfig_path(cluster)
        if kubeconfig.exists():
            console.print(f"admin kubeconfig (mode 0600): {kubeconfig}", soft_wrap=True)
            if merge_kubeconfig:
                name = context or kubeconfigs.default_context_name(cluster)
                merged = kubeconfigs.merge_kubeconfig(kubeconfig, name)
                console.print(f"merged into {merged} as context '{name}' (now current)", soft_wrap=True)
            else:
                console.print(f"  export KUBECONFIG={kubeconfig}   # or re-run with --merge-kubeconfig",
                              soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command("up")
    def up(
        inventory: InventoryOption,
        config: ConfigOption = None,
        from_phase: Annotated[str | None, typer.Option(
            "--from", help=f"Resume from this phase ({', '.join(UP_PHASES)}).", show_default=False)] = None,
        only: Annotated[str | None, typer.Option(help="Run this one phase only.", show_default=False)] = None,
        merge_kubeconfig: Annotated[bool, typer.Option(
            "--merge-kubeconfig", help="Also merge the admin kubeconfig into ~/.kube/config (the context becomes "
                                       "current).")] = False,
        context: Annotated[str | None, typer.Option(
            help="Context name for --merge-kubeconfig (default: bootstrap-<control plane>).",
            show_default=False)] = None,
        verbose: VerboseOption = False,
        accept_new_host_keys: AcceptHostKeysOption = False,
        ask_become_pass: AskBecomePassOption = False,
    ) -> None:
        """Form the cluster: preflight, prepare, control plane, network, join, GPU, verify, smoke test.

        Every phase is safe to re-run: a failed run, run again, finishes the job.
        """
        run_up_command(inventory, config, from_phase=from_phase, only=only, verbose=verbose,
                       accept_new_host_keys=accept_new_host_keys, ask_become_pass=ask_become_pass,
                       merge_kubeconfig=merge_kubeconfig, context=context)
