"""`bootstrap node add NAME` and `bootstrap node remove NAME`: one worker or control plane joins or leaves a
running cluster (a control plane leaving has its etcd member removed before its machine is reset);
`bootstrap node replace NAME`: a dead or broken control plane (the first one included) drained, its etcd member
removed through a healthy one, and a fresh machine joined in its place (docs/etcd.md)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from provision.cli import complete
from provision.cli.commands.reset import WHAT_RESET_REMOVES, confirm, first_control_plane_problem
from provision.cli.option_table import checked, options_of
from provision.cli.options import NodeOptions, Output, OutputOption, YesOption, node_options
from provision.errors import InputError
from provision.inputs.workflows import NODE_ADD_PHASES

if TYPE_CHECKING:
    from provision.inputs.inventory import Cluster

NameArgument = Annotated[str, options_of("node add").argument(
    "NAME", help="The node's name, as in the inventory.", show_default=False, autocompletion=complete.nodes)]


def _target(cluster: Cluster, name: str, verb: str) -> str:
    node = cluster.node(name)
    if node.name == cluster.control_plane.name:
        if verb == "add":
            raise InputError(f"{cluster.inventory_path}: '{node.name}' is the first control plane; `node add` "
                             "handles the nodes that join it (the first one comes with `bootstrap up`)")
        if len(cluster.control_planes) == 1:
            # Nothing to hand the cluster over to: taking its only control plane out is taking the cluster down.
            raise InputError(f"{cluster.inventory_path}: '{node.name}' is the cluster's only control plane: to take "
                             "the whole cluster down (every node reset), run `bootstrap down`; to "
                             f"{verb} it and keep the cluster, add control planes first (`bootstrap node add NAME`)")
        raise InputError(first_control_plane_problem(cluster))
    return node.name


def register(app: typer.Typer) -> None:
    node_app = typer.Typer(help="Add a worker or control plane to a running cluster, or take one out.",
                           no_args_is_help=True)

    @node_app.command("add")
    @checked("node add")
    @node_options
    def add(nodes: NodeOptions, name: NameArgument, output: OutputOption = Output.text) -> None:
        """Prepare and join a worker or control plane added to the inventory after `up` (preflight, prepare, join,
        GPU, verify)."""
        from provision.cli.support import load_inputs, run_pipeline
        from provision.kube.kubeconfig import admin_kubeconfig_path

        cluster, settings = load_inputs(nodes)
        target = _target(cluster, name, "add")
        if not admin_kubeconfig_path(cluster).exists():
            raise InputError(f"no cluster formed from {nodes.inventory} yet (no admin kubeconfig on this machine): "
                             "run `bootstrap up` first")
        run_pipeline(NODE_ADD_PHASES, cluster, settings, nodes, title=f"bootstrap node add {target}",
                     targets=(target,), output=output)

    @node_app.command("remove")
    @checked("node remove")
    @node_options
    def remove(nodes: NodeOptions, name: NameArgument, yes: YesOption = False,
               output: OutputOption = Output.text) -> None:
        """Drain and delete a node (a control plane: its etcd member removed too), then reset it; remove it from the
        inventory afterwards."""
        from provision.cli.support import load_inputs, run_pipeline
        from provision.phases import RESET_PHASES

        cluster, settings = load_inputs(nodes)
        target = _target(cluster, name, "remove")
        confirm(f"Drain {target}, delete it from the cluster and wipe it ({WHAT_RESET_REMOVES})?", yes)
        run_pipeline(RESET_PHASES, cluster, settings, nodes, title=f"bootstrap node remove {target}",
                     targets=(target,), output=output)

    @node_app.command("replace")
    @checked("node replace")
    @node_options
    def replace(nodes: NodeOptions, name: NameArgument, yes: YesOption = False,
                output: OutputOption = Output.text) -> None:
        """Replace a control plane, the first one included: drained, its etcd member removed through a healthy member
        (the machine may be dead), then the machine the inventory names for it (a fresh one, or the old one wiped)
        joined in its place. With etcd's quorum lost, restore a snapshot onto the control planes left first
        (docs/etcd.md)."""
        from provision.cli.support import load_inputs, run_pipeline
        from provision.phases import REPLACE_REMOVE_PHASES, replace_join_phases
        from provision.phases.engine import EtcdOptions

        cluster, settings = load_inputs(nodes)
        node = cluster.node(name)
        target = node.name
        if node.is_control_plane and len(cluster.control_planes) == 1:
            raise InputError(f"{cluster.inventory_path}: '{target}' is the cluster's only control plane: there is no "
                             "member to replace it through; restore a snapshot onto it (`bootstrap etcd restore`), or "
                             "take the whole cluster down (every node reset) with `bootstrap down`")
        if not node.is_control_plane:
            raise InputError(f"{cluster.inventory_path}: '{target}' is a worker: `node replace` is for control "
                             f"planes; replace a worker with `bootstrap node remove {target}`, then "
                             f"`bootstrap node add {target}`")
        confirm(f"Drain {target}, take its etcd member out of etcd and join the machine at {node.address} in its "
                f"place (a machine that answers is wiped first: {WHAT_RESET_REMOVES})?", yes)
        options = EtcdOptions(replace=target)
        # Two runs: how the machine joins depends on what the first found. Their summaries go to stderr; with
        # --output json, stdout carries the second's document, the first's outcomes under `etcd_member`.
        first = run_pipeline(REPLACE_REMOVE_PHASES, cluster, settings, nodes, title=f"bootstrap node replace "
                             f"{target}: etcd member", targets=(target,), etcd=options)
        assert first.results.etcd is not None
        removal = {name: first.state.phases[name].detail for name in REPLACE_REMOVE_PHASES
                   if name in first.state.phases}
        run_pipeline(replace_join_phases(first.results.etcd, node), cluster, settings, nodes,
                     title=f"bootstrap node replace {target}: join", targets=(target,), output=output, etcd=options,
                     extra=lambda _ctx: {"etcd_member": removal})

    app.add_typer(node_app, name="node")
