"""join: control planes one at a time, then workers, each with a join command (and for control planes a
certificate key) minted on this run; the endpoint's static pods laid down where they belong; then every node Ready
and the workers labelled."""
from __future__ import annotations

from typing import Any

from provision.kube.nodes import label_workers
from provision.kube.verify import verify_cluster
from provision.phases.common import api, expectations
from provision.phases.control_plane import kube_vip_vars
from provision.phases.engine import Phase, PhaseContext
from provision.render.endpoint import api_endpoint, endpoint_mode
from provision.render.kubeadm_config import ignored_preflight_errors
from provision.render.manifests import API_PROXY_DIR, API_PROXY_NAME, STATIC_POD_DIR, api_proxy, kube_proxy_kubeconfig


def limit(ctx: PhaseContext) -> list[str] | None:
    if ctx.nodes is None:
        return None
    # A control plane added behind local proxies changes every node's proxy: all of them take part.
    adds_control_plane = any(ctx.cluster.node(name).is_control_plane for name in ctx.nodes)
    if adds_control_plane and endpoint_mode(ctx.cluster, ctx.settings) == "proxy":
        return None
    # The first control plane mints the join command; only the named nodes join.
    return [ctx.cluster.control_plane.name, *ctx.nodes]


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    endpoint = api_endpoint(ctx.cluster, ctx.settings)
    proxy = api_proxy(ctx.cluster, ctx.settings) if endpoint.mode == "proxy" else None
    return {
        # By inventory host name: the role looks itself up with inventory_hostname.
        "cb_node_ips": {n.host: n.cluster_address for n in ctx.cluster.nodes if n.cluster_address},
        "cb_kube_vip": kube_vip_vars(ctx),
        "cb_api_proxy": {"dir": API_PROXY_DIR, "manifest_path": f"{STATIC_POD_DIR}/{API_PROXY_NAME}.yaml",
                         "config": proxy.config if proxy else "", "manifest": proxy.manifest if proxy else ""},
        "cb_kube_proxy_kubeconfig": kube_proxy_kubeconfig(endpoint) if proxy else "",
        "cb_ignore_preflight_errors": ignored_preflight_errors(ctx.settings),
    }


def check(ctx: PhaseContext) -> str:
    client = api(ctx)
    report = verify_cluster(client, expectations(ctx, joined=True), checks=("nodes",),
                            timeout_s=ctx.settings.verify.timeout_s, on_message=ctx.say)
    report.raise_for_problems("join")
    workers = [n.name for n in ctx.cluster.nodes if not n.is_control_plane and n.name in ctx.target_nodes]
    labelled = label_workers(client, workers)
    return f"{len(report.ready_nodes)} nodes Ready" + (f", {len(labelled)} labelled worker" if labelled else "")


PHASE = Phase("join", "control planes, then workers, join with a freshly minted token", check, playbook="join.yml",
              extra_vars=extra_vars, limit=limit, needs=("kubeconfig", "vip_interfaces"))
