"""`bootstrap reset [NAMES...]` and `bootstrap down`: drain and delete through the API where it answers,
`kubeadm reset -f`, then every trace a kubeadm cluster leaves on the nodes."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from provision.cli import complete
from provision.cli.option_table import checked, options_of
from provision.cli.options import NodeOptions, Output, OutputOption, YesOption, node_options
from provision.errors import InputError

if TYPE_CHECKING:
    from provision.inputs.inventory import Cluster

WHAT_RESET_REMOVES = ("kubeadm reset (a control plane's etcd member removed first), /etc/kubernetes with kube-vip and "
                      "the local API proxy, /var/lib/kubelet, /var/lib/etcd, CNI and Calico state, KUBE-*/cali-* "
                      "iptables chains, Calico interfaces, the VIP, the smoke test's data cache")


def forget_local_cluster(cluster: Cluster) -> list[str]:
    """After the control plane is gone: drop this machine's kubeconfig, state and merged context."""
    from provision.inputs.state import forget_cluster
    from provision.kube.kubeconfig import default_context_name, unmerge_kubeconfig
    from provision.nodes.etcd.snapshot import default_directory, local_snapshots

    notes = []
    if unmerge_kubeconfig(default_context_name(cluster)):
        notes.append(f"context '{default_context_name(cluster)}' removed from ~/.kube/config")
    if forget_cluster(cluster):
        notes.append("local kubeconfig and state removed")
    kept = local_snapshots(default_directory(cluster))
    if kept:
        notes.append(f"{len(kept)} etcd snapshot{'s' if len(kept) > 1 else ''} kept in {default_directory(cluster)}")
    return notes


def confirm(question: str, yes: bool) -> None:
    """Ask on stderr (stdout may carry a JSON document); --yes answers for the user."""
    if not yes:
        typer.confirm(question, abort=True, err=True)


def first_control_plane_problem(cluster: Cluster) -> str:
    name = cluster.control_plane.name
    return (f"{cluster.inventory_path}: '{name}' is the first control plane (joins are minted there, and this machine "
            "keeps the cluster's state under its name) and other control planes stay: list another control plane "
            "first in the inventory, run `bootstrap up --only control_plane` (it takes over), then remove "
            f"'{name}'; or take the whole cluster down")


def reset_nodes(nodes: NodeOptions, names: list[str] | None, *, yes: bool, title: str, output: Output) -> None:
    from provision.cli.console import console
    from provision.cli.support import load_inputs, run_pipeline
    from provision.phases import RESET_PHASES

    cluster, settings = load_inputs(nodes)
    targets = tuple(cluster.node(name).name for name in names) if names else tuple(n.name for n in cluster.nodes)
    staying = [n for n in cluster.control_planes if n.name not in targets]
    if cluster.control_plane.name in targets and staying:
        # Resetting it alone would leave a cluster whose next `up` runs kubeadm init there again: a second cluster.
        raise InputError(first_control_plane_problem(cluster))
    # Workers first: the control plane answers for their drain until it is reset itself.
    targets = tuple(sorted(targets, key=lambda name: cluster.node(name).is_control_plane))
    confirm(f"Wipe Kubernetes from {', '.join(targets)} ({WHAT_RESET_REMOVES})?", yes)
    run_pipeline(RESET_PHASES, cluster, settings, nodes, title=title, targets=targets, output=output)
    if cluster.control_plane.name in targets:
        for note in forget_local_cluster(cluster):
            console.print(note)


def register(app: typer.Typer) -> None:
    @app.command("reset")
    @checked("reset")
    @node_options
    def reset(
        nodes: NodeOptions,
        names: Annotated[list[str] | None, options_of("reset").argument(
            "NAMES", help="Nodes to reset (default: every node in the inventory).", show_default=False,
            autocompletion=complete.nodes)] = None,
        yes: YesOption = False,
        output: OutputOption = Output.text,
    ) -> None:
        """Take nodes out of the cluster and wipe Kubernetes from them, leaving nothing behind.

        Works on nodes where kubeadm was never installed or the cluster is half built; a second reset changes
        nothing. Asks for confirmation unless --yes.
        """
        reset_nodes(nodes, names or None, yes=yes, output=output,
                    title=f"bootstrap reset: {', '.join(names) if names else 'every node'}")

    @app.command("down")
    @checked("down")
    @node_options
    def down(nodes: NodeOptions, yes: YesOption = False, output: OutputOption = Output.text) -> None:
        """Tear the whole cluster down: every node reset, this machine's kubeconfig and context removed."""
        reset_nodes(nodes, None, yes=yes, output=output, title=f"bootstrap down: {nodes.inventory}")
