"""Verification of a cluster with several control planes, through the real kubernetes client against a stand-in
API server: the joined control planes registered as control planes, kube-vip (or the local API proxy) running
where the endpoint puts it, etcd's members exactly the control planes (read by `etcdctl member list` in an etcd
pod; the exec is stood in, the judgement is the product's), the formed cluster's endpoint against the settings."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from provision.inputs.inventory import load_inventory
from provision.inputs.settings import Settings, parse_settings
from provision.kube import verify
from provision.kube.client import load_api_client
from provision.kube.verify import Expectations, etcd_member_names, etcd_member_problems, verify_cluster
from provision.render.kubeadm_config import endpoint_change_problem
from tests.lab.cluster_api import ExecApiServer
from tests.support.apiserver import object_list
from tests.support.kube_objects import VERSION, healthy_pods, node, pod

CONTROL_PLANE = {"node-role.kubernetes.io/control-plane": ""}
MEMBERS = {"header": {"cluster_id": 1}, "members": [
    {"ID": 11, "name": "cp1", "peerURLs": ["https://10.0.0.1:2380"]},
    {"ID": 22, "name": "cp2", "peerURLs": ["https://10.0.0.2:2380"]},
    {"ID": 33, "name": "cp3", "peerURLs": ["https://10.0.0.3:2380"]}]}


def ha_pods(endpoint: str = "kube-vip", on: tuple[str, ...] = ("cp1", "cp2", "cp3")) -> list[dict[str, Any]]:
    pods = healthy_pods(gpu_nodes=())
    pods += [pod(f"etcd-{n}", n, {"component": "etcd", "tier": "control-plane"}) for n in ("cp1", "cp2", "cp3")]
    pods += [pod(f"{endpoint}-{n}", n, {"app.kubernetes.io/name": endpoint}) for n in on]
    return pods


def expectations(**changes: Any) -> Expectations:
    base: dict[str, Any] = {"nodes": ("cp1", "cp2", "cp3", "w1"), "control_planes": ("cp2", "cp3"),
                                "etcd_members": ("cp1", "cp2", "cp3"),
                                "endpoint_pods": ("kube-vip", ("cp1", "cp2", "cp3"))}
    return Expectations(**(base | changes))


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, nodes: list[dict[str, Any]],
        pods: list[dict[str, Any]], members: Any = MEMBERS, expect: Expectations | None = None) -> verify.VerifyReport:
    exec_calls: list[tuple[str, list[str]]] = []

    def stand_in_exec(name: str, command: list[str]) -> str:
        exec_calls.append((name, command))
        return json.dumps(members) if not isinstance(members, str) else members

    # The exec goes over a real websocket, read by the kubernetes client installed (whose versions differ in what
    # they make of output that is JSON).
    with ExecApiServer(stand_in_exec) as server:
        server.add("GET", "/version/", VERSION)
        server.add("GET", "/api/v1/nodes", object_list("NodeList", nodes))
        server.add("GET", "/api/v1/namespaces/kube-system/pods", object_list("PodList", pods))
        api = load_api_client(server.write_kubeconfig(tmp_path / "kubeconfig"))
        report = verify_cluster(api, expect or expectations(), timeout_s=2, poll_s=0.5,
                                checks=("nodes", "pods", "etcd"))
    if members is not None and exec_calls:
        name, command = exec_calls[0]
        assert name.startswith("etcd-") and command[:1] == ["etcdctl"] and command[-4:] == [
            "member", "list", "-w", "json"]
    return report


HEALTHY_NODES = [node("cp1", labels=CONTROL_PLANE), node("cp2", labels=CONTROL_PLANE),
                 node("cp3", labels=CONTROL_PLANE), node("w1")]


def test_a_healthy_ha_cluster_passes_with_its_etcd_members_counted(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    report = run(tmp_path, monkeypatch, nodes=HEALTHY_NODES, pods=ha_pods())
    assert report.ok, [p.describe() for p in report.problems]
    assert report.etcd_members == ["cp1", "cp2", "cp3"]
    assert report.summary().startswith("4 nodes Ready, 3 etcd members")


def test_a_control_plane_that_joined_as_a_worker_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [*HEALTHY_NODES[:2], node("cp3"), HEALTHY_NODES[3]]
    report = run(tmp_path, monkeypatch, nodes=nodes, pods=ha_pods())
    assert [p.describe() for p in report.problems] == [
        "cp3: is in the cluster but not as a control plane: it joined as a worker: `bootstrap reset cp3`, then "
        "`bootstrap up --from join` joins it as a control plane"]


def test_kube_vip_missing_on_a_control_plane_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = run(tmp_path, monkeypatch, nodes=HEALTHY_NODES, pods=ha_pods(on=("cp1", "cp3")))
    (problem,) = report.problems
    assert problem.subject == "cp2" and problem.what == "kube-vip does not run there"
    assert "crictl ps -a --name kube-vip" in problem.cause


def test_the_local_proxy_must_run_on_every_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expect = expectations(endpoint_pods=("cb-api-proxy", ("cp1", "cp2", "cp3", "w1")))
    report = run(tmp_path, monkeypatch, nodes=HEALTHY_NODES, pods=ha_pods("cb-api-proxy", ("cp1", "cp2", "cp3")),
                 expect=expect)
    assert [(p.subject, p.what) for p in report.problems] == [("w1", "cb-api-proxy does not run there")]
    assert "crictl ps -a --name api-proxy" in report.problems[0].cause


def test_etcd_members_other_than_the_control_planes_are_named(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    members = {"members": [*MEMBERS["members"][:2], {"ID": 44, "name": "old-cp"}]}
    report = run(tmp_path, monkeypatch, nodes=HEALTHY_NODES, pods=ha_pods(), members=members)
    assert [p.describe() for p in report.problems] == [
        "cp3: is not an etcd member: its etcd did not join: see `crictl logs` of etcd on cp3; `bootstrap reset cp3`, "
        "then `bootstrap up --from join`",
        "etcd: has a member old-cp that is no control plane of the inventory: a control plane removed without its "
        "member, or one not started: `etcdctl member remove` it on a control plane (bootstrap node remove does that "
        "first)"]


def test_no_etcd_answer_is_a_problem_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = run(tmp_path, monkeypatch, nodes=HEALTHY_NODES, pods=ha_pods(), members="Error: context deadline")
    assert [p.subject for p in report.problems] == ["etcd"]
    assert report.problems[0].what == "did not list its members"


@pytest.mark.parametrize("text,names", [
    (json.dumps(MEMBERS), ["cp1", "cp2", "cp3"]),
    # A member added but not started yet has no name.
    ('{"members":[{"ID":1,"name":"cp1"},{"ID":2,"peerURLs":["https://10.0.0.2:2380"]}]}', ["cp1", ""]),
    ("Error: context deadline exceeded", None),
    ('{"header":{}}', None),
])
def test_etcdctl_member_list_is_read(text: str, names: list[str] | None) -> None:
    assert etcd_member_names(text) == names


def test_a_member_not_started_is_named_as_such() -> None:
    (problem,) = etcd_member_problems(["cp1", "cp2", ""], ["cp1", "cp2"])
    assert problem.what == "has a member (unnamed, not started) that is no control plane of the inventory"


def test_a_formed_clusters_endpoint_cannot_be_moved_by_the_settings(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.0.0.1\ncp2 ansible_host=10.0.0.2\ncp3 ansible_host=10.0.0.3\n")
    cluster = load_inventory(hosts)
    formed_with_proxy = "controlPlaneEndpoint: 10.0.0.1:6443\nclusterName: kubernetes\n"
    assert endpoint_change_problem(formed_with_proxy, cluster, Settings()) is None
    problem = endpoint_change_problem(formed_with_proxy, cluster, parse_settings({"control_plane": {"vip": "10.0.0.9"}}))
    assert problem == ("the cluster was formed with the control-plane endpoint 10.0.0.1:6443, the settings now give "
                       "10.0.0.9:6443 (control_plane.endpoint auto): kubeadm cannot move a formed cluster's endpoint; "
                       "set control_plane back as it was, or `bootstrap down`, then `bootstrap up`")
    # A single control plane formed without an endpoint setting grows to three behind local proxies: no change.
    assert endpoint_change_problem("controlPlaneEndpoint: 10.0.0.1:6443\n", cluster,
                                   parse_settings({"control_plane": {"endpoint": "proxy"}})) is None
