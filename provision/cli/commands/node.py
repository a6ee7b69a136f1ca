"""`bootstrap node add NAME` and `bootstrap node remove NAME`: one worker joins or leaves a running cluster."""
from __future__ import annotations

from typing import Annotated

import typer

from provision.cli.commands.reset import WHAT_RESET_REMOVES, confirm
from provision.cli.options import NodeOptions, Output, OutputOption, YesOption, node_options
from provision.cli.support import load_inputs, run_pipeline
from provision.errors import InputError
from provision.inputs.inventory import Cluster
from provision.phases import NODE_ADD_PHASES, RESET_PHASES

NameArgument = Annotated[str, typer.Argument(help="The node's name, as in the inventory.", show_default=False)]


def _worker(cluster: Cluster, name: str, verb: str) -> str:
    node = cluster.node(name)
    if node.is_control_plane:
        raise InputError(f"{cluster.inventory_path}: '{name}' is the control plane; `node {verb}` handles workers "
                         "(the control plane comes with `bootstrap up` and goes with `bootstrap down`)")
    return node.name


def register(app: typer.Typer) -> None:
    node_app = typer.Typer(help="Add a worker to a running cluster, or take one out.", no_args_is_help=True)

    @node_app.command("add")
    @node_options
    def add(nodes: NodeOptions, name: NameArgument, output: OutputOption = Output.text) -> None:
        """Prepare and join a worker added to the inventory after `up` (preflight, prepare, join, GPU, verify)."""
        from provision.kube.kubeconfig import admin_kubeconfig_path

        cluster, settings = load_inputs(nodes)
        target = _worker(cluster, name, "add")
        if not admin_kubeconfig_path(cluster).exists():
            raise InputError(f"no cluster formed from {nodes.inventory} yet (no admin kubeconfig on this machine): "
                             "run `bootstrap up` first")
        run_pipeline(NODE_ADD_PHASES, cluster, settings, nodes, title=f"bootstrap node add {target}",
                     targets=(target,), output=output)

    @node_app.command("remove")
    @node_options
    def remove(nodes: NodeOptions, name: NameArgument, yes: YesOption = False,
               output: OutputOption = Output.text) -> None:
        """Drain and delete a worker, then reset it; remove it from the inventory afterwards."""
        cluster, settings = load_inputs(nodes)
        target = _worker(cluster, name, "remove")
        confirm(f"Drain {target}, delete it from the cluster and wipe it ({WHAT_RESET_REMOVES})?", yes)
        run_pipeline(RESET_PHASES, cluster, settings, nodes, title=f"bootstrap node remove {target}",
                     targets=(target,), output=output)

    app.add_typer(node_app, name="node")
