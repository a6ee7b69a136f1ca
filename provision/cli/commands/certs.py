"""`bootstrap certs check` and `bootstrap certs renew`: the certificates kubeadm manages on each control plane, with
their expiry (a table, or JSON), and their renewal one control plane at a time with the static pods restarted and the
admin kubeconfig here refreshed."""
from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from provision.cli.option_table import checked
from provision.cli.options import NodeOptions, Output, OutputOption, YesOption, node_options
from provision.errors import InputError

if TYPE_CHECKING:
    from provision.nodes.certs import CertsReport

STYLE = {"ok": "green", "warn": "bold yellow", "expired": "bold red", "unreadable": "bold red"}


def print_certs(report: CertsReport) -> None:
    from rich.table import Table
    from rich.text import Text

    from provision.cli.console import console

    table = Table(title=f"certificates (warned below {report.renew_before_days} days)", title_justify="left", box=None,
                  pad_edge=False, header_style="bold")
    for column in ("node", "certificate", "kind", "expires", "days left", "status"):
        table.add_column(column, justify="right" if column == "days left" else "left")
    for row in report.rows:
        table.add_row(row.node, row.name, row.kind, f"{row.not_after:%Y-%m-%d %H:%M} UTC" if row.not_after else "-",
                      "-" if row.days_left is None else str(row.days_left), Text(row.status, style=STYLE[row.status]))
    console.print(table)


def _run(nodes: NodeOptions, phase_names: tuple[str, ...], title: str, output: Output, *,
         question: str | None = None) -> None:
    """The phases, once the inputs are judged and (`question`) the user said yes: a refused command asks nothing."""
    from provision.cli.support import load_inputs, new_context, show_result
    from provision.cli.views import PhaseView
    from provision.kube.kubeconfig import admin_kubeconfig_path
    from provision.phases import PHASES, run_phases

    cluster, settings = load_inputs(nodes)
    if not admin_kubeconfig_path(cluster).exists():
        raise InputError(f"no cluster formed from {nodes.inventory} on this machine (no admin kubeconfig): "
                         "`bootstrap up` forms one")
    if question is not None:
        typer.confirm(question, abort=True, err=True)
    view = PhaseView(nodes.verbose)
    ctx = new_context(cluster, settings, nodes, view)
    try:
        result = run_phases([PHASES[name] for name in phase_names], ctx)
    finally:
        view.stop()
    report = ctx.results.certs
    if output is Output.text and report is not None:
        print_certs(report)
    show_result(result, title, output, {"certificates": report.as_dict() if report else None})
    if result.error is not None:
        raise result.error


def register(app: typer.Typer) -> None:
    certs_app = typer.Typer(help="kubeadm's certificates on the control planes: their expiry, and their renewal.",
                            no_args_is_help=True)

    @certs_app.command("check")
    @checked("certs check")
    @node_options
    def check(nodes: NodeOptions, output: OutputOption = Output.text) -> None:
        """Every certificate and kubeconfig kubeadm manages on each control plane, with its expiry, and the admin
        kubeconfig on this machine; exits 1 naming the first one expired or expiring within
        certificates.renew_before_days (30)."""
        from provision.phases import CERTS_CHECK_PHASES

        _run(nodes, CERTS_CHECK_PHASES, f"bootstrap certs check: {nodes.inventory}", output)

    @certs_app.command("renew")
    @checked("certs renew")
    @node_options
    def renew(nodes: NodeOptions, yes: YesOption = False, output: OutputOption = Output.text) -> None:
        """kubeadm certs renew all on each control plane, one at a time, its control-plane static pods restarted to
        load the new certificates; then the admin kubeconfig here refreshed and every expiry shown again."""
        from provision.phases import CERTS_RENEW_PHASES

        _run(nodes, CERTS_RENEW_PHASES, f"bootstrap certs renew: {nodes.inventory}", output,
             question=None if yes else "Renew kubeadm's certificates and restart the control-plane static pods, one "
                                       "control plane at a time?")

    app.add_typer(certs_app, name="certs")
