"""Draining nodes before reset, through the real kubernetes client against a stand-in API server: cordon,
evict what is not a DaemonSet's or a static pod, delete the Node; an API that does not answer drains nothing."""
from __future__ import annotations

import socket
from pathlib import Path

from provision.kube.client import load_api_client
from provision.kube.drain import drain_and_delete
from tests.support.apiserver import FakeApiServer, Response, object_list, status
from tests.support.kube_objects import VERSION, pod


def test_drain_evicts_workload_pods_then_deletes_the_node(tmp_path: Path) -> None:
    with FakeApiServer() as server:
        server.add("GET", "/version/", VERSION)
        server.add("PATCH", "/api/v1/nodes/{name}", lambda r: {"metadata": {"name": r.params["name"]}})
        web = pod("web-1", "w1", {"app": "web"}, owner="ReplicaSet")
        web["metadata"]["namespace"] = "default"
        static = pod("etcd-w1", "w1", {"component": "etcd"})
        static["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
        daemon = pod("calico-node-x", "w1", {"k8s-app": "calico-node"}, owner="DaemonSet")
        # The web pod is still there at the first look, gone after its eviction.
        server.add("GET", "/api/v1/pods", object_list("PodList", [web, static, daemon]),
                   object_list("PodList", [static, daemon]))
        server.add("POST", "/api/v1/namespaces/{ns}/pods/{name}/eviction", lambda r: Response(201, r.json))
        server.add("DELETE", "/api/v1/nodes/{name}", {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        api = load_api_client(server.write_kubeconfig(tmp_path / "kubeconfig"))

        result = drain_and_delete(api, ["w1"], sleep=lambda s: None)

        assert result.drained == ["w1"] and not result.forced and result.api_unreachable is None
        (cordon,) = server.requests_to("PATCH", "/api/v1/nodes/w1")
        assert cordon.json == {"spec": {"unschedulable": True}}
        assert server.requests_to("GET", "/api/v1/pods")[0].query_value("fieldSelector") == "spec.nodeName=w1"
        evictions = server.requests_to("POST", "/api/v1/namespaces/")
        assert [r.path for r in evictions] == ["/api/v1/namespaces/default/pods/web-1/eviction"]
        assert server.requests_to("DELETE", "/api/v1/nodes/w1")
        assert result.summary() == "drained and deleted: w1"


def test_a_node_the_cluster_does_not_know_is_skipped(tmp_path: Path) -> None:
    with FakeApiServer() as server:
        server.add("GET", "/version/", VERSION)
        server.add("PATCH", "/api/v1/nodes/{name}", status(404, "NotFound", 'nodes "w9" not found'))
        api = load_api_client(server.write_kubeconfig(tmp_path / "kubeconfig"))
        result = drain_and_delete(api, ["w9"], sleep=lambda s: None)
        assert result.not_registered == ["w9"] and result.drained == []
        assert not server.requests_to("DELETE")


def test_eviction_blocked_past_the_timeout_deletes_the_pod(tmp_path: Path) -> None:
    with FakeApiServer() as server:
        server.add("GET", "/version/", VERSION)
        server.add("PATCH", "/api/v1/nodes/{name}", lambda r: {"metadata": {"name": r.params["name"]}})
        guarded = pod("db-0", "w1", {"app": "db"}, owner="StatefulSet")
        server.add("GET", "/api/v1/pods", object_list("PodList", [guarded]))
        # A disruption budget refuses the eviction every time.
        server.add("POST", "/api/v1/namespaces/{ns}/pods/{name}/eviction",
                   status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."))
        server.add("DELETE", "/api/v1/namespaces/{ns}/pods/{name}", lambda r: guarded)
        server.add("DELETE", "/api/v1/nodes/{name}", {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        api = load_api_client(server.write_kubeconfig(tmp_path / "kubeconfig"))
        result = drain_and_delete(api, ["w1"], timeout_s=0.2, sleep=lambda s: None)
        assert result.forced == ["kube-system/db-0"] and result.drained == ["w1"]
        (forced,) = server.requests_to("DELETE", "/api/v1/namespaces/kube-system/pods/db-0")
        assert forced.query_value("gracePeriodSeconds") == "0"


def test_an_api_that_does_not_answer_drains_nothing(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with FakeApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        url = server.url
    kubeconfig.write_text(kubeconfig.read_text().replace(url, f"http://127.0.0.1:{port}"))
    result = drain_and_delete(load_api_client(kubeconfig), ["w1"])
    assert result.drained == [] and result.api_unreachable and "unreachable" in result.api_unreachable
    assert result.summary().startswith("API not answering, nothing drained")
    assert drain_and_delete(None, ["w1"]).summary() == "API not answering, nothing drained (no kubeconfig for this cluster)"
