"""`bootstrap preflight`: check every node over SSH and show one table row per node, problems below it."""
from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from provision.cli.invocation import carry
from provision.cli.option_table import checked
from provision.cli.options import NodeOptions, Output, OutputOption, node_options
from provision.errors import BootstrapError
from provision.inputs.platforms import supported_text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from provision.nodes.preflight.run import PreflightNode, PreflightReport

# The supported systems are the platform table's (provision/inputs/platforms.py, docs/os-support.md).
HELP = f"""Run the pre-flight checks on every node in the inventory, without changing anything.

Each node is reached over SSH (host keys checked against ssh.known_hosts_file) and checked, all nodes in
parallel: sudo without a prompt, a supported OS ({supported_text()}), at least 2 CPUs and 1700 MB of memory
on the control plane, a hostname, product_uuid and MAC address no other node has, the Kubernetes ports free,
a clock within 30 s of this machine's, swap and SELinux (which prepare will change), NVIDIA GPUs with their
driver, and the rules between the node and the versions chosen: containerd 2 for Kubernetes 1.36+ (the one
installed, or the one prepare would install), cgroup v2 from 1.35, Linux 5.13+ for kube-proxy's nftables
mode, each GPU generation against the driver branch and an explicit smoke-test image's CUDA. Failures block
`bootstrap up` and are listed with their fix under the table; warnings do not block.

\b
Example:
    bootstrap preflight --inventory hosts.ini --config cluster.yaml
"""


# kubectl's shape: a few columns, one row per node, within 80 columns (NODE and OS cut short past their widths);
# what is wrong, and the fix, in lines below the table (all of it in -o json).
COLUMNS = {"NODE": 24, "ROLE": 13, "STATUS": 8, "OS": 22, "GPUS": 4}


def _status(node: PreflightNode) -> Text:
    from rich.text import Text

    from provision.cli.findings import MARK, STYLE

    problems = sum(f.status != "ok" for f in node.findings)
    text = MARK[node.status] + (f" ({problems})" if problems > 1 else "")
    return Text(text, style=STYLE[node.status])


def row(node: PreflightNode) -> list[Text | str]:
    """One node's row: the facts an operator scans for (its problems are listed under the table)."""
    os_name = node.finding("os")
    probed = node.finding("gpu") is not None
    return [node.name, node.role.replace("_", "-"), _status(node), os_name.detail if os_name else "-",
            str(node.gpu_count) if probed else "-"]


def render(report: PreflightReport, console: Console) -> None:
    from rich.table import Table

    from provision.cli.findings import render_findings

    console.print(f"preflight: {len(report.nodes)} nodes in {report.elapsed_s:.1f} s", style="bold")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column, width in COLUMNS.items():
        table.add_column(column, no_wrap=True, overflow="ellipsis", max_width=width)
    for node in report.nodes:
        table.add_row(*row(node))
    console.print(table)
    render_findings(report.findings, console, every=[n.name for n in report.nodes])


def report_document(report: PreflightReport) -> dict[str, object]:
    from provision.cli.findings import groups_document

    return {
        "ok": report.ok,
        "elapsed_s": round(report.elapsed_s, 1),
        "nodes": [{"name": n.name, "role": n.role, "address": n.address, "status": n.status, "gpus": n.gpu_count,
                   "checks": [{"name": f.check, "status": f.status, "detail": f.detail, "fix": f.fix}
                              for f in n.findings]} for n in report.nodes],
        "blocking": [carry(p.describe()) for p in report.blocking],
        "warnings": [carry(p.describe()) for p in report.warnings],
        # Each problem once, with every node it holds for.
        "problems": groups_document(report.findings),
    }


def run_preflight_command(nodes: NodeOptions, output: Output = Output.text) -> PreflightReport:
    from provision.cli.console import console as progress_console
    from provision.cli.console import literal_console
    from provision.cli.support import ask_become_password, echo_json, load_inputs
    from provision.nodes.preflight.run import run_preflight

    cluster, settings = load_inputs(nodes)
    become_password = ask_become_password(nodes.ask_become_pass)
    with progress_console.status(f"checking {len(cluster.nodes)} nodes ..."):
        report = run_preflight(cluster, settings, become_password=become_password)
    if output is Output.json:
        echo_json(report_document(report))
    else:
        render(report, literal_console())
    if report.blocking:
        count = len(report.blocking)
        raise BootstrapError(f"preflight: {count} blocking problem{'s' if count > 1 else ''} (fixes listed above); "
                             "fix them and run `bootstrap preflight` again")
    return report


def register(app: typer.Typer) -> None:
    @app.command("preflight", help=HELP)
    @checked("preflight")
    @node_options
    def preflight(nodes: NodeOptions, output: OutputOption = Output.text) -> None:
        run_preflight_command(nodes, output)
