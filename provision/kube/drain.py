"""Take nodes out of service through the API: cordon, evict their pods (respecting PodDisruptionBudgets: the
eviction API refuses what a budget holds back), and either delete the Node objects (before `kubeadm reset`) or
uncordon them again (after an upgrade).

Before a reset, where the API does not answer (a cluster half built or already gone) there is nothing to drain, and
reset goes on without it; pods a budget still holds back at the timeout are deleted. Before an upgrade nothing is
forced: past the timeout the drain stops, naming the pod that blocks and why; and the pods `kubectl drain` refuses
(staging/src/k8s.io/kubectl/pkg/drain/filters.go) are refused by name before any eviction: a running pod no
controller owns (unreplicatedFilter), and a running pod with an emptyDir volume (localStorageFilter: its data is
lost with the pod) unless `--delete-emptydir-data` is given, as kubectl's flag of that name allows it.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.errors import BootstrapError
from provision.kube.client import ApiUnreachable, call_api
from provision.kube.pods import owner_kinds, pod_annotations, pod_name, pod_namespace, pod_phase


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


@dataclass(frozen=True)
class Blocked:
    """A pod still on the node: namespace/name, and why it is not evicted (the API's word)."""

    pod: str
    reason: str


def _refusal(exc: ApiException) -> str:
    """What a refused eviction says: the disruption budget's own message where the API gives one."""
    try:
        body = json.loads(exc.body or "{}")
    except (ValueError, TypeError):
        body = {}
    causes = [c.get("message") for c in (body.get("details") or {}).get("causes") or []
              if isinstance(c, dict) and c.get("message")]
    return str(causes[0] if causes else body.get("message") or exc.reason or f"HTTP {exc.status}")


def _evict_until_gone(api: client.ApiClient, node: str, deadline: float, sleep: Callable[[float], None],
                      on_wait: Callable[[Blocked], None] | None = None,
                      first_look: Callable[[list[client.V1Pod]], None] | None = None) -> list[Blocked]:
    """Ask the eviction API for every evictable pod on the node, again each second, until none is left (returns [])
    or the deadline passes (returns those still there, each with the last reason it stayed). `first_look` sees the
    pods found first, before any eviction (it may refuse them)."""
    core = client.CoreV1Api(api)
    reasons: dict[str, str] = {}
    while True:
        pods = _pods_on(api, node)
        if first_look is not None:
            first_look(pods)
            first_look = None
        if not pods:
            return []
        if time.monotonic() >= deadline:
            return [Blocked(f"{pod_namespace(p)}/{pod_name(p)}", reasons.get(f"{pod_namespace(p)}/{pod_name(p)}",
                                                                             "still terminating")) for p in pods]
        for pod in pods:
            name, namespace = pod_name(pod), pod_namespace(pod)
            eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
            try:
                call_api(api, core.create_namespaced_pod_eviction, name, namespace, eviction)
                reasons[f"{namespace}/{name}"] = "evicted, still terminating"
            except ApiException as exc:
                # 429: a disruption budget says not yet; 404: already gone. Both: look again shortly.
                if exc.status not in (404, 429):
                    raise
                if exc.status == 429:
                    reasons[f"{namespace}/{name}"] = _refusal(exc)
                    if on_wait:
                        on_wait(Blocked(f"{namespace}/{name}", reasons[f"{namespace}/{name}"]))
        sleep(1.0)


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
    for blocked in _evict_until_gone(api, node, time.monotonic() + timeout_s, sleep):
        namespace, name = blocked.pod.split("/", 1)
        try:
            call_api(api, core.delete_namespaced_pod, name, namespace, grace_period_seconds=0)
            result.forced.append(blocked.pod)
        except ApiException as exc:
            if exc.status != 404:
                raise
    try:
        call_api(api, core.delete_node, node)
    except ApiException as exc:
        if exc.status != 404:
            raise
    result.drained.append(node)


def is_unschedulable(api: client.ApiClient, node: str) -> bool:
    """Whether the node is cordoned (spec.unschedulable)."""
    current = call_api(api, client.CoreV1Api(api).read_node, node)
    return bool(current.spec is not None and current.spec.unschedulable)


def _schedulable(api: client.ApiClient, node: str, unschedulable: bool) -> bool:
    """Set the node's spec.unschedulable, sending nothing when it is so already; returns what it was."""
    was = is_unschedulable(api, node)
    if was != unschedulable:
        call_api(api, client.CoreV1Api(api).patch_node, node, {"spec": {"unschedulable": unschedulable}})
    return was


def cordon(api: client.ApiClient, node: str) -> bool:
    """Mark the node unschedulable; returns whether it was already (then nothing is sent)."""
    return _schedulable(api, node, True)


def uncordon(api: client.ApiClient, node: str) -> bool:
    """Let pods be scheduled on the node again; returns whether it had to be changed."""
    return _schedulable(api, node, False)


def _finished(pod: client.V1Pod) -> bool:
    return pod_phase(pod) in ("Succeeded", "Failed")


def with_local_storage(pods: Iterable[client.V1Pod]) -> list[str]:
    """Running pods with an emptyDir volume (kubectl drain's localStorageFilter: finished pods can go)."""
    return [f"{pod_namespace(p)}/{pod_name(p)}" for p in pods if not _finished(p)
            and any(v.empty_dir is not None for v in ((p.spec.volumes if p.spec else None) or []))]


def local_storage_refusal(node: str, pods: list[str]) -> str:
    """kubectl drain's words for pods with local storage, with the fix for an upgrade."""
    return (f"drain of {node}: cannot evict pods with local storage (emptyDir): {', '.join(pods)}: their data is "
            "deleted with them (a training job's checkpoints and scratch live there); move the data to a volume that "
            "outlives the pod, or pass --delete-emptydir-data to evict them anyway (as kubectl drain's flag of that "
            "name), then re-run the upgrade with the same --to")


def unmanaged(pods: Iterable[client.V1Pod]) -> list[str]:
    """Pods no controller would start again elsewhere (kubectl drain refuses them too without --force): running
    ones without an owner."""
    return [f"{pod_namespace(p)}/{pod_name(p)}" for p in pods if not owner_kinds(p) and not _finished(p)]


def drain_refusal(api: client.ApiClient, node: str, *, delete_emptydir_data: bool) -> str | None:
    """What kubectl drain would refuse on `node` before evicting anything (None: nothing): read before the node is
    cordoned, so a refused node is left as it was."""
    return _refused(node, _pods_on(api, node), delete_emptydir_data=delete_emptydir_data)


def _refused(node: str, pods: list[client.V1Pod], *, delete_emptydir_data: bool) -> str | None:
    found = unmanaged(pods)
    if found:
        return (f"drain of {node}: pod {found[0]} is managed by no controller, so nothing would start it again "
                "elsewhere (kubectl drain refuses it too): delete it or run it under a Deployment, then re-run the "
                "upgrade with the same --to")
    local = [] if delete_emptydir_data else with_local_storage(pods)
    return local_storage_refusal(node, local) if local else None


def drain_for_upgrade(api: client.ApiClient, node: str, *, timeout_s: float, sleep: Callable[[float], None] = time.sleep,
                      on_wait: Callable[[Blocked], None] | None = None, delete_emptydir_data: bool = False) -> None:
    """Evict every pod of a cordoned node but DaemonSets' and static pods, as long as their disruption budgets allow,
    within timeout_s; nothing is forced. Raises BootstrapError naming the pod that blocks and why, or the pods
    kubectl drain refuses (no controller; an emptyDir volume without `delete_emptydir_data`), before any eviction."""
    def refuse(pods: list[client.V1Pod]) -> None:
        refusal = _refused(node, pods, delete_emptydir_data=delete_emptydir_data)
        if refusal:
            raise BootstrapError(f"{refusal} ({node} stays cordoned)")
    blocked = _evict_until_gone(api, node, time.monotonic() + timeout_s, sleep, on_wait, refuse)
    if blocked:
        more = f" (and {len(blocked) - 1} more)" if len(blocked) > 1 else ""
        raise BootstrapError(f"drain of {node} timed out after {timeout_s:g} s: pod {blocked[0].pod} is not evicted: "
                             f"{blocked[0].reason}{more}; let its disruption budget allow it (scale the workload up, "
                             "or relax the budget), or raise upgrade.drain_timeout_s, then re-run the upgrade with the "
                             f"same --to ({node} stays cordoned, nothing on it was upgraded)")


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
