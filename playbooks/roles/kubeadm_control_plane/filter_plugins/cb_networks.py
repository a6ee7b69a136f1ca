"""Filter for check-networks.yml: which of a node's IPv4 networks collide with the pod or service CIDR."""
from __future__ import annotations

import ipaddress
from typing import Any

# Interfaces whose addresses come from the pod or service range by design (Calico, kube-proxy's ipvs dummy).
OWN_INTERFACES = ("lo", "tunl0", "vxlan.calico", "kube-ipvs0", "nodelocaldns")
OWN_PREFIXES = ("cali",)


def _networks(facts: dict[str, Any]) -> list[tuple[str, ipaddress.IPv4Interface]]:
    found = []
    for name in facts.get("interfaces", []):
        if name in OWN_INTERFACES or name.startswith(OWN_PREFIXES):
            continue
        details = facts.get(name.replace("-", "_").replace(".", "_")) or facts.get(name) or {}
        for entry in [details.get("ipv4"), *(details.get("ipv4_secondaries") or [])]:
            if isinstance(entry, dict) and entry.get("address") and entry.get("netmask"):
                found.append((name, ipaddress.IPv4Interface(f"{entry['address']}/{entry['netmask']}")))
    return found


def cb_cidr_conflicts(facts: dict[str, Any], host: str, pod_cidr: str, service_cidr: str) -> list[str]:
    """One message per collision, naming the host, interface, network and the setting to change."""
    messages = []
    for setting, cidr in (("kubernetes.pod_cidr", pod_cidr), ("kubernetes.service_cidr", service_cidr)):
        target = ipaddress.ip_network(cidr)
        for name, interface in _networks(facts):
            if interface.network.overlaps(target):
                example = "10.244.0.0/16" if setting.endswith("pod_cidr") else "10.96.0.0/12"
                messages.append(
                    f"{host}: interface {name} has {interface.with_prefixlen}, which overlaps {setting} {cidr}: "
                    f"cluster traffic and this network would collide; set {setting} in cluster.yaml to a range "
                    f"none of your nodes use (e.g. {example})")
    return messages


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"cb_cidr_conflicts": cb_cidr_conflicts}
