"""What an upgrade reads from the API and waits for there: the API server's version, each node's kubelet and
whether it is cordoned, and a node's kubelet back on a new release after its restart."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes import client

from provision.errors import BootstrapError
from provision.kube.verify import call_api


@dataclass(frozen=True)
class NodeStatus:
    # status.nodeInfo.kubeletVersion: the kubelet that runs and reports (v1.36.4).
    kubelet: str | None
    unschedulable: bool
    ready: bool


def api_server_version(api: client.ApiClient) -> str:
    return str(call_api(api, client.VersionApi(api).get_code).git_version)


def _status(node: client.V1Node) -> NodeStatus:
    info = node.status.node_info if node.status else None
    conditions = (node.status.conditions if node.status else None) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return NodeStatus(kubelet=info.kubelet_version if info else None,
                      unschedulable=bool(node.spec and node.spec.unschedulable), ready=ready)


def node_statuses(api: client.ApiClient) -> dict[str, NodeStatus]:
    """Every Node of the cluster by name."""
    nodes = call_api(api, client.CoreV1Api(api).list_node).items
    return {n.metadata.name: _status(n) for n in nodes if n.metadata and n.metadata.name}


def wait_for_kubelet(api: client.ApiClient, node: str, tag: str, *, timeout_s: float,
                     sleep: Callable[[float], None] = time.sleep,
                     on_message: Callable[[str], None] | None = None) -> None:
    """Until the node's kubelet reports `tag` (v1.36.4) and the node is Ready; BootstrapError past timeout_s."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout_s
    while True:
        status = _status(call_api(api, core.read_node, node))
        if status.kubelet == tag and status.ready:
            return
        seen = f"its kubelet reports {status.kubelet or 'no version'}, {'Ready' if status.ready else 'not Ready'}"
        if time.monotonic() >= deadline:
            raise BootstrapError(f"{node}: after its upgrade to {tag} {seen} after {timeout_s:g} s: see "
                                 f"`journalctl -u kubelet` on {node}, then re-run the upgrade with the same --to "
                                 f"({node} stays cordoned)")
        if on_message:
            on_message(f"waiting: {node}: {seen}, waiting for {tag} and Ready")
        sleep(min(2.0, max(0.0, deadline - time.monotonic())))
