"""The variables every playbook receives: the one contract between the Python side and the roles.

All names start with `cb_` so they never collide with a user's own inventory variables.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provision.inputs import versions
from provision.inputs.inventory import Cluster
from provision.inputs.platforms import NodePython, Platform, bootstrap_script, role_rows
from provision.inputs.settings import Settings
from provision.inputs.sources import resolve_sources
from provision.render.kubeadm_config import CRI_SOCKET


def sandbox_image(settings: Settings) -> str:
    """The pause image kubeadm of the chosen minor uses, from the image repository: containerd pins the same one,
    so it is pulled once."""
    pause = versions.kubernetes_release(settings.kubernetes.minor_number).pause
    return f"{resolve_sources(settings).image_repository}/pause:{pause}"


def playbook_vars(cluster: Cluster, settings: Settings) -> dict[str, Any]:
    kube = settings.kubernetes
    sources = resolve_sources(settings)
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
        # The smoke test's data cache on the nodes (a hostPath): reset removes it.
        "cb_smoke_cache_path": settings.smoke_test.cache_path,
        "cb_control_plane": {"name": cluster.control_plane.name, "address": cluster.control_plane.address},
        "cb_cluster_nodes": [{"name": n.name, "address": n.address, "role": n.role} for n in cluster.nodes],
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
        if python is None or "ansible_python_interpreter" in node.variables:
            continue
        found[node.name] = {"ansible_python_interpreter": python.interpreter}
        platform = python.platform
        if python.install and isinstance(platform, Platform):
            found[node.name]["cb_python_bootstrap"] = bootstrap_script(platform, python.install, os_repo)
    return found


def nvidia_nodes(cluster: Cluster, gpus: Mapping[str, int]) -> list[str]:
    """The nodes that get the NVIDIA driver and container toolkit: gpu=true in the inventory, or gpu=auto (the
    default) and preflight counted NVIDIA GPUs on the node (`gpus`, node name -> count). gpu=false never."""
    return [n.name for n in cluster.nodes if n.gpu == "true" or (n.gpu == "auto" and gpus.get(n.name, 0) > 0)]


def prepare_vars(cluster: Cluster, gpus: Mapping[str, int],
                 generations: Mapping[str, list[str]] | None = None) -> dict[str, Any]:
    """The prepare playbook's own variables: which nodes are GPU nodes, so the nvidia role never looks again, and
    the NVIDIA kernel module each needs (open for Turing and newer, proprietary when an older GPU is there; open,
    NVIDIA's default, when preflight named no generation)."""
    nodes = nvidia_nodes(cluster, gpus)
    known = {name: [versions.GPU_GENERATIONS[versions.generation_index(g)] for g in (generations or {}).get(name, [])]
             for name in nodes}
    return {"cb_nvidia_nodes": nodes,
            "cb_nvidia_modules": {name: versions.module_flavour(known[name]) if known[name] else "open" for name in nodes}}
