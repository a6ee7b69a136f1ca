"""Checks that need both the inventory and the settings; run before any SSH connection."""
from __future__ import annotations

import ipaddress
from pathlib import Path

from provision.errors import InputError
from provision.inputs.files import shown
from provision.inputs.inventory import Cluster, load_inventory, node_ip_addresses
from provision.inputs.settings import Settings, load_settings

# kube-controller-manager gives every node a /24 of the pod CIDR (kubeadm's default node-cidr-mask-size).
NODE_POD_PREFIX = 24


def _node_addresses(cluster: Cluster) -> list[tuple[str, ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    """Inventory addresses, and the `node_ip` host variables that name the address nodes talk on."""
    found = list(node_ip_addresses(cluster).items())
    for node in cluster.nodes:
        value = node.variables.get("node_ip")
        if value is None:
            continue
        try:
            found.append((node.name, ipaddress.IPv4Address(value if isinstance(value, str) else "")))
        except ValueError:
            raise InputError(f"{cluster.inventory_path}: host '{node.name}': node_ip={shown(value)} is not an IPv4 "
                             "address (clusters are IPv4-only for now): write the address the node uses to reach the "
                             "others, e.g. node_ip=10.0.0.5") from None
    return found


def check_cluster_settings(cluster: Cluster, settings: Settings, source: str) -> None:
    """`source` names where the settings came from (the cluster.yaml path); the inventory is named too."""
    kube = settings.kubernetes
    pod = ipaddress.ip_network(kube.pod_cidr)
    service = ipaddress.ip_network(kube.service_cidr)
    inventory = cluster.inventory_path
    if pod.prefixlen > NODE_POD_PREFIX:
        raise InputError(f"{source}: kubernetes.pod_cidr {pod} is smaller than the /{NODE_POD_PREFIX} each node takes "
                         "from it: use a /16 such as 10.244.0.0/16")
    room = 2 ** (NODE_POD_PREFIX - pod.prefixlen)
    if len(cluster.nodes) > room:
        needed = NODE_POD_PREFIX - (len(cluster.nodes) - 1).bit_length()
        raise InputError(f"{source}: kubernetes.pod_cidr {pod} has room for {room} nodes (a /{NODE_POD_PREFIX} each) "
                         f"but {inventory} has {len(cluster.nodes)}: use a /{needed} or wider, e.g. "
                         f"{ipaddress.ip_network(f'10.128.0.0/{needed}', strict=False)}")
    if kube.kube_proxy_mode == "nftables" and kube.minor_number < 31:
        raise InputError(f"{source}: kubernetes.kube_proxy_mode nftables needs Kubernetes 1.31 or newer (it is "
                         f"{kube.version}): use iptables, or kubernetes.version 1.31+")
    for name, address in _node_addresses(cluster):
        if address in pod:
            raise InputError(f"{source}: kubernetes.pod_cidr {pod} contains node '{name}' ({address}) of {inventory}: "
                             "pods and nodes would collide; pick a pod_cidr outside your node network, e.g. "
                             "10.244.0.0/16")
        if address in service:
            raise InputError(f"{source}: kubernetes.service_cidr {service} contains node '{name}' ({address}) of "
                             f"{inventory}: pick a service_cidr outside your node network, e.g. 10.96.0.0/12")


def load_cluster(inventory: Path, config: Path | None) -> tuple[Cluster, Settings]:
    """Inventory and settings, each validated and then checked against each other."""
    settings = load_settings(config)
    cluster = load_inventory(inventory)
    check_cluster_settings(cluster, settings, str(config) if config else "default settings")
    return cluster, settings
