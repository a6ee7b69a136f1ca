"""Cluster verification through the real kubernetes client, against a stand-in API server that answers what a
cluster in trouble would: a node not Ready, a GPU missing, pods crash-looping, the API unreachable. Each
failure must name the node and the likely cause."""
from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

from provision.errors import BootstrapError
from provision.kube.client import load_api_client, wait_for_api
from provision.kube.verify import Expectations, VerifyReport, verify_cluster
from tests.support.apiserver import FakeApiServer, RecordedRequest, Response, object_list, status
from tests.support.kube_objects import VERSION, healthy_pods, node, pod

PROBE = "bootstrap-dns-probe-x7k2p"


def replace_pod(pods: list[dict[str, Any]], name: str, new: dict[str, Any]) -> list[dict[str, Any]]:
    return [new if p["metadata"]["name"] == name else p for p in pods]


class Cluster:
    """A stand-in API server with a healthy two-node cluster (w1 has 2 GPUs) unless a test says otherwise."""

    def __init__(self, server: FakeApiServer, tmp_path: Path) -> None:
        self.server = server
        self.kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        server.add("GET", "/version/", VERSION)
        self.nodes(node("cp1"), node("w1", gpus=2))
        self.pods(healthy_pods())
        self.dns("Succeeded")

    def nodes(self, *answers: Any) -> None:
        """Each answer: a node dict, or a list of them (one list response per poll, the last repeats)."""
        lists = [a if isinstance(a, list) else None for a in answers]
        if all(x is None for x in lists):
            self.server.add("GET", "/api/v1/nodes", object_list("NodeList", list(answers)))
        else:
            self.server.add("GET", "/api/v1/nodes", *[object_list("NodeList", a) for a in answers])

    def pods(self, *answers: list[dict[str, Any]]) -> None:
        self.server.add("GET", "/api/v1/namespaces/kube-system/pods", *[object_list("PodList", a) for a in answers])

    def dns(self, phase: str, log: str = "Name: kubernetes.default.svc.cluster.local\nAddress: 10.96.0.1\n",
            waiting: str | None = None) -> None:
        def created(request: RecordedRequest) -> Response:
            body = request.json
            body["metadata"]["name"] = PROBE
            return Response(201, body)

        probe = pod(PROBE, "w1", {"app.kubernetes.io/name": "dns-probe"}, phase=phase, waiting=waiting,
                    image="docker.io/library/busybox:1.36")
        self.server.add("POST", "/api/v1/namespaces/kube-system/pods", created)
        self.server.add("GET", f"/api/v1/namespaces/kube-system/pods/{PROBE}", probe)
        self.server.add("GET", f"/api/v1/namespaces/kube-system/pods/{PROBE}/log", log)
        self.server.add("DELETE", f"/api/v1/namespaces/kube-system/pods/{PROBE}", probe)
        self.server.add("DELETE", "/api/v1/namespaces/kube-system/pods", object_list("PodList", []))

    def verify(self, timeout_s: float = 3.0, **expect: Any) -> VerifyReport:
        expectations = Expectations(**({"nodes": ("cp1", "w1"), "gpus": {"cp1": 0, "w1": 2}} | expect))
        return verify_cluster(load_api_client(self.kubeconfig), expectations, timeout_s=timeout_s, poll_s=0.05,
                              sleep=time.sleep)


@pytest.fixture
def cluster(tmp_path: Path):
    with FakeApiServer() as server:
        yield Cluster(server, tmp_path)


def only_problem(report: VerifyReport) -> str:
    assert not report.ok
    assert len(report.problems) == 1, [p.describe() for p in report.problems]
    return report.problems[0].describe()


# --- a healthy cluster ---------------------------------------------------------------------------------------

def test_a_healthy_cluster_passes_and_dns_is_probed_from_a_pod_that_is_cleaned_up(cluster: Cluster) -> None:
    report = cluster.verify()
    assert report.ok, [p.describe() for p in report.problems]
    assert report.ready_nodes == ["cp1", "w1"]
    assert report.gpus == {"w1": (2, 2)}
    assert report.dns_answered is True
    assert report.summary() == "2 nodes Ready, 2 GPUs allocatable, DNS answers"

    (created,) = cluster.server.requests_to("POST", "/api/v1/namespaces/kube-system/pods")
    container = created.json["spec"]["containers"][0]
    assert container["image"] == "docker.io/library/busybox:1.36"
    assert container["command"] == ["nslookup", "kubernetes.default.svc.cluster.local"]
    assert created.json["spec"]["restartPolicy"] == "Never"
    assert "nodeName" not in created.json["spec"]


def test_a_node_added_later_is_asked_for_dns_itself(cluster: Cluster) -> None:
    report = cluster.verify(nodes=("w1",), gpus={"w1": 2}, pods_on=("w1",), dns_node="w1")
    assert report.ok, [p.describe() for p in report.problems]
    (created,) = cluster.server.requests_to("POST", "/api/v1/namespaces/kube-system/pods")
    assert created.json["spec"]["nodeName"] == "w1"
    assert cluster.server.requests_to("DELETE", f"/api/v1/namespaces/kube-system/pods/{PROBE}")


def test_a_cluster_that_settles_while_we_wait_passes(cluster: Cluster) -> None:
    cluster.nodes([node("cp1"), node("w1", ready="False", reason="KubeletNotReady",
                                      message="container runtime network not ready: cni plugin not initialized")],
                  [node("cp1"), node("w1", gpus=2)])
    starting = replace_pod(healthy_pods(), "calico-node-bbbbb",
                           pod("calico-node-bbbbb", "w1", {"k8s-app": "calico-node"}, phase="Pending", ready=False))
    cluster.pods(starting, starting, healthy_pods())
    report = cluster.verify(timeout_s=5)
    assert report.ok, [p.describe() for p in report.problems]
    assert len(cluster.server.requests_to("GET", "/api/v1/nodes")) >= 3


# --- nodes ---------------------------------------------------------------------------------------------------

def test_a_node_without_its_pod_network_names_the_node_and_calico(cluster: Cluster) -> None:
    cluster.nodes(node("cp1"), node("w1", ready="False", reason="KubeletNotReady", gpus=2,
                                    message="container runtime network not ready: NetworkReady=false "
                                            "reason:NetworkPluginNotReady message:Network plugin returns error: "
                                            "cni plugin not initialized"))
    started = time.monotonic()
    report = cluster.verify(timeout_s=0.6)
    assert time.monotonic() - started < 5
    text = only_problem(report)
    assert text.startswith("w1: is NotReady: the pod network is not up on w1")
    assert "calico-node" in text
    assert report.dns_answered is None  # DNS is not probed on a cluster that is not up


def test_a_node_that_never_registered_is_named(cluster: Cluster) -> None:
    cluster.nodes(node("cp1"))
    text = only_problem(cluster.verify(timeout_s=0.3, gpus={}))
    assert text.startswith("w1: has not registered with the API server")
    assert "journalctl -u kubelet" in text and "bootstrap up --from join" in text


def test_a_node_whose_kubelet_stopped_reporting(cluster: Cluster) -> None:
    cluster.nodes(node("cp1"), node("w1", ready="Unknown", reason="NodeStatusUnknown",
                                    message="Kubelet stopped posting node status.", gpus=2))
    text = only_problem(cluster.verify(timeout_s=0.3))
    assert "w1: is NotReady: the kubelet on w1 stopped reporting" in text


# --- pods ------------------------------------------------------------------------------------------------------

def test_calico_node_crash_looping_points_at_the_pod_cidr(cluster: Cluster) -> None:
    cluster.pods(replace_pod(healthy_pods(), "calico-node-bbbbb",
                             pod("calico-node-bbbbb", "w1", {"k8s-app": "calico-node"}, waiting="CrashLoopBackOff",
                                 restarts=6, owner="DaemonSet")))
    started = time.monotonic()
    report = cluster.verify(timeout_s=30, pod_cidr="192.168.0.0/16")
    # Six restarts in a crash loop will not heal by waiting: no need to sit out the timeout.
    assert time.monotonic() - started < 10
    text = only_problem(report)
    assert text.startswith("w1: calico-node CrashLoopBackOff (pod calico-node-bbbbb")
    assert "check the pod CIDR: kubernetes.pod_cidr 192.168.0.0/16" in text


def test_an_image_that_cannot_be_pulled_is_named_with_its_node(cluster: Cluster) -> None:
    image = "registry.k8s.io/coredns/coredns:v1.11.3"
    cluster.pods(replace_pod(healthy_pods(), "coredns-5d78c9869d-abcde",
                             pod("coredns-5d78c9869d-abcde", "w1", {"k8s-app": "kube-dns"}, waiting="ImagePullBackOff",
                                 image=image)))
    text = only_problem(cluster.verify(timeout_s=0.3))
    assert text.startswith(f"w1: kube-dns cannot pull its image {image}")
    assert "registry mirrors" in text and f"crictl pull {image}" in text


def test_an_unschedulable_system_pod(cluster: Cluster) -> None:
    cluster.pods([*healthy_pods(), pod("coredns-5d78c9869d-zzzzz", None, {"k8s-app": "kube-dns"}, phase="Pending",
                                       unschedulable="0/2 nodes are available: 2 node(s) had untolerated taint")])
    text = only_problem(cluster.verify(timeout_s=0.3))
    assert text.startswith("cluster: kube-dns cannot be scheduled") and "untolerated taint" in text


# --- GPUs ------------------------------------------------------------------------------------------------------

def test_gpu_missing_with_a_crashing_device_plugin_blames_the_default_runtime(cluster: Cluster) -> None:
    cluster.nodes(node("cp1"), node("w1"))
    cluster.pods(replace_pod(healthy_pods(), "nvidia-device-plugin-w1",
                             pod("nvidia-device-plugin-w1", "w1", {"app.kubernetes.io/name": "nvidia-device-plugin"},
                                 waiting="CrashLoopBackOff", restarts=4, owner="DaemonSet")))
    report = cluster.verify(timeout_s=30)
    text = only_problem(report)
    assert text.startswith("w1: no nvidia.com/gpu allocatable")
    assert "nvidia runtime is not containerd's default on w1" in text
    assert report.gpus == {"w1": (2, 0)}


def test_gpu_missing_in_runtimeclass_mode_blames_the_runtime_handler(cluster: Cluster) -> None:
    cluster.nodes(node("cp1"), node("w1"))
    cluster.pods(replace_pod(healthy_pods(), "nvidia-device-plugin-w1",
                             pod("nvidia-device-plugin-w1", "w1", {"app.kubernetes.io/name": "nvidia-device-plugin"},
                                 waiting="CrashLoopBackOff", restarts=4, owner="DaemonSet")))
    text = only_problem(cluster.verify(timeout_s=30, gpu_runtime="runtimeclass"))
    assert "containerd on w1 has no 'nvidia' runtime handler" in text


def test_gpu_missing_without_a_device_plugin_pod(cluster: Cluster) -> None:
    cluster.nodes(node("cp1"), node("w1"))
    cluster.pods(healthy_pods(gpu_nodes=()))
    text = only_problem(cluster.verify(timeout_s=0.3))
    assert text.startswith("w1: no nvidia.com/gpu allocatable and no nvidia-device-plugin pod runs there")
    assert "nvidia.com/gpu.present=true" in text


def test_fewer_gpus_than_preflight_found(cluster: Cluster) -> None:
    cluster.nodes(node("cp1"), node("w1", gpus=1))
    report = cluster.verify(timeout_s=30)
    text = only_problem(report)
    assert text.startswith("w1: advertises 1 nvidia.com/gpu, preflight found 2")
    assert "nvidia-smi on w1" in text


# --- DNS -------------------------------------------------------------------------------------------------------

def test_dns_that_does_not_answer(cluster: Cluster) -> None:
    cluster.dns("Failed", log=";; connection timed out; no servers could be reached\n")
    report = cluster.verify()
    text = only_problem(report)
    assert report.dns_answered is False
    assert text.startswith("w1: cluster DNS did not answer for kubernetes.default.svc.cluster.local")
    assert "no servers could be reached" in text
    assert cluster.server.requests_to("DELETE", f"/api/v1/namespaces/kube-system/pods/{PROBE}")


def test_a_dns_probe_stopped_before_its_container_started_is_a_problem_not_a_crash(cluster: Cluster) -> None:
    # activeDeadlineSeconds ended the pod while it was still being created: the API has no log to give.
    cluster.dns("Failed", waiting="ContainerCreating")
    cluster.server.add("GET", f"/api/v1/namespaces/kube-system/pods/{PROBE}/log", status(
        400, "BadRequest", f'container "main" in pod "{PROBE}" is waiting to start: ContainerCreating'))
    text = only_problem(cluster.verify())
    assert text.startswith("w1: cluster DNS did not answer for kubernetes.default.svc.cluster.local")
    assert "no output" in text
    assert cluster.server.requests_to("DELETE", f"/api/v1/namespaces/kube-system/pods/{PROBE}")


def test_a_dns_probe_image_that_cannot_be_pulled_is_not_blamed_on_dns(cluster: Cluster) -> None:
    cluster.dns("Pending", waiting="ErrImagePull")
    text = only_problem(cluster.verify())
    assert "the DNS probe image docker.io/library/busybox:1.36 cannot be pulled" in text
    assert "verify.dns_probe_image" in text


# --- the API itself --------------------------------------------------------------------------------------------

def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_api_server_is_reported_within_the_timeout(tmp_path: Path) -> None:
    with FakeApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        url = server.url
    # The same kubeconfig, pointed at a port nothing listens on.
    kubeconfig.write_text(kubeconfig.read_text().replace(url, f"http://127.0.0.1:{_closed_port()}"))
    api = load_api_client(kubeconfig)
    started = time.monotonic()
    report = verify_cluster(api, Expectations(nodes=("cp1",)), timeout_s=0.5, poll_s=0.1)
    assert time.monotonic() - started < 10
    text = only_problem(report)
    assert text.startswith("control plane: the Kubernetes API does not answer: API server http://127.0.0.1:")
    assert "unreachable" in text and "kube-apiserver" in text
    with pytest.raises(BootstrapError, match="unreachable"):
        wait_for_api(api, timeout_s=0.2, sleep=lambda s: None)


def test_refused_credentials_say_how_to_fetch_the_kubeconfig_again(cluster: Cluster) -> None:
    cluster.server.add("GET", "/api/v1/nodes", status(401, "Unauthorized", "Unauthorized"))
    text = only_problem(cluster.verify(timeout_s=0.2))
    assert "refused our credentials (HTTP 401)" in text and "bootstrap up --only control_plane" in text


def test_wait_for_api_returns_the_server_version(cluster: Cluster) -> None:
    assert wait_for_api(load_api_client(cluster.kubeconfig), timeout_s=2) == "v1.31.4"


def test_raise_for_problems_names_the_first_and_counts_the_rest(cluster: Cluster) -> None:
    cluster.nodes(node("cp1", ready="False", message="something"), node("w1", ready="False", message="other", gpus=2))
    report = cluster.verify(timeout_s=0.2)
    with pytest.raises(BootstrapError) as raised:
        report.raise_for_problems("join")
    assert str(raised.value) == "join failed: cp1: is NotReady: something (and 1 more problems)"
