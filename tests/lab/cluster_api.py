"""A running cluster's API, as the stand-in API server (tests/support/apiserver.py) serves it for a cluster of lab
nodes (tests/lab/cluster.py): the upgrade and certificate tests, and the upgrade's benchmark.

The nodes are real lab machines with the stand-in kubeadm, kubelet and kubectl (tests/lab/kube_acting.py); what
the API says about them is read from them when asked: the API server's version is the image of the first control
plane's kube-apiserver manifest, a Node's kubelet version the release its stand-in kubelet started with, etcd's
members (an exec into an etcd pod, over a real websocket) the stand-in's member list. What only the API holds is
kept here, changed only by what the code asks: cordons, and the pods of each node with the disruption budgets that
hold some back (an eviction of one of those answers 429, as the API server does). The kubeadm-config ConfigMap and
kube-proxy's DaemonSet are what the first control plane's kubeadm last uploaded (init, `upgrade apply`'s upload-config
and addon phases); since the stand-in kubeadm cannot reach this server, the ConfigMap it would fetch is copied to the
other control planes before every request is answered (`share_config`). Every cordon, uncordon and
eviction is recorded with its time, to be put in one order with the nodes' own calls.
"""
from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.apiserver import FakeApiServer, RecordedRequest, Response, object_list, status
from tests.support.kube_objects import VERSION, node, pod

WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
EXEC_PROTOCOL = "v4.channel.k8s.io"


def _frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked websocket frame, as a server sends it."""
    size = len(payload)
    head = bytes([0x80 | opcode])
    if size < 126:
        head += bytes([size])
    elif size < 1 << 16:
        head += bytes([126]) + size.to_bytes(2, "big")
    else:
        head += bytes([127]) + size.to_bytes(8, "big")
    return head + payload


class ExecApiServer(FakeApiServer):
    """The stand-in API server, answering `exec` into a pod over a websocket (the channel.k8s.io protocol kubectl
    and the kubernetes client speak): `on_exec(pod, command)` gives the command's stdout."""

    def __init__(self, on_exec: Callable[[str, list[str]], str]) -> None:
        super().__init__()
        self.on_exec = on_exec
        # Called before each request is answered.
        self.before_request: Callable[[], None] | None = None

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        if self.before_request is not None:
            self.before_request()
        parts = urlsplit(handler.path)
        if handler.headers.get("Upgrade", "").lower() != "websocket" or not parts.path.endswith("/exec"):
            super()._handle(handler)
            return
        query = parse_qs(parts.query)
        pod_name = parts.path.split("/")[-2]
        with self._lock:
            self.requests.append(RecordedRequest("GET", parts.path, query, b"", {"pod": pod_name}))
        accept = base64.b64encode(hashlib.sha1((handler.headers["Sec-WebSocket-Key"] + WEBSOCKET_GUID).encode())
                                  .digest()).decode()
        handler.wfile.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: {EXEC_PROTOCOL}\r\n\r\n")
                            .encode())
        output = self.on_exec(pod_name, query.get("command", []))
        handler.wfile.write(_frame(0x2, b"\x01" + output.encode()))
        handler.wfile.write(_frame(0x2, b"\x03" + json.dumps({"metadata": {}, "status": "Success"}).encode()))
        handler.wfile.write(_frame(0x8, (1000).to_bytes(2, "big")))
        handler.wfile.flush()
        handler.close_connection = True


@dataclass
class Workload:
    name: str
    namespace: str
    node: str
    # The disruption budget's message while it holds the pod back (None: evictions go through).
    held_by: str | None = None
    # It mounts an emptyDir volume (a training job's scratch and checkpoints).
    empty_dir: bool = False


@dataclass
class FakeCluster:
    """See the module docstring. `kubelet(name)` reads a node's running kubelet release, `api_version()` the API
    server's, `etcd_members()` etcd's member names (all from the lab nodes)."""

    server: ExecApiServer
    control_planes: tuple[str, ...]
    workers: tuple[str, ...]
    kubelet: Callable[[str], str | None]
    api_version: Callable[[], str]
    etcd_members: Callable[[], list[str]]
    # The kubeadm-config ConfigMap's ClusterConfiguration (YAML) and kube-proxy's image; None: there is none.
    kubeadm_config: Callable[[], str | None] = lambda: None
    kube_proxy_image: Callable[[], str | None] = lambda: None
    # Copies the ConfigMap to every control plane's kubeadm (see the module docstring).
    share_config: Callable[[], None] | None = None
    unschedulable: dict[str, bool] = field(default_factory=dict)
    # A node's Ready condition (default True): the kubelet posts it once it runs and reaches the API.
    ready: dict[str, bool] = field(default_factory=dict)
    # GPU nodes -> the nvidia.com/gpu their device plugin advertises (allocatable); each runs a device plugin pod,
    # and its deletion calls `on_delete` (a test moves what the restarted plugin advertises there).
    gpus: dict[str, int] = field(default_factory=dict)
    on_delete: Callable[[str, str], None] | None = None
    workloads: dict[str, Workload] = field(default_factory=dict)
    # (time, action, subject): cordon NODE, uncordon NODE, evict NS/POD, held NS/POD.
    events: list[tuple[float, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def nodes(self) -> tuple[str, ...]:
        return (*self.control_planes, *self.workers)

    # --- what the test sets up ------------------------------------------------------------------------------
    def run(self, name: str, on: str, *, namespace: str = "default", held_by: str | None = None,
            empty_dir: bool = False) -> None:
        """A pod of a Deployment on node `on`; `held_by`: a disruption budget refuses its eviction, saying this;
        `empty_dir`: it mounts an emptyDir volume."""
        with self.lock:
            self.workloads[f"{namespace}/{name}"] = Workload(name, namespace, on, held_by, empty_dir)

    def release(self, key: str) -> None:
        """The budget lets the pod go (the workload was scaled up)."""
        with self.lock:
            self.workloads[key].held_by = None

    def actions(self, kinds: tuple[str, ...] = ("cordon", "uncordon", "evict", "delete")) -> list[tuple[float, str]]:
        """(time, 'ACTION SUBJECT') of what the code asked, in order."""
        with self.lock:
            return [(at, f"{action} {subject}") for at, action, subject in self.events if action in kinds]

    # --- what the API answers -------------------------------------------------------------------------------
    def _node(self, name: str) -> dict[str, Any]:
        labels = {"node-role.kubernetes.io/control-plane": ""} if name in self.control_planes else {}
        found = node(name, self.gpus.get(name), labels=labels, ready="True" if self.ready.get(name, True) else "False")
        found["spec"] = {"unschedulable": self.unschedulable.get(name, False)}
        found["status"]["nodeInfo"] = {
            "kubeletVersion": self.kubelet(name) or "", "kubeProxyVersion": "", "architecture": "amd64",
            "bootID": f"boot-{name}", "containerRuntimeVersion": "containerd://2.1.5", "kernelVersion": "6.1.0",
            "machineID": f"machine-{name}", "operatingSystem": "linux", "osImage": "Debian GNU/Linux 12 (bookworm)",
            "systemUUID": f"uuid-{name}"}
        return found

    def _pods_on(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            mine = [w for w in self.workloads.values() if w.node == name]
        pods = [pod(w.name, name, {"app": w.name.rsplit("-", 1)[0]}, namespace=w.namespace, owner="ReplicaSet")
                for w in mine]
        for found, workload in zip(pods, mine, strict=True):
            if workload.empty_dir:
                found["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        pods.append(pod(f"calico-node-{name}", name, {"k8s-app": "calico-node"}, owner="DaemonSet"))
        return pods

    def _system_pods(self) -> list[dict[str, Any]]:
        pods = []
        for name in self.nodes:
            pods.append(pod(f"calico-node-{name}", name, {"k8s-app": "calico-node"}, owner="DaemonSet"))
            pods.append(pod(f"kube-proxy-{name}", name, {"k8s-app": "kube-proxy"}, owner="DaemonSet"))
            # With several control planes and no VIP, every node's local API proxy (a static pod).
            proxy = pod(f"cb-api-proxy-{name}", name, {"app.kubernetes.io/name": "cb-api-proxy"})
            proxy["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
            pods.append(proxy)
        for name in self.gpus:
            pods.append(pod(f"nvidia-device-plugin-{name}", name, {"app.kubernetes.io/name": "nvidia-device-plugin"},
                            owner="DaemonSet"))
        for name in self.control_planes:
            for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"):
                static = pod(f"{component}-{name}", name, {"component": component, "tier": "control-plane"})
                static["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
                pods.append(static)
        pods.append(pod("coredns-5d78c9869d-abcde", self.nodes[-1], {"k8s-app": "kube-dns"}, owner="ReplicaSet"))
        return pods

    def _evict(self, request: RecordedRequest) -> Response:
        key = f"{request.params['ns']}/{request.params['name']}"
        with self.lock:
            workload = self.workloads.get(key)
            if workload is None:
                return status(404, "NotFound", f'pods "{request.params["name"]}" not found')
            if workload.held_by:
                self.events.append((time.time(), "held", key))
                body = status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption "
                                                      "budget.").body
                body["details"] = {"causes": [{"reason": "DisruptionBudget", "message": workload.held_by}]}
                return Response(429, body)
            self.events.append((time.time(), "evict", key))
            # Gone from the node (where its ReplicaSet starts it again is not kept here).
            del self.workloads[key]
        return Response(201, request.json)

    def _patch_node(self, request: RecordedRequest) -> Any:
        name = request.params["name"]
        if name not in self.nodes:
            return status(404, "NotFound", f'nodes "{name}" not found')
        wanted = bool((request.json.get("spec") or {}).get("unschedulable"))
        with self.lock:
            self.unschedulable[name] = wanted
            self.events.append((time.time(), "cordon" if wanted else "uncordon", name))
        return self._node(name)

    def _kube_system(self, request: RecordedRequest) -> Any:
        selector = request.query_value("labelSelector")
        on = (request.query_value("fieldSelector") or "").removeprefix("spec.nodeName=")
        pods = self._system_pods()
        if selector:
            key, _, value = selector.partition("=")
            pods = [p for p in pods if p["metadata"]["labels"].get(key) == value]
        if on:
            pods = [p for p in pods if p["spec"]["nodeName"] == on]
        return object_list("PodList", pods)

    def _delete_system_pod(self, request: RecordedRequest) -> Any:
        name = request.params["name"]
        with self.lock:
            self.events.append((time.time(), "delete", f"kube-system/{name}"))
        if self.on_delete is not None:
            self.on_delete("kube-system", name)
        return {"metadata": {"name": name, "namespace": "kube-system"}}

    def _members(self) -> str:
        return json.dumps({"header": {"cluster_id": 1}, "members": [
            {"ID": 1000 + index, "name": name, "peerURLs": [f"https://{name}:2380"]}
            for index, name in enumerate(self.etcd_members())]})

    def _config_map(self, request: RecordedRequest) -> Any:
        text = self.kubeadm_config()
        if text is None:
            return status(404, "NotFound", 'configmaps "kubeadm-config" not found')
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubeadm-config",
                                                                      "namespace": "kube-system"},
                "data": {"ClusterConfiguration": text}}

    def _kube_proxy(self, request: RecordedRequest) -> Any:
        image = self.kube_proxy_image()
        if image is None:
            return status(404, "NotFound", 'daemonsets.apps "kube-proxy" not found')
        labels = {"k8s-app": "kube-proxy"}
        return {"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "kube-proxy", "namespace": "kube-system", "labels": labels},
                "spec": {"selector": {"matchLabels": labels}, "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "kube-proxy", "image": image}]}}}}

    def install(self) -> FakeCluster:
        """Declare every route on the server."""
        add = self.server.add
        self.server.before_request = self.share_config
        add("GET", "/api/v1/namespaces/kube-system/configmaps/kubeadm-config", self._config_map)
        add("GET", "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy", self._kube_proxy)
        add("GET", "/version/", lambda r: VERSION | {"gitVersion": self.api_version(),
                                                     "minor": self.api_version().split(".")[1]})
        add("GET", "/api/v1/nodes", lambda r: object_list("NodeList", [self._node(n) for n in self.nodes]))
        add("GET", "/api/v1/nodes/{name}", lambda r: self._node(r.params["name"]) if r.params["name"] in self.nodes
            else status(404, "NotFound", f'nodes "{r.params["name"]}" not found'))
        add("PATCH", "/api/v1/nodes/{name}", self._patch_node)
        add("GET", "/api/v1/pods", lambda r: object_list("PodList", self._pods_on(
            (r.query_value("fieldSelector") or "").removeprefix("spec.nodeName="))))
        add("POST", "/api/v1/namespaces/{ns}/pods/{name}/eviction", self._evict)
        add("GET", "/api/v1/namespaces/kube-system/pods", self._kube_system)
        add("DELETE", "/api/v1/namespaces/kube-system/pods/{name}", self._delete_system_pod)
        # The DNS probe of verify: created, Succeeded at once, deleted.
        add("DELETE", "/api/v1/namespaces/kube-system/pods", object_list("PodList", []))
        add("POST", "/api/v1/namespaces/kube-system/pods",
            lambda r: Response(201, r.json | {"metadata": r.json["metadata"] | {"name": "dns-probe"}}))
        add("GET", "/api/v1/namespaces/kube-system/pods/dns-probe",
            {"metadata": {"name": "dns-probe", "namespace": "kube-system"},
             "spec": {"nodeName": self.nodes[-1], "containers": [{"name": "nslookup"}]},
             "status": {"phase": "Succeeded"}})
        add("DELETE", "/api/v1/namespaces/kube-system/pods/dns-probe", {"metadata": {"name": "dns-probe"}})
        self.server.on_exec = lambda pod_name, command: self._members() if "member" in command else ""
        return self
