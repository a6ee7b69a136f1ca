"""What several phases share: the API client on the admin kubeconfig, what a healthy cluster looks like for the
nodes of a run, and the GPU nodes of a run."""
from __future__ import annotations

from collections.abc import Sequence

from kubernetes import client

from provision.kube.client import load_api_client
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.kube.verify import Expectations
from provision.phases.engine import PhaseContext
from provision.render.endpoint import endpoint_mode
from provision.render.manifests import API_PROXY_NAME, image_ref


def api(ctx: PhaseContext) -> client.ApiClient:
    return load_api_client(admin_kubeconfig_path(ctx.cluster))


def expectations(ctx: PhaseContext, nodes: Sequence[str] | None = None, *, joined: bool = False) -> Expectations:
    """What a healthy cluster looks like for these nodes (default: this run's). `joined`: every node has joined,
    so the joined control planes are control planes, the endpoint's static pods run where they belong and etcd's
    members are the control planes (asked when the cluster has several, or this run adds one)."""
    settings = ctx.settings
    cluster = ctx.cluster
    scope = tuple(nodes) if nodes is not None else ctx.target_nodes
    gpus = {name: count for name, count in (ctx.state.gpus or {}).items() if name in scope}
    # Those that joined (the first one was initialised as the control plane).
    control_planes = tuple(n.name for n in cluster.control_planes[1:] if n.name in scope)
    etcd = None
    endpoint_pods = None
    every_control_plane = tuple(n.name for n in cluster.control_planes)
    if joined:
        if len(cluster.control_planes) > 1 and (ctx.nodes is None or control_planes):
            # `node add` of one control plane: others of the inventory may still be waiting for theirs.
            etcd = every_control_plane if ctx.nodes is None else control_planes
        mode = endpoint_mode(cluster, settings)
        if mode == "vip":
            endpoint_pods = ("kube-vip", tuple(n.name for n in cluster.control_planes if n.name in scope))
        elif mode == "proxy":
            endpoint_pods = (API_PROXY_NAME, scope)
    offered = {name: found for name, found in ctx.state.gpu_offered.items() if name in gpus}
    return Expectations(nodes=scope, gpus=gpus, gpu_offered=offered, pod_cidr=settings.kubernetes.pod_cidr,
                        dns_domain=settings.kubernetes.dns_domain, gpu_runtime=settings.gpu.runtime,
                        dns_probe_image=image_ref(settings, settings.verify.dns_probe_image),
                        pods_on=None if ctx.nodes is None else tuple(scope),
                        dns_node=scope[0] if ctx.nodes is not None and len(scope) == 1 else None,
                        control_planes=control_planes if joined else (), etcd_members=etcd,
                        etcd_allowed=every_control_plane if etcd is not None else None, endpoint_pods=endpoint_pods)


def gpu_nodes(ctx: PhaseContext) -> dict[str, int]:
    """The nodes of this run where preflight found GPUs, with their counts."""
    return {name: count for name, count in (ctx.state.gpus or {}).items()
            if count > 0 and name in ctx.target_nodes}
