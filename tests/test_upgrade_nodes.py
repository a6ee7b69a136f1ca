"""One node's part of an upgrade step (provision/phases/node_upgrade.py) through the real kubernetes client against the
stand-in API server of a running cluster (tests/lab/cluster_api.py, here without lab nodes: the kubelets' versions
and Ready conditions are set by the test, the playbook is replaced by one that moves them as a node's upgrade does).

What kubeadm's upgrade guide orders, and `kubectl drain`/`uncordon` keep: a node is uncordoned only once its kubelet
reports the new release and the node is Ready (also when a stopped run left it out of service); a node the operator
had cordoned before the upgrade stays cordoned, and a run killed between our cordon and its record never takes our
cordon for the operator's; pods with emptyDir volumes are refused by name unless --delete-emptydir-data
(kubectl's staging/src/k8s.io/kubectl/pkg/drain/filters.go, localStorageFilter)."""
from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.errors import BootstrapError
from provision.inputs.inventory import Cluster, load_inventory
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState, NodeStage, UpgradeRecord
from provision.inputs.upgrade import Step, Target, UpgradeOptions
from provision.kube import upgrade as kube_upgrade
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.nodes.runner import PlaybookResult
from provision.phases import node_upgrade, upgrade_workers
from provision.phases.engine import PhaseContext
from tests.lab.cluster_api import ExecApiServer, FakeCluster

OLD, NEW = "v1.35.2", "v1.36.4"


class Killed(BaseException):
    """The run is killed here (SIGKILL: nothing after it runs, nothing is cleaned up)."""


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.20.0.10\n[workers]\nw1 ansible_host=10.20.0.11\n"
                     "w2 ansible_host=10.20.0.12\n")
    return load_inventory(hosts)


@pytest.fixture
def fake(cluster: Cluster) -> Iterator[FakeCluster]:
    kubelets = {"cp1": NEW, "w1": OLD, "w2": OLD}
    server = ExecApiServer(lambda pod, command: "").start()
    found = FakeCluster(server, ("cp1",), ("w1", "w2"), kubelet=kubelets.get, api_version=lambda: NEW,
                        etcd_members=lambda: ["cp1"]).install()
    found.kubelets = kubelets  # type: ignore[attr-defined]
    path = admin_kubeconfig_path(cluster)
    path.parent.mkdir(parents=True, exist_ok=True)
    server.write_kubeconfig(path)
    try:
        yield found
    finally:
        server.stop()


def context(cluster: Cluster, state: ClusterState, workers: tuple[str, ...], *, timeout_s: int = 5) -> PhaseContext:
    state.upgrade = state.upgrade or UpgradeRecord("1.36", {"1.36": "1.36.4"})
    settings = Settings()
    # Shorter than the settings allow (10 s): the test's clock.
    settings = settings.model_copy(update={"verify": settings.verify.model_copy(update={"timeout_s": timeout_s})})
    return PhaseContext(cluster=cluster, settings=settings,
                        state=state, step=Step(36, "1.36.4", (), workers), upgrade=UpgradeOptions(Target(36)))


def playbook(fake: FakeCluster, tmp_path: Path, after: Callable[[str], None] | None = None) -> Callable[..., Any]:
    """upgrade_node.yml as the nodes answer it: each node's kubelet restarted on the new release (then `after`)."""
    def run(name: str, cluster: Cluster, settings: Settings, **kwargs: Any) -> PlaybookResult:
        for host in kwargs["limit"]:
            node = next(n.name for n in cluster.nodes if n.host == host)
            fake.kubelets[node] = NEW  # type: ignore[attr-defined]
            if after:
                after(node)
        return PlaybookResult("upgrade_node", name, 0, "successful", tmp_path, {}, [], 0.1)
    return run


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_upgrade, "wait_for_kubelet",
                        functools.partial(kube_upgrade.wait_for_kubelet, sleep=lambda s: time.sleep(min(s, 0.05))))


def test_a_node_is_uncordoned_only_once_its_kubelet_reports_the_release_and_it_is_ready(
        cluster: Cluster, fake: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # w1's kubelet restarts on the release, but the node stays NotReady (its CNI, say): it is not put back.
    fake.ready["w1"] = False
    monkeypatch.setattr(node_upgrade, "run_playbook", playbook(fake, tmp_path))
    state = ClusterState()
    with pytest.raises(BootstrapError, match=r"^w1: after its upgrade to v1.36.4 its kubelet reports v1.36.4, not "
                                             r"Ready after 1 s: .*\(w1 stays cordoned\)$"):
        upgrade_workers.check(context(cluster, state, ("w1",), timeout_s=1))
    assert fake.unschedulable == {"w1": True}
    assert state.upgrade is not None and state.upgrade.nodes["w1"].stage == "upgraded"

    # A re-run finds w1 at the release, left out of service: still NotReady, it stays cordoned ...
    with pytest.raises(BootstrapError, match=r"^w1: after its upgrade to v1.36.4 .*not Ready"):
        upgrade_workers.check(context(cluster, state, (), timeout_s=1))
    assert fake.unschedulable == {"w1": True} and "uncordon w1" not in [a for _, a in fake.actions()]
    # ... and once Ready it is uncordoned, after the read that saw it Ready.
    fake.ready["w1"] = True
    assert upgrade_workers.check(context(cluster, state, ())) == "w1 uncordoned (already at 1.36.4)"
    assert fake.unschedulable == {"w1": False} and state.upgrade.nodes["w1"].stage == "done"


def test_a_kubelet_still_on_the_old_release_keeps_its_node_cordoned(
        cluster: Cluster, fake: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def stuck(node: str) -> None:
        fake.kubelets[node] = OLD  # type: ignore[attr-defined]
    monkeypatch.setattr(node_upgrade, "run_playbook", playbook(fake, tmp_path, after=stuck))
    with pytest.raises(BootstrapError, match=r"^w1: after its upgrade to v1.36.4 its kubelet reports v1.35.2, Ready"):
        upgrade_workers.check(context(cluster, ClusterState(), ("w1",), timeout_s=1))
    assert fake.unschedulable == {"w1": True}


def test_the_operators_own_cordon_stays_after_the_upgrade(
        cluster: Cluster, fake: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The operator cordoned w2 before the upgrade (a GPU node kept for a job, say).
    fake.unschedulable["w2"] = True
    monkeypatch.setattr(node_upgrade, "run_playbook", playbook(fake, tmp_path))
    state = ClusterState()
    assert upgrade_workers.check(context(cluster, state, ("w1", "w2"))) == "w1, w2 at 1.36.4, one at a time"
    assert fake.unschedulable == {"w1": False, "w2": True}
    assert [a for _, a in fake.actions()] == ["cordon w1", "uncordon w1"]
    assert state.upgrade is not None
    assert {n: (s.stage, s.was_unschedulable) for n, s in state.upgrade.nodes.items()} == {
        "w1": ("done", False), "w2": ("done", True)}


def test_a_run_killed_right_after_its_cordon_is_not_taken_for_the_operators(
        cluster: Cluster, fake: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = node_upgrade.cordon

    def cordon_then_killed(api: Any, name: str) -> bool:
        real(api, name)
        raise Killed

    monkeypatch.setattr(node_upgrade, "cordon", cordon_then_killed)
    with pytest.raises(Killed):
        upgrade_workers.check(context(cluster, ClusterState(), ("w1",)))
    assert fake.unschedulable == {"w1": True}
    # The next run reads the cluster's state as the killed one saved it.
    state = ClusterState.load(cluster)
    monkeypatch.setattr(node_upgrade, "cordon", real)
    monkeypatch.setattr(node_upgrade, "run_playbook", playbook(fake, tmp_path))
    upgrade_workers.check(context(cluster, state, ("w1",)))
    assert fake.unschedulable == {"w1": False}


def test_a_node_the_operator_cordoned_that_a_stopped_run_left_behind_stays_cordoned(
        cluster: Cluster, fake: FakeCluster, tmp_path: Path) -> None:
    fake.kubelets["w1"] = NEW  # type: ignore[attr-defined]
    fake.unschedulable["w1"] = True
    state = ClusterState(upgrade=UpgradeRecord("1.36", {"1.36": "1.36.4"}, {
        "w1": NodeStage("1.36.4", "upgraded", was_unschedulable=True)}))
    assert upgrade_workers.check(context(cluster, state, ())) == (
        "w1 left cordoned as it was before the upgrade (already at 1.36.4)")
    assert fake.unschedulable == {"w1": True} and state.upgrade is not None
    assert state.upgrade.nodes["w1"].stage == "done"


def test_pods_with_emptydir_volumes_are_refused_by_name_before_the_node_is_cordoned(
        cluster: Cluster, fake: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.run("trainer-0", on="w1", namespace="ml", empty_dir=True)
    fake.run("trainer-1", on="w1", namespace="ml", empty_dir=True)
    fake.run("web-0", on="w1")
    monkeypatch.setattr(node_upgrade, "run_playbook", playbook(fake, tmp_path))
    state = ClusterState()
    with pytest.raises(BootstrapError) as refused:
        upgrade_workers.check(context(cluster, state, ("w1",)))
    assert str(refused.value) == (
        "drain of w1: cannot evict pods with local storage (emptyDir): ml/trainer-0, ml/trainer-1: their data is "
        "deleted with them (a training job's checkpoints and scratch live there); move the data to a volume that "
        "outlives the pod, or pass --delete-emptydir-data to evict them anyway (as kubectl drain's flag of that "
        "name), then re-run the upgrade with the same --to (w1 was not cordoned)")
    # Nothing was asked of the API but reads: no cordon, no eviction, and the playbook never ran.
    assert fake.actions() == [] and fake.unschedulable == {} and fake.kubelets["w1"] == OLD  # type: ignore[attr-defined]

    # Asked to, the drain evicts them (their data goes with them) and the upgrade goes on.
    ctx = context(cluster, state, ("w1",))
    ctx.upgrade = UpgradeOptions(Target(36), delete_emptydir_data=True)
    upgrade_workers.check(ctx)
    assert [a for _, a in fake.actions()] == ["cordon w1", "evict ml/trainer-0", "evict ml/trainer-1",
                                              "evict default/web-0", "uncordon w1"]


def test_an_emptydir_pod_that_arrives_once_the_node_is_cordoned_stops_the_drain_before_any_eviction(
        cluster: Cluster, fake: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = node_upgrade.cordon

    def cordon_as_a_pod_lands(api: Any, name: str) -> bool:
        fake.run("scratch-0", on=name, empty_dir=True)
        return real(api, name)
    monkeypatch.setattr(node_upgrade, "cordon", cordon_as_a_pod_lands)
    fake.run("web-0", on="w1")
    with pytest.raises(BootstrapError, match=r"^drain of w1: cannot evict pods with local storage \(emptyDir\): "
                                             r"default/scratch-0: .* \(w1 stays cordoned\)$"):
        upgrade_workers.check(context(cluster, ClusterState(), ("w1",)))
    assert [a for _, a in fake.actions()] == ["cordon w1"]
