"""`bootstrap reset [NAMES...]` and `bootstrap down`: drain and delete through the API where it answers,
`kubeadm reset -f`, then every trace a kubeadm cluster leaves on the nodes."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from provision.cli.commands.up import ask_become_password, run_pipeline, with_host_key_choice
from provision.cli.options import (
    AcceptHostKeysOption,
    AskBecomePassOption,
    ConfigOption,
    InventoryOption,
    VerboseOption,
    YesOption,
)
from provision.cli.views import console
from provision.inputs.inventory import Cluster
from provision.inputs.validation import load_cluster
from provision.phases import RESET_PHASES

WHAT_RESET_REMOVES = ("kubeadm reset, /etc/kubernetes, /var/lib/kubelet, /var/lib/etcd, CNI and Calico state, "
                      "KUBE-*/cali-* iptables chains, Calico interfaces")


def forget_local_cluster(cluster: Cluster) -> list[str]:
    """After the control plane is gone: drop this machine's kubeconfig, state and merged context."""
    from provision.inputs.state import forget_cluster
    from provision.kube.kubeconfig import default_context_name, unmerge_kubeconfig

    notes = []
    if unmerge_kubeconfig(default_context_name(cluster)):
        notes.append(f"context '{default_context_name(cluster)}' removed from ~/.kube/config")
    if forget_cluster(cluster):
        notes.append("local kubeconfig and state removed")
    return notes


def reset_nodes(inventory: Path, config: Path | None, names: list[str] | None, *, yes: bool, verbose: bool,
                accept_new_host_keys: bool, ask_become_pass: bool, title: str) -> None:
    cluster, settings = load_cluster(inventory, config)
    settings = with_host_key_choice(settings, accept_new_host_keys)
    targets = tuple(cluster.node(name).name for name in names) if names else tuple(n.name for n in cluster.nodes)
    # Workers first: the control plane answers for their drain until it is reset itself.
    targets = tuple(sorted(targets, key=lambda name: cluster.node(name).is_control_plane))
    if not yes:
        typer.confirm(f"Wipe Kubernetes from {', '.join(targets)} ({WHAT_RESET_REMOVES})?", abort=True)
    run_pipeline(RESET_PHASES, cluster, settings, title=title, nodes=targets, verbose=verbose,
                 become_password=ask_become_password(ask_become_pass))
    if cluster.control_plane.name in targets:
        for note in forget_local_cluster(cluster):
            console.print(note)


def register(app: typer.Typer) -> None:
    @app.command("reset")
    def reset(
        names: Annotated[list[str] | None, typer.Argument(
            help="Nodes to reset (default: every node in the inventory).", show_default=False)] = None,
        inventory: InventoryOption = ...,  # type: ignore[assignment]
        config: ConfigOption = None,
        yes: YesOption = False,
        verbose: VerboseOption = False,
        accept_new_host_keys: AcceptHostKeysOption = False,
        ask_become_pass: AskBecomePassOption = False,
    ) -> None:
        """Take nodes out of the cluster and wipe Kubernetes from them, leaving nothing behind.

        Works on nodes where kubeadm was never installed or the cluster is half built; a second reset changes
        nothing. Asks for confirmation unless --yes.
        """
        reset_nodes(inventory, config, names or None, yes=yes, verbose=verbose,
                    accept_new_host_keys=accept_new_host_keys, ask_become_pass=ask_become_pass,
                    title=f"bootstrap reset: {', '.join(names) if names else 'every node'}")

    @app.command("down")
    def down(
        inventory: InventoryOption,
        config: ConfigOption = None,
        yes: YesOption = False,
        verbose: VerboseOption = False,
        accept_new_host_keys: AcceptHostKeysOption = False,
        ask_become_pass: AskBecomePassOption = False,
    ) -> None:
        """Tear the whole cluster down: every node reset, this machine's kubeconfig and context removed."""
        reset_nodes(inventory, config, None, yes=yes, verbose=verbose, accept_new_host_keys=accept_new_host_keys,
                    ask_become_pass=ask_become_pass, title=f"bootstrap down: {inventory}")
