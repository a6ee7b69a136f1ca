"""`bootstrap node add NAME` and `bootstrap node remove NAME`: one worker joins or leaves a running cluster."""
from __future__ import annotations

from typing import Annotated

import typer

from provision.cli.commands.reset import WHAT_RESET_REMOVES
from provision.cli.commands.up import ask_become_password, run_pipeline, with_host_key_choice
from provision.cli.options import (
    AcceptHostKeysOption,
    AskBecomePassOption,
    ConfigOption,
    InventoryOption,
    VerboseOption,
    YesOption,
)
from provision.errors import InputError
from provision.inputs.inventory import Cluster
from provision.inputs.validation import load_cluster
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
    def add(
        name: NameArgument,
        inventory: InventoryOption,
        config: ConfigOption = None,
        verbose: VerboseOption = False,
        accept_new_host_keys: AcceptHostKeysOption = False,
        ask_become_pass: AskBecomePassOption = False,
    ) -> None:
        """Prepare and join a worker added to the inventory after `up` (preflight, prepare, join, GPU, verify)."""
        from provision.kube.kubeconfig import admin_kubeconfig_path

        cluster, settings = load_cluster(inventory, config)
        target = _worker(cluster, name, "add")
        if not admin_kubeconfig_path(cluster).exists():
            raise InputError(f"no cluster formed from {inventory} yet (no admin kubeconfig on this machine): "
                             "run `bootstrap up` first")
        run_pipeline(NODE_ADD_PHASES, cluster, with_host_key_choice(settings, accept_new_host_keys),
                     title=f"bootstrap node add {target}", nodes=(target,), verbose=verbose,
                     become_password=ask_become_password(ask_become_pass))

    @node_app.command("remove")
    def remove(
        name: NameArgument,
        inventory: InventoryOption,
        config: ConfigOption = None,
        yes: YesOption = False,
        verbose: VerboseOption = False,
        accept_new_host_keys: AcceptHostKeysOption = False,
        ask_become_pass: AskBecomePassOption = False,
    ) -> None:
        """Drain and delete a worker, then reset it; remove it from the inventory afterwards."""
        cluster, settings = load_cluster(inventory, config)
        target = _worker(cluster, name, "remove")
        if not yes:
            typer.confirm(f"Drain {target}, delete it from the cluster and wipe it ({WHAT_RESET_REMOVES})?",
                          abort=True)
        run_pipeline(RESET_PHASES, cluster, with_host_key_choice(settings, accept_new_host_keys),
                     title=f"bootstrap node remove {target}", nodes=(target,), verbose=verbose,
                     become_password=ask_become_password(ask_become_pass))

    app.add_typer(node_app, name="node")
