"""`bootstrap support-bundle`: one archive with what a maintainer needs, every secret taken out."""
from __future__ import annotations

import io
import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from provision.cli.option_table import checked, options_of
from provision.cli.options import NodeOptions, node_options

if TYPE_CHECKING:
    from provision.diagnose.bundle import BundleResult

# What the archive holds at most unless the options say otherwise: diagnose/bundle.py's Limits() (named here so that
# `--help` shows them without importing the collector; tests/test_cli_startup.py holds them equal).
DEFAULT_FILE_KIB = 1024
DEFAULT_TOTAL_MIB = 100

HELP = """Collect what a maintainer needs to tell what went wrong into one archive, with every secret removed.

From each node (read over SSH, nothing changed): the journals of the kubelet, containerd, Docker and of what
the tool ran there since boot; the kubeadm, kubelet and containerd configurations; `crictl ps -a` and `crictl
info`; addresses, routes, iptables and nftables rules; os-release, the kernel, the kernel log; `nvidia-smi -q`
where there is one. From the API where it answers: the nodes, the events, kube-system's pods with their
descriptions and logs, and the last smoke test's pods. From this machine: the inventory and settings, the
cluster's state and the last runs' logs (never the admin kubeconfig). And `bootstrap doctor`'s report.

Private keys, tokens, certificate keys, kubeconfig credentials and passwords are replaced by REDACTED before
anything is written. Each file is cut at --max-file-kib, the whole at --max-total-mib; MANIFEST.txt in the
archive lists every file, what was cut, and what could not be collected (an unreachable node, the API down).

\b
Example:
    bootstrap support-bundle --inventory hosts.ini -o support.tar.gz
"""


OPTIONS = options_of("support-bundle")


def summary(result: BundleResult) -> list[str]:
    from provision.diagnose.bundle import MIB, shown_size

    limits = result.limits
    cut = sum(e.cut for e in result.entries)
    lines = [f"wrote {result.path} ({shown_size(result.archive_bytes)}: {len(result.entries)} files, "
             f"{shown_size(result.text_bytes)} of text; {result.redactions} secrets redacted) in "
             f"{result.elapsed_s:.1f} s",
             f"limits: {limits.file_bytes // 1024} KiB per file ({cut} file{'s' if cut != 1 else ''} cut), "
             f"{limits.total_bytes // MIB} MiB in all; MANIFEST.txt in the archive lists each file"]
    if result.missing:
        lines += ["not in the bundle:", *(f"  {line}" for line in result.missing)]
    return lines


def register(app: typer.Typer) -> None:
    @app.command("support-bundle", help=HELP)
    @checked("support-bundle")
    @node_options
    def support_bundle(
        nodes: NodeOptions,
        out: Annotated[Path | None, OPTIONS.option(
            "--out", "-o", metavar="FILE", show_default=False,
            help="The archive to write (default: cluster-bootstrap-support-<time>.tar.gz here); never overwritten.")] = None,
        max_file_kib: Annotated[int, OPTIONS.option(
            "--max-file-kib", help="Each file is cut at this size.")] = DEFAULT_FILE_KIB,
        max_total_mib: Annotated[int, OPTIONS.option(
            "--max-total-mib", help="Files past this total are left out (and listed).")] = DEFAULT_TOTAL_MIB,
    ) -> None:
        from provision.cli.commands.doctor import render, report_document
        from provision.cli.console import console, literal_console
        from provision.cli.support import ask_become_password, load_inputs
        from provision.diagnose.bundle import MIB, Limits, check_output_path, collect_bundle
        from provision.diagnose.doctor import run_doctor
        from provision.kube.kubeconfig import admin_kubeconfig_path

        path = check_output_path((out or Path(f"cluster-bootstrap-support-{datetime.now():%Y%m%d-%H%M%S}.tar.gz"))
                                 .expanduser().absolute())
        cluster, settings = load_inputs(nodes)
        become_password = ask_become_password(nodes.ask_become_pass)
        limits = Limits(file_bytes=max_file_kib * 1024, total_bytes=max_total_mib * MIB)
        with console.status(f"checking and collecting from {len(cluster.nodes)} nodes and the API ..."):
            report = run_doctor(cluster, settings, become_password=become_password)
            text = io.StringIO()
            render(report, literal_console(file=text, width=100))
            reports = {"doctor.txt": text.getvalue(), "doctor.json": json.dumps(report_document(report), indent=2)}
            result = collect_bundle(cluster, settings, path, config=nodes.config,
                                    kubeconfig=admin_kubeconfig_path(cluster), reports=reports,
                                    become_password=become_password, limits=limits)
        for line in summary(result):
            console.print(line, soft_wrap=True)
