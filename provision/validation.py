"""Checks that need both the inventory and the settings; run before any SSH connection."""
from __future__ import annotations

import ipaddress
from pathlib import Path

from provision.errors import InputError
from provision.inventory import Cluster, load_inventory, node_ip_addresses
from provision.settings import Settings, load_settings


def check_cluster_settings(cluster: Cluster, settings: Settings) -> None:
    pod = ipaddress.ip_network(settings.kubernetes.pod_cidr)
    service = ipaddress.ip_network(settings.kubernetes.service_cidr)
    for name, address in node_ip_addresses(cluster).items():
        if address in pod:
            raise InputError(f"kubernetes.pod_cidr {pod} contains node '{name}' ({address}): pods and nodes would "
                             "collide; pick a pod_cidr outside your node network, e.g. 10.244.0.0/16")
        if address in service:
            raise InputError(f"kubernetes.service_cidr {service} contains node '{name}' ({address}): pick a "
                             "service_cidr outside your node network, e.g. 10.96.0.0/12")


def load_cluster(inventory: Path, config: Path | None) -> tuple[Cluster, Settings]:
    """Inventory and settings, each validated and then checked against each other."""
    settings = load_settings(config)
    cluster = load_inventory(inventory)
    check_cluster_settings(cluster, settings)
    return cluster, settings
