"""Kubernetes objects as the API server returns them (JSON, camelCase), for the stand-in API server to serve.

One builder per kind, with the defaults of a healthy object: a test names only what is wrong with it.
"""
from __future__ import annotations

from typing import Any

VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.4", "gitCommit": "a" * 40, "gitTreeState": "clean",
           "buildDate": "2024-12-10T11:37:46Z", "goVersion": "go1.22.9", "compiler": "gc", "platform": "linux/amd64"}
STARTED = "2025-01-01T00:00:00Z"


def node(name: str, gpus: int | None = None, *, ready: str = "True", reason: str = "KubeletReady",
         message: str = "kubelet is posting ready status", labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A node; `gpus` None advertises no nvidia.com/gpu at all (a node without the device plugin)."""
    allocatable = {"cpu": "4", "memory": "16Gi", "pods": "110"}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {"metadata": {"name": name, "labels": labels or {}},
            "status": {"allocatable": allocatable, "capacity": allocatable,
                       "conditions": [{"type": "MemoryPressure", "status": "False"},
                                      {"type": "Ready", "status": ready, "reason": reason, "message": message}]}}


def pod(name: str, node_name: str | None, labels: dict[str, str], *, namespace: str = "kube-system",
        phase: str = "Running", container: str = "main", image: str = "registry.k8s.io/x:1",
        limits: dict[str, str] | None = None, waiting: str | None = None, waiting_message: str | None = None,
        terminated: dict[str, Any] | None = None, restarts: int = 0, ready: bool = True, owner: str | None = None,
        unschedulable: str | None = None) -> dict[str, Any]:
    """A pod with one container. Its state: `terminated` (the fields of a terminated state), else `waiting`
    (a reason), else running when the phase is Running. `unschedulable` is the scheduler's message for a pod
    it found no node for (such a pod has no node and no container statuses yet)."""
    state: dict[str, Any] = {"running": {"startedAt": STARTED}} if phase == "Running" else {}
    if waiting:
        state = {"waiting": {"reason": waiting} | ({"message": waiting_message} if waiting_message is not None else {})}
    if terminated:
        state = {"terminated": {"startedAt": STARTED, "finishedAt": "2025-01-01T00:01:00Z", **terminated}}
    conditions = []
    if unschedulable:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": unschedulable})
        node_name = None
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": "x", "uid": "1"}]
    spec_container: dict[str, Any] = {"name": container, "image": image}
    if limits:
        spec_container["resources"] = {"limits": limits}
    return {"metadata": metadata,
            "spec": {"nodeName": node_name, "containers": [spec_container]},
            "status": {"phase": phase, "conditions": conditions,
                       "containerStatuses": [] if unschedulable else [{
                           "name": container, "image": image, "imageID": "",
                           "ready": ready and phase == "Running" and not waiting,
                           "restartCount": restarts, "state": state}]}}


def healthy_pods(gpu_nodes: tuple[str, ...] = ("w1",)) -> list[dict[str, Any]]:
    """kube-system of a healthy cluster: control plane cp1, worker w1, a device plugin on each GPU node."""
    pods = [pod("kube-apiserver-cp1", "cp1", {"component": "kube-apiserver"}),
            pod("coredns-5d78c9869d-abcde", "w1", {"k8s-app": "kube-dns"}),
            pod("calico-node-aaaaa", "cp1", {"k8s-app": "calico-node"}, owner="DaemonSet"),
            pod("calico-node-bbbbb", "w1", {"k8s-app": "calico-node"}, owner="DaemonSet"),
            pod("kube-proxy-ccccc", "w1", {"k8s-app": "kube-proxy"}, owner="DaemonSet")]
    pods += [pod(f"nvidia-device-plugin-{n}", n, {"app.kubernetes.io/name": "nvidia-device-plugin"}, owner="DaemonSet")
             for n in gpu_nodes]
    return pods


def crd(name: str, *, established: bool = True) -> dict[str, Any]:
    """A CustomResourceDefinition named plural.group, Established (or still accepting its names)."""
    plural, group = name.split(".", 1)
    condition = {"type": "Established", "status": "True" if established else "False",
                 "reason": "InitialNamesAccepted" if established else "Installing",
                 "message": "the initial names have been accepted" if established else "the names are not accepted yet"}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": name},
            "spec": {"group": group, "scope": "Namespaced", "names": {"plural": plural, "kind": plural.title()},
                     "versions": [{"name": "v1", "served": True, "storage": True}]},
            "status": {"conditions": [condition]}}


def deployment(name: str, namespace: str, image: str, *, ready: int = 1, replicas: int = 1) -> dict[str, Any]:
    """A Deployment of one container, Available when every replica is ready."""
    available = ready >= replicas
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "main", "image": image}]}}},
            "status": {"replicas": replicas, "readyReplicas": ready,
                       "conditions": [{"type": "Available", "status": "True" if available else "False",
                                       "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                                       "message": "Deployment has minimum availability." if available else
                                       "Deployment does not have minimum availability."}]}}


def endpoint_slice(service: str, ready: int, not_ready: int = 0, namespace: str = "kube-system") -> dict[str, Any]:
    """A Service's EndpointSlice with `ready` ready endpoints and `not_ready` others."""
    endpoints = [{"addresses": [f"10.244.0.{i + 10}"], "conditions": {"ready": i < ready}}
                 for i in range(ready + not_ready)]
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": f"{service}-x7k2p", "namespace": namespace,
                         "labels": {"kubernetes.io/service-name": service}},
            "endpoints": endpoints, "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}


def event(name: str, involved: dict[str, str], reason: str, message: str, *, kind: str = "Warning",
          namespace: str = "kube-system") -> dict[str, Any]:
    """An event about `involved` (kind, name, namespace)."""
    return {"metadata": {"name": name, "namespace": namespace}, "involvedObject": involved, "reason": reason,
            "message": message, "type": kind, "lastTimestamp": STARTED, "count": 1}


def daemon_set(name: str, namespace: str, image: str, *, ready: int = 1, scheduled: int = 1) -> dict[str, Any]:
    """A DaemonSet of one container, with `ready` of its `scheduled` pods ready."""
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "main", "image": image}]}}},
            "status": {"desiredNumberScheduled": scheduled, "currentNumberScheduled": scheduled,
                       "numberMisscheduled": 0, "numberReady": ready}}
