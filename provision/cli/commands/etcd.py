"""`bootstrap etcd snapshot`: a snapshot of the cluster's etcd, taken on a healthy control plane, checked, copied
to this machine and checked again (docs/etcd.md)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from provision.cli.options import NodeOptions, Output, OutputOption, node_options
from provision.cli.support import load_inputs, run_pipeline
from provision.cli.views import console
from provision.phases import ETCD_SNAPSHOT_PHASES, PhaseContext
from provision.phases.engine import EtcdOptions


def _snapshot_document(ctx: PhaseContext) -> dict[str, Any]:
    snapshot = ctx.results.etcd_snapshot
    return {"snapshot": snapshot.summary() if snapshot else None}


def register(app: typer.Typer) -> None:
    etcd_app = typer.Typer(help="Snapshots of the cluster's etcd, and restoring one.", no_args_is_help=True)

    @etcd_app.command("snapshot")
    @node_options
    def snapshot(
        nodes: NodeOptions,
        directory: Annotated[Path | None, typer.Option(
            "--dir", help="Where the snapshot goes (default: the cluster's state directory on this machine).",
            show_default=False)] = None,
        output: OutputOption = Output.text,
    ) -> None:
        """Take a snapshot of etcd on a healthy control plane, check it (revision, keys, hash), keep it among the
        node's last etcd.snapshot_keep, copy it here and check the copy; here too the last etcd.snapshot_keep are
        kept. The snapshot holds every Secret of the cluster: it is written readable by you only."""
        cluster, settings = load_inputs(nodes)
        ctx = run_pipeline(ETCD_SNAPSHOT_PHASES, cluster, settings, nodes, title="bootstrap etcd snapshot",
                           output=output, extra=_snapshot_document,
                           etcd=EtcdOptions(snapshot_dir=directory.expanduser().absolute() if directory else None))
        taken = ctx.results.etcd_snapshot
        if taken is not None and output is Output.text:
            console.print(f"snapshot: {taken.path}", soft_wrap=True)

    app.add_typer(etcd_app, name="etcd")
