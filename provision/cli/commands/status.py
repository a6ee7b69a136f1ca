"""`bootstrap status`: the cluster as this machine knows it (the inventory's nodes, the GPUs preflight counted, the
phases of `up` and how each last ended, the last run) and, where the API answers, each node's kubelet and
readiness; a table, or one JSON document. It reads only: nothing is written here or on the nodes."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from provision.cli.option_table import checked
from provision.cli.options import ConfigOption, InventoryOption, Output, OutputOption
from provision.inputs.workflows import UP_PHASES

if TYPE_CHECKING:
    from provision.inputs.inventory import Cluster
    from provision.inputs.settings import Settings
    from provision.inputs.state import ClusterState

HELP = """The cluster as this machine knows it: nodes, versions, phases done, the last run.

From the inventory and this machine's state (nothing is connected to but the API server): each node with its
role, address and the GPUs preflight counted; the Kubernetes release prepare installed; each phase of `up` with
how it last ended, and whether with the inputs given now (a changed inventory or cluster.yaml makes `up` run it
again); the last phase that ran, and when. Where the API answers (the admin kubeconfig `up` left), each node's
readiness and kubelet version, and the API server's.

\b
Example:
    bootstrap status -i hosts.ini -c cluster.yaml
    bootstrap status -i hosts.ini -o json
"""


def cluster_document(cluster: Cluster, settings: Settings, state: ClusterState) -> dict[str, Any]:
    """What this machine knows and the API says, as one document (the table is made from it)."""
    from provision.inputs.state import cluster_dir, inputs_fingerprint
    from provision.kube.kubeconfig import admin_kubeconfig_path

    fingerprint = inputs_fingerprint(cluster, settings)
    kubeconfig = admin_kubeconfig_path(cluster)
    api: dict[str, Any] = _api_view(kubeconfig) if kubeconfig.is_file() else {
        "answered": False, "detail": "no cluster formed yet (no admin kubeconfig on this machine)"}
    seen: dict[str, dict[str, Any]] = api.get("nodes", {})
    nodes = [{"name": n.name, "role": n.role, "address": n.address,
              "gpus": (state.gpus or {}).get(n.name), "ready": seen.get(n.name, {}).get("ready"),
              "kubelet": seen.get(n.name, {}).get("kubelet")} for n in cluster.nodes]
    phases = []
    for name in UP_PHASES:
        record = state.phases.get(name)
        phases.append({"name": name, "status": record.status if record else "not run",
                       "seconds": record.seconds if record else None, "at": (record.at or None) if record else None,
                       "same_inputs": record.inputs == fingerprint if record else None,
                       "detail": record.detail if record else ""})
    recorded = [(record.at, name, record) for name, record in state.phases.items() if record.at]
    last = max(recorded, key=lambda found: found[0]) if recorded else None
    return {
        "inventory": str(cluster.inventory_path),
        "state": str(cluster_dir(cluster, create=False)),
        "kubeconfig": str(kubeconfig) if kubeconfig.is_file() else None,
        "kubernetes": {"installed": state.kubernetes_version, "settings": settings.kubernetes.version,
                       "api_server": api.get("version")},
        "api": {"answered": api["answered"], "detail": api.get("detail", "")},
        "nodes": nodes,
        "phases": phases,
        "last_run": {"phase": last[1], "status": last[2].status, "at": last[0]} if last else None,
        "upgrade": {"target": state.upgrade.target, "finished": state.upgrade.finished} if state.upgrade else None,
    }


def _api_view(kubeconfig: Any) -> dict[str, Any]:
    """The API server's version and each node's readiness and kubelet; why not, when it does not answer."""
    from provision.errors import BootstrapError
    from provision.kube.client import load_api_client
    from provision.kube.upgrade import api_server_version, node_statuses

    try:
        api = load_api_client(kubeconfig)
        version = api_server_version(api)
        nodes = node_statuses(api)
    except BootstrapError as exc:
        return {"answered": False, "detail": str(exc)}
    return {"answered": True, "version": version,
            "nodes": {name: {"ready": found.ready, "kubelet": found.kubelet} for name, found in nodes.items()}}


def render(document: dict[str, Any]) -> None:
    from rich.table import Table

    from provision.cli.console import literal_console

    console = literal_console()
    kubernetes = document["kubernetes"]
    console.print(f"cluster of {document['inventory']}: Kubernetes {kubernetes['installed'] or '-'} installed "
                  f"({kubernetes['settings']} in the settings), API server "
                  f"{kubernetes['api_server'] or 'not answering: ' + document['api']['detail']}")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NODE", "ROLE", "ADDRESS", "GPUS", "READY", "KUBELET"):
        table.add_column(column)
    for node in document["nodes"]:
        ready = "-" if node["ready"] is None else "yes" if node["ready"] else "no"
        table.add_row(node["name"], node["role"].replace("_", "-"), node["address"],
                      "-" if node["gpus"] is None else str(node["gpus"]), ready, node["kubelet"] or "-")
    console.print(table)
    phases = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("PHASE", "LAST", "TIME", "WHEN (UTC)", "INPUTS"):
        phases.add_column(column)
    for phase in document["phases"]:
        same = {None: "-", True: "same", False: "changed"}[phase["same_inputs"]]
        phases.add_row(phase["name"], phase["status"], "-" if phase["seconds"] is None else f"{phase['seconds']}s",
                       (phase["at"] or "-").replace("T", " ").removesuffix("+00:00"), same)
    console.print(phases)
    last = document["last_run"]
    console.print(f"last run: {last['phase']} {last['status']} at {last['at']}" if last else "no run recorded yet")


def register(app: typer.Typer) -> None:
    @app.command("status", help=HELP)
    @checked("status")
    def status(inventory: InventoryOption, config: ConfigOption = None, output: OutputOption = Output.text) -> None:
        from provision.cli import invocation
        from provision.cli.console import echo_json, warn
        from provision.inputs.state import ClusterState, check_state_root
        from provision.inputs.validation import load_cluster, settings_warnings

        invocation.remember(inventory=inventory, config=config)
        check_state_root()
        cluster, settings = load_cluster(inventory, config)
        warn([*cluster.warnings, *settings_warnings(settings)])
        document = cluster_document(cluster, settings, ClusterState.load(cluster))
        if output is Output.json:
            echo_json(document)
        else:
            render(document)
