"""`bootstrap doctor`: what is wrong with a running cluster and the fix, from every node and from the API."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from provision.cli.invocation import carry
from provision.cli.option_table import checked
from provision.cli.options import NodeOptions, Output, OutputOption, node_options
from provision.errors import BootstrapError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from provision.diagnose.doctor import DoctorReport
    from provision.findings import Finding

HELP = """Find what is wrong on a running cluster, without changing anything, and say the fix.

Every node is probed over SSH in parallel (one connection and one read-only command each): swap, the clock
against the other nodes, the hostname and /etc/hosts against the inventory, the firewall against the ports
kubeadm and Calico need, SELinux, containerd's effective configuration against what prepare wrote, the kubelet
(running, or its last journal lines), disk and inode use under /var/lib/{containerd,kubelet,etcd}, the node's
DNS resolver, certificate expiry, the GPUs (driver loaded, nvidia-smi answering, Xid errors) and the Kubernetes
package repository reached from the node. Through the API (the admin kubeconfig `up` left): nodes NotReady
and why, kube-system pods not running and why, etcd's members and quorum, cluster DNS, and on GPU nodes the
device plugin and nvidia.com/gpu against the GPUs preflight counted. A check that cannot run (no API yet, a node
unreachable) says so; the others run all the same.

Exit code: 0 healthy, 1 problems found (listed with their fixes), 2 bad input.

\b
Example:
    bootstrap doctor --inventory hosts.ini --config cluster.yaml
    bootstrap doctor -i hosts.ini -o json        # every check, and the problems grouped, as one JSON document
"""

COLUMNS = {"NODE": 24, "ROLE": 13, "STATUS": 9, "CHECKS": 28}
API_ROW = "(API)"


def _status(findings: list[Finding]) -> Text:
    from rich.text import Text

    from provision.cli.findings import MARK, STYLE
    from provision.findings import worst

    status = worst(f.status for f in findings)
    problems = sum(f.problem for f in findings)
    return Text(MARK[status] + (f" ({problems})" if problems > 1 else ""), style=STYLE[status])


def _counts(findings: list[Finding]) -> str:
    ok = sum(f.status == "ok" for f in findings)
    problems = sum(f.problem for f in findings)
    skipped = sum(f.status == "skip" for f in findings)
    parts = [f"{ok} ok"] + ([f"{problems} problem{'s' if problems > 1 else ''}"] if problems else []) + \
        ([f"{skipped} not run"] if skipped else [])
    return ", ".join(parts)


def render(report: DoctorReport, console: Console) -> None:
    from rich.table import Table

    from provision.cli.findings import render_findings

    """A row per node and one for the API, within 80 columns; each problem once below, with every node it holds
    for and its fix."""
    count = len(report.nodes)
    console.print(f"doctor: {count} node{'s' if count != 1 else ''} and the API in {report.elapsed_s:.1f} s",
                  style="bold")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column, width in COLUMNS.items():
        table.add_column(column, no_wrap=True, overflow="ellipsis", max_width=width)
    for node in report.nodes:
        # What the API says of a node counts on its row.
        findings = list(node.findings) + [f for f in report.cluster if f.subject == node.name]
        table.add_row(node.name, node.role.replace("_", "-"), _status(findings),
                      _counts(findings) if node.probed else "unreachable")
    whole = [f for f in report.cluster if f.subject not in {n.name for n in report.nodes}]
    api = next((f for f in whole if f.check == "api"), None)
    shown = {"skip": "not checked", "fail": "does not answer"}.get(api.status if api else "ok") or _counts(whole)
    table.add_row(API_ROW, "-", _status(whole), shown)
    console.print(table)
    render_findings(report.findings, console, every=[n.name for n in report.nodes])


def _checks(findings: tuple[Finding, ...] | list[Finding]) -> list[dict[str, str]]:
    return [{"check": f.check, "subject": f.subject, "status": f.status, "detail": carry(f.detail),
             "fix": carry(f.fix)} for f in findings]


def report_document(report: DoctorReport) -> dict[str, Any]:
    from provision.cli.findings import groups_document

    return {
        "healthy": report.healthy,
        "elapsed_s": round(report.elapsed_s, 1),
        "api_server": report.api_server,
        "nodes": [{"name": n.name, "role": n.role, "address": n.address, "probed": n.probed, "gpus": n.gpus,
                   "probe_s": round(n.probe_s, 2), "checks": _checks(n.findings)} for n in report.nodes],
        "cluster": _checks(report.cluster),
        # Each problem once, with every node it holds for.
        "problems": groups_document(report.findings),
    }


def problems_error(report: DoctorReport) -> BootstrapError:
    problems = report.problems
    subjects = {f.subject for f in problems}
    where = [name for name in (n.name for n in report.nodes) if name in subjects]
    where += ["the cluster"] if subjects - set(where) else []
    return BootstrapError(f"doctor: {len(problems)} problem{'s' if len(problems) > 1 else ''} on "
                          f"{', '.join(where)} (fixes listed above); fix them and run `bootstrap doctor` again")


def doctor_report(nodes: NodeOptions, *, probe_dns: bool = False) -> DoctorReport:
    from provision.cli.console import console as progress_console
    from provision.cli.support import ask_become_password, load_inputs
    from provision.diagnose.doctor import run_doctor

    cluster, settings = load_inputs(nodes)
    become_password = ask_become_password(nodes.ask_become_pass)
    with progress_console.status(f"checking {len(cluster.nodes)} nodes and the API ..."):
        return run_doctor(cluster, settings, become_password=become_password, probe_dns=probe_dns)


def register(app: typer.Typer) -> None:
    @app.command("doctor", help=HELP)
    @checked("doctor")
    @node_options
    def doctor(nodes: NodeOptions, output: OutputOption = Output.text, probe_dns: Annotated[bool, typer.Option(
            "--probe-dns", help="Also resolve the API server's name from a one-shot pod (created in kube-system and "
                                "deleted: the one thing the doctor then changes).")] = False) -> None:
        from provision.cli.console import echo_json, literal_console

        report = doctor_report(nodes, probe_dns=probe_dns)
        if output is Output.json:
            echo_json(report_document(report))
        else:
            render(report, literal_console())
        if not report.healthy:
            raise problems_error(report)
