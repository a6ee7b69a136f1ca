"""`bootstrap node replace NAME` in kubeadm's and kubespray's order (issue 30.7): the node drained first (while its
member is in etcd its API server still serves from its local etcd), then its member removed through a healthy
one, then the machine reset and joined. A replace that cannot finish is refused before the drain. The first
control plane can be replaced: joins are minted on the next one. The playbooks' answers are stood in by what three
real lab members reported (tests/data/etcd/), the API by the stand-in API server."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from provision.inputs.inventory import Cluster, load_inventory
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState, cluster_dir
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.nodes.runner import HostTally, PlaybookResult
from provision.phases import (
    REPLACE_JOIN_KUBEADM_PHASES,
    REPLACE_REMOVE_PHASES,
    PhaseContext,
    engine,
    join,
    run_phases,
    select_phases,
)
from provision.phases.engine import EtcdOptions
from tests.support.apiserver import FakeApiServer, Response, object_list
from tests.support.kube_objects import VERSION
from tests.support.paths import REPO_ROOT
from tests.support.refusal import assert_refused, run_main

PROBES = json.loads((REPO_ROOT / "tests" / "data" / "etcd" / "probe-systemd-3.5.16.json").read_text())


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\nn1 ansible_host=10.0.0.1\nn2 ansible_host=10.0.0.2\nn3 ansible_host=10.0.0.3\n"
                     "[workers]\nw1 ansible_host=10.0.0.4\n")
    return load_inventory(hosts)


class Runner:
    """run_playbook stood in: the probe answers with the lab's reports (of the kind asked for); each call notes how
    many API requests had been made by then, so the order of the two is known."""

    def __init__(self, tmp_path: Path, api: FakeApiServer, kind: str = "systemd") -> None:
        self.tmp_path, self.api, self.kind = tmp_path, api, kind
        self.ran: list[tuple[str, int]] = []

    def __call__(self, playbook: str, cluster: Cluster, settings: Settings, **kwargs: Any) -> PlaybookResult:
        self.ran.append((playbook, len(self.api.requests)))
        folder = self.tmp_path / f"run-{len(self.ran)}" / "artifacts" / "ident" / "job_events"
        folder.mkdir(parents=True)
        documents = {}
        if playbook in ("etcd_probe.yml", "etcd_member_remove.yml"):
            for host, report in PROBES.items():
                document = copy.deepcopy(report) | {"kind": self.kind}
                if playbook == "etcd_member_remove.yml":
                    members = document["member"]["members"]
                    document["member"]["members"] = [m for m in members if m["name"] != "n2"]
                documents[host] = document
        for counter, (host, document) in enumerate(documents.items()):
            event = {"event": "runner_on_ok", "counter": counter,
                     "event_data": {"host": host, "res": {"cb_etcd": document}}}
            (folder / f"{counter}.json").write_text(json.dumps(event))
        tally = {n.host: HostTally() for n in cluster.control_planes}
        return PlaybookResult(playbook.removesuffix(".yml"), playbook, 0, "successful", folder.parent.parent.parent,
                              tally, [], 0.1)


def with_api(server: FakeApiServer, cluster: Cluster) -> None:
    server.add("GET", "/version/", VERSION)
    server.add("PATCH", "/api/v1/nodes/{name}", lambda r: {"metadata": {"name": r.params["name"]}})
    server.add("GET", "/api/v1/pods", object_list("PodList", []))
    server.add("DELETE", "/api/v1/nodes/{name}", Response(200, {"kind": "Status", "apiVersion": "v1",
                                                               "status": "Success"}))
    cluster_dir(cluster).mkdir(parents=True, exist_ok=True)
    server.write_kubeconfig(admin_kubeconfig_path(cluster))


def context(cluster: Cluster, name: str, settings: Settings | None = None) -> PhaseContext:
    return PhaseContext(cluster=cluster, settings=settings or Settings(), state=ClusterState.load(cluster),
                        nodes=(name,), etcd=EtcdOptions(replace=name))


def test_the_node_is_drained_before_its_member_is_removed_and_reset_after(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeApiServer() as api:
        with_api(api, cluster)
        runner = Runner(tmp_path, api)
        monkeypatch.setattr(engine, "run_playbook", runner)
        result = run_phases(select_phases(REPLACE_REMOVE_PHASES), context(cluster, "n2"))
        assert result.ok, result.error
        assert [o.name for o in result.outcomes] == ["etcd_probe", "etcd_replace_check", "drain",
                                                     "etcd_member_remove"]
        (cordon,) = api.requests_to("PATCH", "/api/v1/nodes/n2")
        deleted = api.requests_to("DELETE", "/api/v1/nodes/n2")
        removal = dict(runner.ran)["etcd_member_remove.yml"]
        # Every drain request (the cordon, the Node deleted) came before the member's removal started.
        assert deleted and api.requests.index(cordon) < api.requests.index(deleted[0]) < removal
    # The machine is wiped only after both, in the join's run.
    assert REPLACE_JOIN_KUBEADM_PHASES[0] == "reset"


def test_a_replace_without_quorum_is_refused_before_the_drain(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeApiServer() as api:
        with_api(api, cluster)
        runner = Runner(tmp_path, api)
        original = copy.deepcopy(PROBES)
        for name in ("n1", "n3"):
            PROBES[name]["running"], PROBES[name]["member"] = False, None
        try:
            monkeypatch.setattr(engine, "run_playbook", runner)
            result = run_phases(select_phases(REPLACE_REMOVE_PHASES), context(cluster, "n2"))
        finally:
            PROBES.clear()
            PROBES.update(original)
        assert str(result.error).startswith("node replace n2 refused, nothing changed: etcd has lost its quorum")
        assert api.requests_to("PATCH", "/api/v1/nodes/n2") == []
        assert [p for p, _ in runner.ran] == ["etcd_probe.yml"]


@pytest.mark.parametrize(("kind", "vip", "refused"), [("systemd", False, False), ("static_pod", True, False),
                                                      ("static_pod", False, True)])
def test_the_first_control_plane_is_replaced_where_the_cluster_does_not_reach_the_api_through_it(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, vip: bool, refused: bool) -> None:
    settings = Settings.model_validate({"control_plane": {"vip": "10.0.0.100"}} if vip else {})
    with FakeApiServer() as api:
        with_api(api, cluster)
        monkeypatch.setattr(engine, "run_playbook", Runner(tmp_path, api, kind))
        result = run_phases(select_phases(REPLACE_REMOVE_PHASES[:2]), context(cluster, "n1", settings))
    if refused:
        assert str(result.error) == (
            "node replace n1 refused, nothing changed: n1 is the first control plane and the API is reached at its "
            "own address (endpoint proxy): list another control plane first in the inventory and run `bootstrap up "
            "--only control_plane`, then replace n1 (docs/etcd.md)")
    else:
        assert result.ok, result.error
        assert "joins minted on the next control plane: it is the first" in result.outcomes[-1].detail


def test_joins_are_minted_on_the_first_control_plane_not_joining_itself(cluster: Cluster) -> None:
    settings = Settings.model_validate({"control_plane": {"vip": "10.0.0.100", "interface": "eth0"}})
    replacing_first = context(cluster, "n1", settings)
    assert join.extra_vars(replacing_first)["cb_join_minter"] == "n2"
    assert join.limit(replacing_first) == ["n2", "n1"]
    adding = context(cluster, "w1", settings)
    assert join.extra_vars(adding)["cb_join_minter"] == "n1" and join.limit(adding) == ["n1", "w1"]
    whole = PhaseContext(cluster=cluster, settings=settings, state=ClusterState.load(cluster))
    assert join.extra_vars(whole)["cb_join_minter"] == "n1"


def test_replace_refuses_a_worker_and_the_only_control_plane_but_not_the_first_of_several(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.4\n")
    assert_refused(run_main("node", "replace", "w1", "--yes", "--inventory", str(hosts)),
                   "'w1' is a worker", f"`bootstrap node remove --inventory {hosts} w1`")
    assert_refused(run_main("node", "replace", "cp1", "--yes", "--inventory", str(hosts)),
                   "'cp1' is the cluster's only control plane")
