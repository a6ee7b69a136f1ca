"""Where the API servers are reached: the control-plane endpoint, decided once from the inventory and settings.

vip: a virtual IP that kube-vip (a static pod on every control plane) keeps on one healthy control plane; it is
kubeadm's controlPlaneEndpoint, so joins, every kubelet, kube-proxy and this machine's kubeconfig go through it.
proxy: kubeadm's controlPlaneEndpoint is the first control plane (kubeadm's discovery and a kubelet's TLS
bootstrap need an API server before the node runs any pod); once a node has joined, a local proxy on it
(127.0.0.1:PROXY_PORT, a static pod) in front of every API server carries its kubelet's and kube-proxy's traffic,
so a control plane that dies takes no node with it. none: one control plane, reached on its own address.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings

EndpointMode = Literal["vip", "proxy", "none"]
API_SERVER_PORT = 6443
# The local proxy's port on every node (the API server itself holds 6443 on a control plane).
PROXY_HOST = "127.0.0.1"
PROXY_PORT = 6444
# A name every kubeadm API server certificate carries: a kubeconfig that reaches the API through the local proxy
# (127.0.0.1, in no certificate) verifies the server as this.
API_SERVER_CERT_NAME = "kubernetes"


def endpoint_mode(cluster: Cluster, settings: Settings) -> EndpointMode:
    """control_plane.endpoint with `auto` decided: vip when a VIP is set, else proxy for several control planes."""
    chosen = settings.control_plane.endpoint
    if chosen != "auto":
        return chosen
    if settings.control_plane.vip is not None:
        return "vip"
    return "proxy" if len(cluster.control_planes) > 1 else "none"


@dataclass(frozen=True)
class ApiEndpoint:
    mode: EndpointMode
    # kubeadm's controlPlaneEndpoint host (the VIP, or the first control plane's address); None: not set (one
    # control plane known only by a DNS name: kubeadm then uses its advertised address).
    host: str | None
    # What this machine's kubeconfig names: the VIP, or the first control plane's inventory address.
    operator_host: str

    @property
    def control_plane_endpoint(self) -> str | None:
        return f"{self.host}:{API_SERVER_PORT}" if self.host else None

    @property
    def operator_url(self) -> str:
        return f"https://{self.operator_host}:{API_SERVER_PORT}"

    @property
    def node_url(self) -> str:
        """Where a joined node's kubelet and kube-proxy reach the API."""
        if self.mode == "proxy":
            return f"https://{PROXY_HOST}:{PROXY_PORT}"
        return f"https://{self.host or self.operator_host}:{API_SERVER_PORT}"


def api_endpoint(cluster: Cluster, settings: Settings) -> ApiEndpoint:
    mode = endpoint_mode(cluster, settings)
    first = cluster.control_plane
    if mode == "vip":
        vip = settings.control_plane.vip
        assert vip is not None  # the settings refuse endpoint vip without one
        return ApiEndpoint(mode, vip, vip)
    address = first.cluster_address
    if mode == "proxy":
        # The other nodes must reach it: its cluster address, else the name they resolve.
        return ApiEndpoint(mode, address or first.address, first.address)
    return ApiEndpoint(mode, address, first.address)
