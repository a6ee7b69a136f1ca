"""What an upgrade reads from the API and waits for there: the API server's version, each node's kubelet and
whether it is cordoned, what `kubeadm upgrade apply` left in the cluster (the kubeadm-config ConfigMap's
kubernetesVersion, kube-proxy's image), and a node's kubelet back on a new release after its restart."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.errors import BootstrapError
from provision.kube.client import call_api

# Where kubeadm keeps the cluster's configuration (its upload-config phase writes it; `kubeadm upgrade node` reads
# it: cmd/kubeadm/app/cmd/upgrade/node.go, FetchInitConfigurationFromCluster), and kube-proxy's DaemonSet (its
# addon phase, the last of `upgrade apply` but post-upgrade, sets the image to the release).
KUBEADM_CONFIG = ("kube-system", "kubeadm-config", "ClusterConfiguration")
KUBE_PROXY = ("kube-system", "kube-proxy")


@dataclass(frozen=True)
class NodeStatus:
    # status.nodeInfo.kubeletVersion: the kubelet that runs and reports (v1.36.4).
    kubelet: str | None
    unschedulable: bool
    ready: bool


def api_server_version(api: client.ApiClient) -> str:
    return str(call_api(api, client.VersionApi(api).get_code).git_version)


def _status(node: client.V1Node) -> NodeStatus:
    info = node.status.node_info if node.status else None
    conditions = (node.status.conditions if node.status else None) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return NodeStatus(kubelet=info.kubelet_version if info else None,
                      unschedulable=bool(node.spec and node.spec.unschedulable), ready=ready)


def node_statuses(api: client.ApiClient) -> dict[str, NodeStatus]:
    """Every Node of the cluster by name."""
    nodes = call_api(api, client.CoreV1Api(api).list_node).items
    return {n.metadata.name: _status(n) for n in nodes if n.metadata and n.metadata.name}


def wait_for_kubelet(api: client.ApiClient, node: str, tag: str, *, timeout_s: float,
                     sleep: Callable[[float], None] = time.sleep,
                     on_message: Callable[[str], None] | None = None) -> None:
    """Until the node's kubelet reports `tag` (v1.36.4) and the node is Ready; BootstrapError past timeout_s."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout_s
    while True:
        status = _status(call_api(api, core.read_node, node))
        if status.kubelet == tag and status.ready:
            return
        seen = f"its kubelet reports {status.kubelet or 'no version'}, {'Ready' if status.ready else 'not Ready'}"
        if time.monotonic() >= deadline:
            raise BootstrapError(f"{node}: after its upgrade to {tag} {seen} after {timeout_s:g} s: see "
                                 f"`journalctl -u kubelet` on {node}, then re-run the upgrade with the same --to "
                                 f"({node} stays cordoned)")
        if on_message:
            on_message(f"waiting: {node}: {seen}, waiting for {tag} and Ready")
        sleep(min(2.0, max(0.0, deadline - time.monotonic())))


@dataclass(frozen=True)
class AppliedConfig:
    """What `kubeadm upgrade apply` leaves in the cluster, as the API holds it."""

    # The kubeadm-config ConfigMap's ClusterConfiguration.kubernetesVersion (v1.36.4); None: no such ConfigMap, or
    # no version in it.
    kubernetes_version: str | None
    # The tag of kube-proxy's DaemonSet image (v1.36.4); None where its image names none.
    kube_proxy: str | None
    # Whether the cluster runs kube-proxy's DaemonSet at all (kubeadm leaves an add-on it does not find alone).
    kube_proxy_installed: bool

    def behind(self, tag: str) -> list[str]:
        """What is not at `tag` yet (empty: apply's phases all ran for it), for people."""
        found = []
        if self.kubernetes_version != tag:
            found.append(f"kubeadm-config's kubernetesVersion is {self.kubernetes_version or 'not set'}")
        if self.kube_proxy_installed and self.kube_proxy != tag:
            found.append(f"kube-proxy's image is {self.kube_proxy or 'untagged'}")
        return found


def _image_tag(image: str | None) -> str | None:
    """registry.k8s.io/kube-proxy:v1.36.4 (or with @sha256:...) -> v1.36.4."""
    _, _, tag = (image or "").rsplit("/", 1)[-1].partition(":")
    return tag.split("@")[0] or None


def applied_config(api: client.ApiClient) -> AppliedConfig:
    """The kubeadm-config ConfigMap's kubernetesVersion and kube-proxy's image, read from the API."""
    namespace, name, key = KUBEADM_CONFIG
    version = None
    try:
        config_map = call_api(api, client.CoreV1Api(api).read_namespaced_config_map, name, namespace)
        document = yaml.safe_load((config_map.data or {}).get(key) or "") or {}
        found = document.get("kubernetesVersion") if isinstance(document, dict) else None
        version = found if isinstance(found, str) else None
    except ApiException as exc:
        if exc.status != 404:
            raise
    except yaml.YAMLError:
        version = None
    namespace, name = KUBE_PROXY
    try:
        daemon_set = call_api(api, client.AppsV1Api(api).read_namespaced_daemon_set, name, namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
        return AppliedConfig(version, None, kube_proxy_installed=False)
    containers = daemon_set.spec.template.spec.containers if daemon_set.spec and daemon_set.spec.template.spec \
        else []
    image = next((c.image for c in containers if c.name == "kube-proxy"), containers[0].image if containers else None)
    return AppliedConfig(version, _image_tag(image), kube_proxy_installed=True)


def wait_for_allocatable(api: client.ApiClient, node: str, expected: Mapping[str, int], *, timeout_s: float,
                         sleep: Callable[[float], None] = time.sleep,
                         on_message: Callable[[str], None] | None = None) -> None:
    """Until the node is Ready and allocates at least `expected` of each resource (nvidia.com/gpu: 8, as the device
    plugin advertises them); BootstrapError past timeout_s."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout_s
    while True:
        found = call_api(api, core.read_node, node)
        status = _status(found)
        allocatable = (found.status.allocatable if found.status else None) or {}
        short = {resource: int(str(allocatable.get(resource, "0"))) for resource, count in expected.items()
                 if int(str(allocatable.get(resource, "0"))) < count}
        if status.ready and not short:
            return
        seen = ", ".join(f"{count} {resource} allocatable of {expected[resource]}" for resource, count in short.items())
        seen = seen or "the node is not Ready"
        if time.monotonic() >= deadline:
            raise BootstrapError(f"{node}: after its NVIDIA driver upgrade {seen} after {timeout_s:g} s: see the "
                                 f"nvidia-device-plugin pod's log there and `nvidia-smi` on {node}, then re-run the "
                                 f"upgrade ({node} stays cordoned)")
        if on_message:
            on_message(f"waiting: {node}: {seen}")
        sleep(min(2.0, max(0.0, deadline - time.monotonic())))


def restart_pods(api: client.ApiClient, node: str, namespace: str, selector: str) -> list[str]:
    """Delete the pods of `selector` on `node` (their DaemonSet starts them again, against what changed there:
    the device plugin, after a new NVIDIA driver); returns their names."""
    core = client.CoreV1Api(api)
    pods = call_api(api, core.list_namespaced_pod, namespace, label_selector=selector,
                    field_selector=f"spec.nodeName={node}").items
    names = [p.metadata.name for p in pods if p.metadata and p.metadata.name]
    for name in names:
        try:
            call_api(api, core.delete_namespaced_pod, name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return names
