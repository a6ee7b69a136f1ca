"""The kubeadm configuration file for `kubeadm init`, rendered from the settings.

Every supported Kubernetes minor reads kubeadm.k8s.io/v1beta4, and 1.36/1.37 read nothing older (v1beta3 is
gone), so v1beta4 is the only shape written: extra arguments are a list of {name, value} pairs, and the
control-plane wait is InitConfiguration.timeouts.
"""
from __future__ import annotations

import re
from typing import Any

import yaml

from provision.inputs import versions
from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings
from provision.inputs.sources import resolve_sources
from provision.render.endpoint import API_SERVER_PORT, api_endpoint

CRI_SOCKET = "unix:///run/containerd/containerd.sock"
# The bootstrap token that `kubeadm init` creates anyway lives 15 minutes instead of kubeadm's 24 hours:
# workers join with a token minted on every run, never with this one.
INIT_TOKEN_TTL = "15m0s"
CONTROL_PLANE_WAIT = "5m0s"
# kubeadm's preflight check that refuses a cgroup v1 host from 1.35 (skipped only with kubelet.allow_cgroup_v1).
CGROUP_V1_PREFLIGHT_CHECK = "SystemVerification"


def ignored_preflight_errors(settings: Settings) -> list[str]:
    """The kubeadm preflight checks `init` and `join` skip: none, unless cgroup v1 hosts are allowed."""
    return [CGROUP_V1_PREFLIGHT_CHECK] if settings.kubelet.allow_cgroup_v1 else []


def _args(pairs: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in pairs.items()]


def _init_configuration(cluster: Cluster, settings: Settings) -> dict[str, Any]:
    """InitConfiguration: how the first control plane registers and where its API server listens."""
    control_plane = cluster.control_plane
    address = control_plane.cluster_address

    registration: dict[str, Any] = {"name": control_plane.name, "criSocket": CRI_SOCKET}
    if address:
        registration["kubeletExtraArgs"] = _args({"node-ip": address})
    if not cluster.workers:
        # A cluster of one node must run workloads on its control plane.
        registration["taints"] = []
    if ignored_preflight_errors(settings):
        registration["ignorePreflightErrors"] = ignored_preflight_errors(settings)

    init: dict[str, Any] = {
        "apiVersion": versions.KUBEADM_API_VERSION,
        "kind": "InitConfiguration",
        "bootstrapTokens": [{
            "description": "created by kubeadm init; cluster-bootstrap joins with tokens minted per run",
            "ttl": INIT_TOKEN_TTL,
            "usages": ["signing", "authentication"],
            "groups": ["system:bootstrappers:kubeadm:default-node-token"],
        }],
        "nodeRegistration": registration,
    }
    if address:
        init["localAPIEndpoint"] = {"advertiseAddress": address, "bindPort": API_SERVER_PORT}
    init["timeouts"] = {"controlPlaneComponentHealthCheck": CONTROL_PLANE_WAIT}
    return init


def init_config_documents(cluster: Cluster, settings: Settings, kubernetes_version: str) -> list[dict[str, Any]]:
    """InitConfiguration, ClusterConfiguration, KubeletConfiguration and KubeProxyConfiguration, as mappings, for
    `kubernetes_version`: the release (1.36.4) of the kubeadm installed on the control plane."""
    if not re.fullmatch(r"1\.[0-9]+\.[0-9]+", kubernetes_version, re.ASCII):
        raise ValueError(f"kubeadm is given an exact release, not {kubernetes_version!r}")
    kube = settings.kubernetes
    api_version = versions.KUBEADM_API_VERSION
    init = _init_configuration(cluster, settings)

    # The operator's machine reaches the API server on the inventory address, which may differ from the
    # advertised one (a public address in front of a private network): the certificate covers both. Every
    # control plane's names are listed (those that join later get certificates from this configuration, kept in
    # the cluster), and the VIP, which kube-vip moves between them.
    endpoint = api_endpoint(cluster, settings)
    cert_sans: list[str] = []
    for node in cluster.control_planes:
        for san in (node.name, node.address, node.cluster_address):
            if san and san not in cert_sans:
                cert_sans.append(san)
    if endpoint.host and endpoint.host not in cert_sans:
        cert_sans.append(endpoint.host)
    api_server: dict[str, Any] = {"certSANs": cert_sans}

    cluster_config: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "ClusterConfiguration",
        "clusterName": "kubernetes",
        "imageRepository": resolve_sources(settings).image_repository,
        "networking": {
            "podSubnet": kube.pod_cidr,
            "serviceSubnet": kube.service_cidr,
            "dnsDomain": kube.dns_domain,
        },
        "apiServer": api_server,
    }
    # Always the exact release installed: without one kubeadm takes "stable-1" and asks dl.k8s.io for it (a
    # timeout offline, and online a release the mirror or the installed kubeadm may not have).
    cluster_config["kubernetesVersion"] = f"v{kubernetes_version}"
    if endpoint.control_plane_endpoint:
        cluster_config["controlPlaneEndpoint"] = endpoint.control_plane_endpoint

    kubelet: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # containerd is configured with SystemdCgroup = true by the prepare phase; both must agree.
        "cgroupDriver": "systemd",
    }
    if settings.kubelet.allow_cgroup_v1:
        # kubeadm hands this to every node's kubelet (the kubelet-config ConfigMap), workers included.
        kubelet["failCgroupV1"] = False
    kube_proxy = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": kube.kube_proxy_mode,
        "clusterCIDR": kube.pod_cidr,
    }
    return [init, cluster_config, kubelet, kube_proxy]


def render_init_config(cluster: Cluster, settings: Settings, kubernetes_version: str) -> str:
    """The multi-document YAML file `kubeadm init --config` reads."""
    return yaml.safe_dump_all(init_config_documents(cluster, settings, kubernetes_version), sort_keys=False,
                              explicit_start=True)


def endpoint_change_problem(cluster_configuration: str, cluster: Cluster, settings: Settings) -> str | None:
    """Why the settings cannot be applied to a cluster kubeadm formed with `cluster_configuration` (the
    ClusterConfiguration of its kubeadm-config ConfigMap): kubeadm keeps controlPlaneEndpoint for good, and every
    certificate, kubeconfig and join names it. None when they agree (one control plane growing to three without a
    VIP keeps the first one's address, and agrees)."""
    try:
        formed = yaml.safe_load(cluster_configuration) or {}
    except yaml.YAMLError:
        return None
    was = formed.get("controlPlaneEndpoint") if isinstance(formed, dict) else None
    wanted = api_endpoint(cluster, settings).control_plane_endpoint
    if was == wanted or was is None or wanted is None:
        return None
    return (f"the cluster was formed with the control-plane endpoint {was}, the settings now give {wanted} "
            f"(control_plane.endpoint {settings.control_plane.endpoint}): kubeadm cannot move a formed cluster's "
            "endpoint; set control_plane back as it was, or `bootstrap down`, then `bootstrap up`")
