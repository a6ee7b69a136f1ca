"""The doctor through the API: the real kubernetes client reads one snapshot from a stand-in API server that
answers what a cluster in trouble would (a node NotReady, a pod crash-looping, etcd short of members, DNS without
endpoints or in a forwarding loop, GPUs missing), and every judge names the node, why, and the fix. The snapshot
only reads; an API that does not answer is a finding and the nodes are still judged."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provision.diagnose.doctor import run_doctor
from provision.findings import Finding
from provision.inputs.inventory import Cluster, Node
from provision.inputs.settings import Settings
from provision.kube.client import load_api_client
from provision.kube.health import judge_cluster, read_snapshot
from provision.kube.verify import Expectations
from tests.support.apiserver import FakeApiServer, object_list
from tests.support.kube_objects import endpoint_slice, healthy_pods, node, pod

CONTROL_PLANES = ("cp1", "cp2", "cp3")
EXPECT = Expectations(nodes=(*CONTROL_PLANES, "w1"), gpus={"w1": 2})
PODS = "/api/v1/namespaces/kube-system/pods"


def etcd(node_name: str, **state: Any) -> dict[str, Any]:
    return pod(f"etcd-{node_name}", node_name, {"component": "etcd", "tier": "control-plane"}, **state)


class Api:
    """A healthy cluster of three control planes and a GPU worker with 2 GPUs, unless a test says otherwise."""

    def __init__(self, server: FakeApiServer, tmp_path: Path) -> None:
        self.server = server
        self.kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        self.nodes(*(node(n) for n in CONTROL_PLANES), node("w1", gpus=2))
        self.pods(healthy_pods() + [etcd(n) for n in CONTROL_PLANES])
        self.dns(endpoint_slice("kube-dns", ready=2))
        self.coredns_log("[INFO] plugin/reload: Running configuration SHA512 = 4c4a...\nCoreDNS-1.12.1\n")

    def nodes(self, *nodes: dict[str, Any]) -> None:
        self.server.add("GET", "/api/v1/nodes", object_list("NodeList", list(nodes)))

    def pods(self, pods: list[dict[str, Any]]) -> None:
        self.server.add("GET", PODS, object_list("PodList", pods))

    def dns(self, *slices: dict[str, Any]) -> None:
        self.server.add("GET", "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices",
                        object_list("EndpointSliceList", list(slices), "discovery.k8s.io/v1"))

    def coredns_log(self, text: str) -> None:
        self.server.add("GET", f"{PODS}/coredns-5d78c9869d-abcde/log", text)

    def judge(self) -> list[Finding]:
        snapshot = read_snapshot(load_api_client(self.kubeconfig))
        return judge_cluster(snapshot, EXPECT, CONTROL_PLANES)

    def problems(self) -> dict[tuple[str, str], Finding]:
        return {(f.check, f.subject): f for f in self.judge() if f.status != "ok"}


@pytest.fixture
def api(tmp_path: Path) -> Any:
    with FakeApiServer() as server:
        yield Api(server, tmp_path)


def test_a_healthy_cluster_has_no_finding_and_is_only_read(api: Api) -> None:
    found = api.judge()
    assert [f for f in found if f.status != "ok"] == []
    assert {f.check for f in found} == {"node", "pods", "etcd", "dns", "gpu_allocatable"}
    assert {r.method for r in api.server.requests} == {"GET"}


def test_a_node_not_ready_says_why_from_its_conditions(api: Api) -> None:
    api.nodes(node("cp1"), node("cp2"), node("cp3", ready="Unknown", reason="NodeStatusUnknown",
                                                message="Kubelet stopped posting node status."),
              node("w1", gpus=2, ready="False", reason="KubeletNotReady",
                   message="container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
                           "message:Network plugin returns error: cni plugin not initialized"))
    found = api.problems()
    stopped = found[("node", "cp3")]
    assert stopped.status == "fail"
    assert stopped.detail == "NotReady (NodeStatusUnknown: Kubelet stopped posting node status.)"
    assert "journalctl -u kubelet" in stopped.fix
    assert "calico-node" in found[("node", "w1")].fix


def test_pressure_a_cordon_a_missing_node_and_one_the_inventory_lacks(api: Api) -> None:
    pressed = node("cp2")
    pressed["status"]["conditions"].append({"type": "DiskPressure", "status": "True",
                                            "message": "kubelet has disk pressure"})
    cordoned = node("w1", gpus=2)
    cordoned["spec"] = {"unschedulable": True}
    api.nodes(node("cp1"), pressed, cordoned, node("stray"))
    found = api.problems()
    assert found[("node", "cp2")].detail == "Ready, but under disk pressure (kubelet has disk pressure)"
    assert (found[("node", "w1")].status, found[("node", "w1")].fix) == ("warn", "`kubectl uncordon w1` once it is "
                                                                                "ready for work")
    assert found[("node", "cp3")].detail == "not registered with the API server"
    assert found[("node", "stray")].detail == "in the cluster but not in the inventory"


def test_kube_system_pods_not_running_say_why(api: Api) -> None:
    pods = healthy_pods() + [etcd(n) for n in CONTROL_PLANES]
    pods[3] = pod("calico-node-bbbbb", "w1", {"k8s-app": "calico-node"}, waiting="CrashLoopBackOff", restarts=12)
    pods[4] = pod("kube-proxy-ccccc", "w1", {"k8s-app": "kube-proxy"}, phase="Pending", waiting="ImagePullBackOff",
                  image="registry.k8s.io/kube-proxy:v1.35.0")
    api.pods(pods)
    found = [f for f in api.judge() if f.check == "pods"]
    assert [f.subject for f in found] == ["w1", "w1"]
    calico = found[0]
    assert calico.status == "fail" and calico.detail.startswith("calico-node CrashLoopBackOff")
    assert "pod CIDR" in calico.fix
    pull = found[1]
    assert pull.detail.startswith("kube-proxy cannot pull its image") and pull.status == "warn"
    assert "crictl pull registry.k8s.io/kube-proxy:v1.35.0" in pull.fix


def test_etcd_short_of_one_member_warns_and_of_two_has_lost_quorum(api: Api) -> None:
    others = healthy_pods()
    api.pods([*others, etcd("cp1"), etcd("cp2"), etcd("cp3", waiting="CrashLoopBackOff", restarts=5)])
    found = api.problems()
    assert found[("etcd", "cp3")].status == "warn"
    assert found[("etcd", "cp3")].detail == "etcd member not ready (2 of 3 ready: quorum holds, 0 more may fail)"
    api.pods([*others, etcd("cp1")])
    lost = api.problems()[("etcd", "cluster")]
    assert lost.status == "fail" and lost.detail.startswith("quorum lost: 1 of 3 members ready (down: cp2, cp3)")


def test_cluster_dns_without_endpoints_in_a_loop_or_without_upstream(api: Api) -> None:
    api.dns(endpoint_slice("kube-dns", ready=0, not_ready=2))
    assert api.problems()[("dns", "cluster")].detail.startswith("the kube-dns Service has no ready endpoint")
    api.dns(endpoint_slice("kube-dns", ready=2))
    api.coredns_log("[FATAL] plugin/loop: Loop (127.0.0.1:55953 -> :53) detected for zone \".\", see "
                    "https://coredns.io/plugins/loop#troubleshooting\n")
    loop = api.problems()[("dns", "cluster")]
    assert loop.status == "fail" and "forwarding loop" in loop.detail and "resolvConf" in loop.fix
    api.coredns_log("[ERROR] plugin/errors: 2 example.com. A: read udp 10.244.0.5:41234->10.88.0.1:53: i/o timeout\n")
    upstream = api.problems()[("dns", "cluster")]
    assert upstream.status == "warn" and "i/o timeout" in upstream.detail


def test_gpus_missing_from_allocatable_or_without_a_device_plugin_are_told_once(api: Api) -> None:
    api.nodes(*(node(n) for n in CONTROL_PLANES), node("w1", gpus=1))
    found = api.problems()
    assert found[("gpu_allocatable", "w1")].detail == "1 nvidia.com/gpu allocatable, preflight counted 2"
    crashing = [*healthy_pods()[:-1], pod("nvidia-device-plugin-w1", "w1",
                                          {"app.kubernetes.io/name": "nvidia-device-plugin"}, waiting="CrashLoopBackOff",
                                          restarts=7, owner="DaemonSet")]
    api.pods(crashing + [etcd(n) for n in CONTROL_PLANES])
    plugin = [f for f in api.judge() if "nvidia-device-plugin" in f.detail]
    assert len(plugin) == 1 and plugin[0].check == "gpu_plugin" and "default_runtime_name" in plugin[0].fix
    api.pods(healthy_pods()[:-1] + [etcd(n) for n in CONTROL_PLANES])
    assert api.problems()[("gpu_plugin", "w1")].detail == "no nvidia-device-plugin pod runs there"


def test_an_api_that_does_not_answer_is_a_finding_and_the_nodes_are_still_judged(tmp_path: Path) -> None:
    with FakeApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    # The server is gone; the node listens nowhere either (a closed port on this machine).
    cluster = Cluster(tmp_path / "hosts.ini", (Node("cp1", "127.0.0.1", "control_plane", "root", port=1),))
    report = run_doctor(cluster, Settings(), kubeconfig=kubeconfig)
    assert [(f.check, f.subject, f.status) for f in report.findings] == [("ssh", "cp1", "fail"),
                                                                         ("api", "cluster", "fail"),
                                                                         ("etcd", "cluster", "skip")]
    api = report.cluster[0]
    assert "does not answer" in api.detail and "unreachable" in api.fix
    assert not report.healthy


def test_dns_from_a_pod_is_asked_only_with_probe_dns_and_the_pod_is_deleted(api: Api, tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from provision.cli.app import app
    from provision.inputs.inventory import load_inventory
    from provision.kube.kubeconfig import admin_kubeconfig_path
    from tests.support.apiserver import RecordedRequest, Response

    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[control_plane]\ncp1 ansible_host=127.0.0.1 ansible_port=1 ansible_user=root\n")
    admin = admin_kubeconfig_path(load_inventory(inventory))
    admin.parent.mkdir(parents=True)
    admin.write_text(api.kubeconfig.read_text())
    probe = "bootstrap-dns-probe-x7k2p"

    def created(request: RecordedRequest) -> Response:
        body = request.json
        body["metadata"]["name"] = probe
        return Response(201, body)

    api.server.add("POST", PODS, created)
    failed = pod(probe, "w1", {"app.kubernetes.io/name": "dns-probe"}, phase="Failed")
    api.server.add("GET", f"{PODS}/{probe}", failed)
    api.server.add("GET", f"{PODS}/{probe}/log", "** server can't find kubernetes.default.svc.cluster.local: NXDOMAIN\n")
    api.server.add("DELETE", f"{PODS}/{probe}", failed)
    api.server.add("DELETE", PODS, object_list("PodList", []))
    plain = CliRunner().invoke(app, ["doctor", "-i", str(inventory), "-o", "json"])

    assert "dns_probe" not in {c["check"] for c in json.loads(plain.stdout)["cluster"]}
    assert not api.server.requests_to("POST") and not api.server.requests_to("DELETE")
    probed = CliRunner().invoke(app, ["doctor", "-i", str(inventory), "-o", "json", "--probe-dns"])
    found = next(c for c in json.loads(probed.stdout)["cluster"] if c["check"] == "dns_probe")
    assert found["status"] == "fail" and found["subject"] == "w1"
    assert found["detail"] == "cluster DNS did not answer for kubernetes.default.svc.cluster.local"
    assert "NXDOMAIN" in found["fix"]
    assert [r.path for r in api.server.requests_to("DELETE")] == [PODS, f"{PODS}/{probe}"]
