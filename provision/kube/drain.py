"""Take nodes out of a cluster through the API: cordon, evict their pods, delete the Node objects.

Used before `kubeadm reset` so that workloads move away cleanly. Where the API does not answer (a cluster
half built or already gone) there is nothing to drain, and reset goes on without it.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.kube.pods import owner_kinds, pod_annotations, pod_name, pod_namespace
from provision.kube.verify import ApiUnreachable, call_api


@dataclass
class DrainResult:
    drained: list[str] = field(default_factory=list)
    not_registered: list[str] = field(default_factory=list)
    # Pods deleted outright because eviction did not finish in time (a disruption budget, a stuck finalizer).
    forced: list[str] = field(default_factory=list)
    api_unreachable: str | None = None

    def summary(self) -> str:
        if self.api_unreachable:
            return f"API not answering, nothing drained ({self.api_unreachable})"
        parts = [f"drained and deleted: {', '.join(self.drained) or 'none'}"]
        if self.not_registered:
            parts.append(f"not in the cluster: {', '.join(self.not_registered)}")
        if self.forced:
            parts.append(f"{len(self.forced)} pods deleted after eviction timed out")
        return "; ".join(parts)


def _evictable(pod: client.V1Pod) -> bool:
    if pod_annotations(pod).get("kubernetes.io/config.mirror"):
        return False  # static pods belong to the kubelet, not to the API
    return "DaemonSet" not in owner_kinds(pod)


def _pods_on(api: client.ApiClient, node: str) -> list[client.V1Pod]:
    core = client.CoreV1Api(api)
    pods = call_api(api, core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}")
    return [p for p in pods.items if _evictable(p)]


def drain_node(api: client.ApiClient, node: str, *, timeout_s: float, result: DrainResult,
               sleep: Callable[[float], None] = time.sleep) -> None:
    core = client.CoreV1Api(api)
    try:
        call_api(api, core.patch_node, node, {"spec": {"unschedulable": True}})
    except ApiException as exc:
        if exc.status == 404:
            result.not_registered.append(node)
            return
        raise
    deadline = time.monotonic() + timeout_s
    while True:
        pods = _pods_on(api, node)
        if not pods:
            break
        if time.monotonic() >= deadline:
            for pod in pods:
                name, namespace = pod_name(pod), pod_namespace(pod)
                try:
                    call_api(api, core.delete_namespaced_pod, name, namespace, grace_period_seconds=0)
                    result.forced.append(f"{namespace}/{name}")
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            break
        for pod in pods:
            name, namespace = pod_name(pod), pod_namespace(pod)
            eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
            try:
                call_api(api, core.create_namespaced_pod_eviction, name, namespace, eviction)
            except ApiException as exc:
                # 429: a disruption budget says not yet; 404: already gone. Both: look again shortly.
                if exc.status not in (404, 429):
                    raise
        sleep(1.0)
    try:
        call_api(api, core.delete_node, node)
    except ApiException as exc:
        if exc.status != 404:
            raise
    result.drained.append(node)


def drain_and_delete(api: client.ApiClient | None, nodes: Iterable[str], *, timeout_s: float = 120,
                     sleep: Callable[[float], None] = time.sleep) -> DrainResult:
    """Drain then delete each node; an unreachable API (or no kubeconfig: api None) drains nothing."""
    result = DrainResult()
    if api is None:
        result.api_unreachable = "no kubeconfig for this cluster"
        return result
    try:
        call_api(api, client.VersionApi(api).get_code)
        for node in nodes:
            drain_node(api, node, timeout_s=timeout_s, result=result, sleep=sleep)
    except ApiUnreachable as exc:
        result.api_unreachable = str(exc)
    return result
