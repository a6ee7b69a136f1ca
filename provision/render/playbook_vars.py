"""The variables every playbook receives: the one contract between the Python side and the roles.

All names start with `cb_` so they never collide with a user's own inventory variables.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provision.inputs import versions
from provision.inputs.inventory import Cluster, Node
from provision.inputs.platforms import NodePython, Platform, bootstrap_script, role_rows
from provision.inputs.settings import CACHE_MARKER, Settings
from provision.inputs.sources import resolve_sources
from provision.inputs.values import HostName, NodeName
from provision.render.endpoint import API_SERVER_CERT_NAME, api_endpoint
from provision.render.kubeadm_config import CRI_SOCKET


def sandbox_image(settings: Settings) -> str:
    """The pause image kubeadm of the chosen minor uses, from the image repository: containerd pins the same one,
    so it is pulled once."""
    pause = versions.kubernetes_release(settings.kubernetes.minor_number).pause
    return f"{resolve_sources(settings).image_repository}/pause:{pause}"


def playbook_vars(cluster: Cluster, settings: Settings) -> dict[str, Any]:
    kube = settings.kubernetes
    sources = resolve_sources(settings)
    endpoint = api_endpoint(cluster, settings)
    return {
        "cb_kube_version": kube.version,
        "cb_kube_minor": kube.minor,
        "cb_sandbox_image": sandbox_image(settings),
        "cb_pod_cidr": kube.pod_cidr,
        "cb_service_cidr": kube.service_cidr,
        "cb_dns_domain": kube.dns_domain,
        "cb_kube_proxy_mode": kube.kube_proxy_mode,
        # The one containerd socket: kubeadm's criSocket, crictl's endpoint, `kubeadm join` and `kubeadm reset`.
        "cb_cri_socket": CRI_SOCKET,
        "cb_sources": sources.as_dict(),
        "cb_offline": settings.offline.source is not None,
        "cb_install_docker": settings.container_runtime.install_docker,
        "cb_containerd_source": settings.container_runtime.containerd_source,
        # containerd_source auto takes the distribution's containerd from this version on (else containerd.io).
        "cb_containerd_distribution_minimum": versions.shown_version(versions.AUTO_DISTRIBUTION_CONTAINERD),
        "cb_firewall_mode": settings.firewall.mode,
        "cb_switch_to_cgroup_v2": settings.kubelet.switch_to_cgroup_v2,
        "cb_package_lock_timeout_s": settings.packages.lock_timeout_s,
        "cb_download_attempts": settings.downloads.attempts,
        "cb_calico_version": settings.calico.version,
        "cb_gpu": settings.gpu.model_dump(),
        # The smoke test's data cache on the nodes (a hostPath): reset removes it where the smoke test marked it.
        "cb_smoke_cache_path": settings.smoke_test.cache_path,
        "cb_smoke_cache_marker": CACHE_MARKER,
        # The first control plane (kubeadm init runs there); `host` is Ansible's name for it, `name` the node's.
        "cb_control_plane": {"name": cluster.control_plane.name, "host": cluster.control_plane.host,
                             "address": cluster.control_plane.address},
        # `ip`: the address the other nodes reach it on, where the inventory gives one (else null).
        "cb_cluster_nodes": [{"name": n.name, "host": n.host, "address": n.address, "ip": n.cluster_address, "role": n.role}
                             for n in cluster.nodes],
        # Inventory host name -> node name (the machine's hostname, kubeadm's --node-name).
        "cb_node_names": {n.host: n.name for n in cluster.nodes},
        # Where the API servers are reached (render/endpoint.py): kubeadm's controlPlaneEndpoint, where a joined
        # node's kubelet and kube-proxy go (the local proxy, verified as tls_server_name), the VIP (or null).
        "cb_api_endpoint": {"mode": endpoint.mode, "control_plane_endpoint": endpoint.control_plane_endpoint,
                            "node_url": endpoint.node_url, "tls_server_name": API_SERVER_CERT_NAME,
                            "vip": endpoint.host if endpoint.mode == "vip" else None},
        # The platform table (provision/inputs/platforms.py): each node's row is found by its facts
        # (playbooks/group_vars/all.yml: node_platform); os_prep refuses a node whose row is not supported.
        "cb_platforms": role_rows(),
    }


def python_host_vars(cluster: Cluster, settings: Settings, pythons: Mapping[str, NodePython]) -> dict[str, dict[str, str]]:
    """What each run's inventory adds per node: `ansible_python_interpreter`, the interpreter preflight chose
    (unless the user's inventory names one for the node: theirs wins), and `cb_python_bootstrap`, the shell that
    prepare's first play runs to install it where preflight found it missing."""
    os_repo = resolve_sources(settings).os_repo
    found: dict[str, dict[str, str]] = {}
    for node in cluster.nodes:
        python = pythons.get(node.name)
        if python is None or node.python_interpreter is not None:
            continue
        found[node.name] = {"ansible_python_interpreter": python.interpreter}
        platform = python.platform
        if python.install and isinstance(platform, Platform):
            found[node.name]["cb_python_bootstrap"] = bootstrap_script(platform, python.install, os_repo)
    return found


def nvidia_nodes(cluster: Cluster, gpus: Mapping[NodeName, int]) -> list[Node]:
    """The nodes that get the NVIDIA driver and container toolkit: gpu=true in the inventory, or gpu=auto (the
    default) and preflight counted NVIDIA GPUs on the node (`gpus`, node name -> count). gpu=false never."""
    return [n for n in cluster.nodes if n.gpu == "true" or (n.gpu == "auto" and gpus.get(n.name, 0) > 0)]


def prepare_vars(cluster: Cluster, gpus: Mapping[NodeName, int],
                 generations: Mapping[NodeName, list[str]] | None = None) -> dict[str, Any]:
    """The prepare playbook's own variables: which nodes are GPU nodes, so the nvidia role never looks again, and
    the NVIDIA kernel module each needs (open for Turing and newer, proprietary when an older GPU is there; open,
    NVIDIA's default, when preflight named no generation). Both are keyed by inventory host name (what the role
    compares with inventory_hostname); preflight's counts and generations by node name."""
    nodes = nvidia_nodes(cluster, gpus)
    modules: dict[HostName, str] = {}
    for node in nodes:
        known = [versions.GPU_GENERATIONS[versions.generation_index(g)] for g in (generations or {}).get(node.name, [])]
        modules[node.host] = versions.module_flavour(known) if known else "open"
    return {"cb_nvidia_nodes": [node.host for node in nodes], "cb_nvidia_modules": modules}
