"""The variables the playbooks receive: the one contract between the Python side and the roles.

Every variable a role reads from Python is built here and named here once: `playbook_vars` for every playbook,
then one function per playbook for its own (the phases pass them as their extra_vars and assemble none
themselves). All names start with `cb_` so they never collide with a user's own inventory variables.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from provision.errors import BootstrapError
from provision.inputs import versions
from provision.inputs.addons import AddonName
from provision.inputs.inventory import Cluster, Node
from provision.inputs.platforms import NodePython, Platform, bootstrap_script, role_rows
from provision.inputs.settings import CACHE_MARKER, Settings
from provision.inputs.sources import resolve_sources
from provision.inputs.values import HostName, NodeName
from provision.render.addons import ClusterFacts, addon_plan
from provision.render.endpoint import API_SERVER_CERT_NAME, API_SERVER_PORT, api_endpoint, endpoint_mode
from provision.render.kubeadm_config import CRI_SOCKET, ignored_preflight_errors, render_init_config
from provision.render.manifests import (
    API_PROXY_DIR,
    API_PROXY_MANIFEST,
    KUBE_VIP_MANIFEST,
    api_proxy,
    calico_images,
    calico_source,
    device_plugin_manifest,
    gpu_node_labels,
    kube_proxy_kubeconfig,
    kube_vip_manifest,
    runtimeclass_manifest,
)
from provision.render.node_paths import node_paths
from provision.render.node_tables import role_tables
from provision.render.prepare_files import prepare_want, sandbox_image


def playbook_vars(cluster: Cluster, settings: Settings) -> dict[str, Any]:
    kube = settings.kubernetes
    sources = resolve_sources(settings)
    endpoint = api_endpoint(cluster, settings)
    return {
        # The release kubernetes.version pins ("1.36.4"), or null for a bare minor (its newest patch).
        "cb_kube_patch": kube.patch,
        "cb_kube_minor": kube.minor,
        "cb_sandbox_image": sandbox_image(settings),
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
        # (playbooks/group_vars/all.yml: node_platform); node_state refuses a node whose row is not supported.
        "cb_platforms": role_rows(),
        # Where kubeadm and cluster-bootstrap keep things on a node (render/node_paths.py).
        "cb_paths": node_paths(),
        # What prepare makes true on every node (render/node_tables.py), and the files it writes from them.
        "cb_node_tables": role_tables(),
        "cb_prepare": prepare_want(cluster, settings),
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


def kube_vip_vars(cluster: Cluster, settings: Settings, vip_interfaces: Mapping[str, str]) -> dict[str, Any]:
    """cb_kube_vip, kube-vip's static pods (endpoint vip): one per control plane (by inventory host name), for the
    interface it announces the VIP on (control_plane.interface, else the one preflight found: `vip_interfaces`,
    node name -> interface), and the first control plane's copy for while kubeadm init runs. No manifests without a
    VIP."""
    found: dict[str, Any] = {"manifest_path": KUBE_VIP_MANIFEST, "manifests": {}, "during_init": ""}
    if endpoint_mode(cluster, settings) == "vip":
        def interface(name: str) -> str:
            chosen = settings.control_plane.interface or vip_interfaces.get(name)
            if chosen is None:
                raise BootstrapError(f"no interface known for kube-vip on {name}: run `bootstrap preflight` (it finds "
                                     "the route to the VIP), or set control_plane.interface")
            return chosen

        found["manifests"] = {n.host: kube_vip_manifest(settings, interface=interface(n.name))
                              for n in cluster.control_planes}
        found["during_init"] = kube_vip_manifest(settings, interface=interface(cluster.control_plane.name),
                                                 during_init=True)
    return {"cb_kube_vip": found}


def control_plane_vars(cluster: Cluster, settings: Settings, kubernetes_version: str, *,
                       vip_interfaces: Mapping[str, str], fetch_dest: Path) -> dict[str, Any]:
    """control_plane.yml: the kubeadm configuration for `kubernetes_version` (the release prepare installed), where
    the admin kubeconfig is fetched to on this machine, and kube-vip's static pods."""
    return ({"cb_kubeadm_config": render_init_config(cluster, settings, kubernetes_version)}
            | kubeconfig_fetch_vars(fetch_dest) | kube_vip_vars(cluster, settings, vip_interfaces))


def kubeconfig_fetch_vars(fetch_dest: Path) -> dict[str, Any]:
    """Where the first control plane's admin kubeconfig is fetched to on this machine, for the playbooks that end
    with it (the kubeadm_control_plane role's 0040-kubeconfig.yml)."""
    return {"cb_kubeconfig_fetch_dest": str(fetch_dest)}


def api_servers_vars(cluster: Cluster) -> dict[str, Any]:
    """cb_certs_api_servers: every control plane's own API server (inventory host -> https://ADDRESS:6443), at the
    address it advertises (the cluster address where the inventory gives one); asked by the name every API server's
    certificate carries (API_SERVER_CERT_NAME)."""
    def url(node: Node) -> str:
        address = node.cluster_address or node.address
        return f"https://[{address}]:{API_SERVER_PORT}" if ":" in address else f"https://{address}:{API_SERVER_PORT}"
    return {"cb_certs_api_servers": {node.host: url(node) for node in cluster.control_planes}}


def certs_renew_vars(cluster: Cluster, fetch_dest: Path) -> dict[str, Any]:
    """certs_health.yml and certs_renew.yml: every control plane's API server (asked for /readyz before anything
    restarts), and where the renewed admin kubeconfig is fetched to."""
    return kubeconfig_fetch_vars(fetch_dest) | api_servers_vars(cluster)


def certs_timer_vars(cluster: Cluster, *, enabled: bool, renew_before_days: int,
                     hours: Mapping[HostName, int]) -> dict[str, Any]:
    """certs_timer.yml: whether the renewal timer is on, how many days before expiry it renews, the hour each
    control plane's timer runs at (by inventory host name), and every control plane's API server (the timer skips a
    renewal while one is not ready)."""
    return {"cb_certs_timer": {"enabled": enabled, "renew_before_days": renew_before_days, "hours": dict(hours)}} \
        | api_servers_vars(cluster)


def gpu_driver_upgrade_vars(cluster: Cluster, gpus: Mapping[NodeName, int], generations: Mapping[NodeName, list[str]],
                            current: Mapping[NodeName, str]) -> dict[str, Any]:
    """upgrade_gpu_driver.yml: the GPU nodes and their kernel module flavour (as prepare names them: prepare_vars),
    and the driver branch each runs now (node name -> branch, '' where none is loaded), by inventory host."""
    return prepare_vars(cluster, gpus, generations) | {"cb_gpu_driver_upgrade": {
        "from": {cluster.node(name).host: branch for name, branch in current.items()}}}


def upgrade_prepull_vars(settings: Settings) -> dict[str, Any]:
    """upgrade_prepull.yml: the cluster's image repository (kubeadm lists its images there) and the step's own
    images to pull beside kubeadm's (Calico of the step's pairing, where the settings pull it from)."""
    calico = [f"{image}:{settings.calico.version}" for image in calico_images(settings).values()]
    return {"cb_upgrade_prepull": {"image_repository": resolve_sources(settings).image_repository, "images": calico}}


def upgrade_node_vars(fetch_dest: Path, *, apply: bool = False, containerd: Sequence[HostName] = ()) -> dict[str, Any]:
    """upgrade_node.yml: where the admin kubeconfig kubeadm renewed on the first control plane is fetched to, whether
    the first control plane runs `kubeadm upgrade apply` (decided in Python from the cluster's kubeadm-config and
    kube-proxy), and the hosts whose containerd moves to 2.x before their kubelet (the plan's; the release itself is
    the step's kubernetes.version: playbook_vars's cb_kube_patch)."""
    return kubeconfig_fetch_vars(fetch_dest) | {"cb_upgrade_apply": apply, "cb_upgrade_containerd": list(containerd)}


def join_vars(cluster: Cluster, settings: Settings, *, vip_interfaces: Mapping[str, str],
              minter: str | None = None) -> dict[str, Any]:
    """join.yml: the control plane that mints the joins (node name; default the first), the address each node's
    kubelet registers, kube-vip's static pods, the local API proxy (endpoint proxy) with kube-proxy's kubeconfig
    through it, and the kubeadm preflight checks skipped."""
    endpoint = api_endpoint(cluster, settings)
    proxy = api_proxy(cluster, settings) if endpoint.mode == "proxy" else None
    return {
        "cb_join_minter": cluster.node(minter).host if minter else cluster.control_plane.host,
        # By inventory host name: the role looks itself up with inventory_hostname.
        "cb_node_ips": {n.host: n.cluster_address for n in cluster.nodes if n.cluster_address},
        "cb_api_proxy": {"dir": API_PROXY_DIR, "manifest_path": API_PROXY_MANIFEST,
                         "config": proxy.config if proxy else "", "manifest": proxy.manifest if proxy else ""},
        "cb_kube_proxy_kubeconfig": kube_proxy_kubeconfig(endpoint) if proxy else "",
        "cb_ignore_preflight_errors": ignored_preflight_errors(settings),
    } | kube_vip_vars(cluster, settings, vip_interfaces)


def network_vars(settings: Settings) -> dict[str, Any]:
    """network.yml: Calico's release manifest and the kustomization that customises it."""
    source = calico_source(settings)
    return {"cb_calico_url": source.url, "cb_calico_upstream_file": source.upstream_file,
            "cb_calico_kustomization": source.kustomization}


def mig_layout(settings: Settings, cluster: Cluster, nodes: Sequence[str]) -> dict[str, Any]:
    """The inventory hosts whose GPUs are cut, the profile, and per host the instances one GPU of each PCI device id
    holds (the versions table's; preflight refused GPUs without the profile)."""
    mig = settings.gpu.mig
    if not mig.enabled or mig.profile is None:
        return {"hosts": [], "profile": "", "instances": {}}
    profile = mig.profile
    counts = {f"{device:04x}": product.profiles[profile]
              for product in versions.MIG_PRODUCTS if profile in product.profiles for device in product.device_ids}
    hosts = {cluster.node(name).host: counts for name in nodes}
    return {"hosts": sorted(hosts), "profile": profile, "instances": hosts}


def gpu_vars(settings: Settings, cluster: Cluster, nodes: Sequence[NodeName],
             generations: Mapping[NodeName, list[str]]) -> dict[str, Any]:
    """gpu_plugin.yml: the GPU nodes (node names), each with the labels every GPU node gets and its oldest GPU
    generation where preflight named them (`generations`, node name -> generations: the smoke test picks its image
    for the oldest among the nodes it runs on), the MIG layout, the device plugin and the RuntimeClass."""
    common = gpu_node_labels(settings)
    return {"cb_gpu_nodes": list(nodes),
            "cb_gpu_node_labels": {name: common + (
                [f"{versions.GPU_GENERATION_LABEL}={versions.oldest_generation(generations[name])}"]
                if generations.get(name) else []) for name in nodes},
            "cb_mig": mig_layout(settings, cluster, nodes),
            "cb_device_plugin_manifest": device_plugin_manifest(settings),
            "cb_runtimeclass_manifest": runtimeclass_manifest()}


def addon_vars(settings: Settings, name: AddonName, state: Literal["present", "absent"],
               facts: ClusterFacts | None = None) -> dict[str, Any]:
    """addon.yml: one add-on's plan (render/addons.py; `facts`: what the cluster serves that changes it), whether it
    is installed or removed, and how long to wait."""
    return {"cb_addon": addon_plan(settings, name, facts).as_vars(), "cb_addon_state": state,
            "cb_addon_timeout_s": settings.addons.timeout_s}


def etcd_probe_vars(layout: Mapping[str, Any]) -> dict[str, Any]:
    """etcd_probe.yml, and the etcd playbooks after it: where etcd's files are on a control plane (the layout
    provision/nodes/etcd/report.py decides)."""
    return {"cb_etcd_layout": dict(layout)}


def etcd_snapshot_vars(layout: Mapping[str, Any], snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """etcd_snapshot.yml: the layout, and the snapshot to take (etcdctl, the client's certificates, how to read its
    status, where it goes, the cluster and node it is named after, how many the node keeps), as the phase chose."""
    return etcd_probe_vars(layout) | {"cb_etcd_snapshot": dict(snapshot)}


def etcd_remove_vars(leaving: Sequence[str]) -> dict[str, Any]:
    """etcd_remove.yml: the control planes (node names) whose etcd members are removed."""
    return {"cb_etcd_leaving": list(leaving)}


def etcd_timer_vars(layout: Mapping[str, Any], *, enabled: bool, schedule: str,
                    nodes: Mapping[HostName, Mapping[str, Any]]) -> dict[str, Any]:
    """etcd_timer.yml: whether the snapshot timer is on, its systemd calendar, and each control plane's
    configuration by inventory host name (its Python, and the snapshot it takes, as etcd_snapshot_vars's); none
    when the timer is being removed."""
    return etcd_probe_vars(layout) | {"cb_etcd_timer": {"enabled": enabled, "schedule": schedule,
                                                        "nodes": {host: dict(node) for host, node in nodes.items()}}}


def etcd_restore_stage_vars(layout: Mapping[str, Any], *, source: str, staged: str,
                            status_argv: Mapping[str, Sequence[str] | None]) -> dict[str, Any]:
    """etcd_restore_stage.yml: the snapshot on this machine (`source`), where each member gets its copy (`staged`),
    and by inventory host name the command that reads a snapshot's status there."""
    return etcd_probe_vars(layout) | {"cb_etcd_stage": {
        "source": source, "staged": staged,
        "status_argv": {host: list(argv) if argv is not None else None for host, argv in status_argv.items()}}}


def etcd_restore_stop_vars(layout: Mapping[str, Any], kinds: Mapping[str, str]) -> dict[str, Any]:
    """etcd_restore_stop.yml: how etcd runs (static_pod, systemd) on each control plane it stops, by inventory host
    name."""
    return etcd_probe_vars(layout) | {"cb_etcd_kinds": dict(kinds)}


def etcd_restore_data_vars(layout: Mapping[str, Any], members: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """etcd_restore_data.yml: each member's restore (the cb_etcd_restore module's arguments), by inventory host
    name."""
    return etcd_probe_vars(layout) | {"cb_etcd_restore_members": {host: dict(arguments)
                                                                  for host, arguments in members.items()}}


def etcd_restore_start_vars(layout: Mapping[str, Any], *, staged: str, kinds: Mapping[str, str]) -> dict[str, Any]:
    """etcd_restore_start.yml: the staged copy it removes, and how etcd runs on each restored member (by inventory
    host name)."""
    return etcd_probe_vars(layout) | {"cb_etcd_start": {"staged": staged, "kinds": dict(kinds)}}


def etcd_restore_api_vars(layout: Mapping[str, Any], *, restored: Sequence[str]) -> dict[str, Any]:
    """etcd_restore_api.yml: the restored control planes (inventory host names), whose API servers come back."""
    return etcd_probe_vars(layout) | {"cb_etcd_api": {"restored": list(restored)}}


def etcd_defrag_vars(layout: Mapping[str, Any], defrag: Mapping[str, Any]) -> dict[str, Any]:
    """etcd_defrag.yml: the etcdctl, the members' client URLs in order (the leader last), the quota, the timeout."""
    return etcd_probe_vars(layout) | {"cb_etcd_defrag": dict(defrag)}


def etcd_member_remove_vars(layout: Mapping[str, Any], *, etcdctl: Sequence[str],
                            ids: Sequence[str]) -> dict[str, Any]:
    """etcd_member_remove.yml: the healthy member's etcdctl command, and the ids of the members removed through
    it."""
    return etcd_probe_vars(layout) | {"cb_etcd_member_remove": {"etcdctl": list(etcdctl), "ids": list(ids)}}


def etcd_member_join_vars(layout: Mapping[str, Any], join: Mapping[str, Any]) -> dict[str, Any]:
    """etcd_member_join.yml: the join provision/nodes/etcd/members.py planned (the node and the helper by
    inventory host name)."""
    return etcd_probe_vars(layout) | {"cb_etcd_join": dict(join)}
