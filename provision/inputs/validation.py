"""Checks that need both the inventory and the settings; run before any SSH connection."""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from provision.errors import InputError
from provision.inputs import versions
from provision.inputs.addons import ADDONS, AddonName
from provision.inputs.dialects import IGNORED_VARIABLES, SETTING_VARIABLES
from provision.inputs.files import shown
from provision.inputs.inventory import Cluster, load_inventory, node_ip_addresses
from provision.inputs.settings import Settings, load_settings

# kube-controller-manager gives every node a /24 of the pod CIDR (kubeadm's default node-cidr-mask-size).
NODE_POD_PREFIX = 24


def _node_addresses(cluster: Cluster) -> list[tuple[str, ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    """Inventory addresses, and the addresses the nodes talk on (`node_ip`, kubespray's `ip`)."""
    found = list(node_ip_addresses(cluster).items())
    found += [(node.name, ipaddress.IPv4Address(node.ip)) for node in cluster.nodes if node.ip]
    return found


# What other installers' variables set that is fixed here.
FIXED_VALUES = {"container runtime": "containerd", "API server port": "6443", "network plugin": "calico"}


def _setting_value(settings: Settings, key: str) -> str:
    if key in FIXED_VALUES:
        return FIXED_VALUES[key]
    section, _, name = key.partition(".")
    return str(getattr(getattr(settings, section), name))


def _same(variable_value: object, setting_value: str) -> bool:
    text = str(variable_value).strip().strip("'\"").lstrip("v")
    try:
        return ipaddress.ip_network(text) == ipaddress.ip_network(setting_value)
    except ValueError:
        return text.lower() == setting_value.lower()


def foreign_variable_warnings(cluster: Cluster, settings: Settings, source: str) -> list[str]:
    """One line per variable of another installer that asks for something this run will not do: a setting of
    theirs whose value differs from ours (named with the key to write in cluster.yaml), or one that means nothing
    here."""
    warnings: list[str] = []
    said: set[str] = set()
    for node in cluster.nodes:
        for variable, value in node.variables.items():
            if variable in said or value is None or value == "":
                continue
            if variable in SETTING_VARIABLES:
                key = SETTING_VARIABLES[variable]
                ours = _setting_value(settings, key)
                if _same(value, ours):
                    continue
                if key in FIXED_VALUES:
                    warnings.append(f"{cluster.inventory_path}: {variable}={shown(value)} is not read: the {key} is "
                                    f"always {ours} here; remove {variable}")
                else:
                    warnings.append(f"{cluster.inventory_path}: {variable}={shown(value)} is not read: settings come "
                                    f"from cluster.yaml, where {key} is {ours}; write `{key}: {value}` in {source} to "
                                    f"have it, and remove {variable}")
            elif variable in IGNORED_VARIABLES:
                warnings.append(f"{cluster.inventory_path}: {variable} is not used: {IGNORED_VARIABLES[variable]}; "
                                "remove it")
            else:
                continue
            said.add(variable)
    return warnings


def _check_endpoint(cluster: Cluster, settings: Settings, source: str) -> None:
    control_plane = settings.control_plane
    count = len(cluster.control_planes)
    if control_plane.endpoint == "none" and count > 1:
        raise InputError(f"{source}: control_plane.endpoint is none but {cluster.inventory_path} has {count} control "
                         "planes: they need an endpoint that survives one of them, set endpoint: vip (with vip: a "
                         "free address of their subnet) or endpoint: proxy, or leave it auto")
    if control_plane.vip is None:
        return
    vip = ipaddress.IPv4Address(control_plane.vip)
    for name, address in _node_addresses(cluster):
        if address == vip:
            raise InputError(f"{source}: control_plane.vip {vip} is node '{name}''s own address in "
                             f"{cluster.inventory_path}: the VIP must be a free address of the control planes' subnet")
    kube = settings.kubernetes
    for key, network in (("pod_cidr", kube.pod_cidr), ("service_cidr", kube.service_cidr)):
        if vip in ipaddress.ip_network(network):
            raise InputError(f"{source}: control_plane.vip {vip} is inside kubernetes.{key} {network}: the VIP must "
                             "be a free address of the control planes' own subnet")


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
    _check_endpoint(cluster, settings, source)
    for name, address in _node_addresses(cluster):
        if address in pod:
            raise InputError(f"{source}: kubernetes.pod_cidr {pod} contains node '{name}' ({address}) of {inventory}: "
                             "pods and nodes would collide; pick a pod_cidr outside your node network, e.g. "
                             "10.244.0.0/16")
        if address in service:
            raise InputError(f"{source}: kubernetes.service_cidr {service} contains node '{name}' ({address}) of "
                             f"{inventory}: pick a service_cidr outside your node network, e.g. 10.96.0.0/12")


def settings_warnings(settings: Settings) -> list[str]:
    """What the settings allow that upstream no longer supports, one line each; shown on every run."""
    warnings = []
    kube = settings.kubernetes
    if settings.kubelet.allow_cgroup_v1 and kube.minor_number >= versions.CGROUP_V1_REFUSED_FROM:
        warnings.append(f"kubelet.allow_cgroup_v1 is true: Kubernetes {kube.minor} no longer supports cgroup v1 "
                        "hosts; they run with failCgroupV1: false and kubeadm's SystemVerification check skipped. "
                        "Move the nodes to cgroup v2 (docs/os-support.md) and set it back to false")
    if kube.kube_proxy_mode == "ipvs" and kube.minor_number >= versions.IPVS_DEPRECATED_FROM:
        warnings.append(f"kubernetes.kube_proxy_mode ipvs is deprecated since Kubernetes 1.{versions.IPVS_DEPRECATED_FROM}"
                        " (KEP-5495): use nftables (Linux 5.13 or newer) or iptables")
    if kube.allow_untested_versions and kube.minor_number > versions.KUBERNETES_RELEASES[-1].minor:
        warnings.append(f"Kubernetes {kube.minor} is newer than the versions table "
                        f"(checked {versions.CHECKED_ON.isoformat()}); it runs with the choices made for "
                        f"{versions.KUBERNETES_RELEASES[-1].name}")
    warnings += addon_warnings(settings, settings.addons.enabled)
    return warnings


def addon_warnings(settings: Settings, names: Iterable[AddonName]) -> list[str]:
    """For each add-on named whose pinned release is the table's, the Kubernetes range it is tested with when the
    chosen minor is outside it (a release pinned in the settings has a range the table does not know)."""
    found = []
    for name in names:
        addon = ADDONS[name]
        problem = addon.kubernetes_problem(settings.kubernetes.minor_number)
        if problem and not addon.kubernetes_required and settings.addons.version(name) == addon.version:
            found.append(f"addons: {problem}")
    return found


def load_cluster(inventory: Path, config: Path | None) -> tuple[Cluster, Settings]:
    """Inventory and settings, each validated and then checked against each other. What the inventory says that
    this run reads differently is in the cluster's warnings."""
    settings = load_settings(config)
    cluster = load_inventory(inventory)
    source = str(config) if config else "default settings"
    check_cluster_settings(cluster, settings, source)
    warnings = foreign_variable_warnings(cluster, settings, str(config) if config else "cluster.yaml")
    return replace(cluster, warnings=cluster.warnings + tuple(warnings)), settings
