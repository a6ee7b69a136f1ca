"""`bootstrap upgrade`'s pipeline without nodes: each step's phases run in order with that step's version and a
failure stops the rest; the etcd snapshot refuses until this build can take one; the drains through the real
kubernetes client against the stand-in API server (a budget that holds a pod back is named, never forced; a pod
no controller would restart stops the drain); the operator's kubeconfig takes renewed credentials and keeps its
server; what the nodes report is read as the module writes it; and bad input is refused before any connection."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from provision import phases as phases_module
from provision.errors import BootstrapError, InputError
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState, NodeStage, StepRecord, UpgradeRecord
from provision.inputs.upgrade import (
    Batch,
    ClusterVersions,
    NodeVersions,
    Release,
    Step,
    Target,
    UpgradeOptions,
    UpgradePaused,
    UpgradePlan,
    worker_batches,
)
from provision.kube.client import load_api_client
from provision.kube.drain import cordon, drain_for_upgrade, uncordon
from provision.kube.kubeconfig import admin_kubeconfig_path, refresh_admin_credentials
from provision.nodes.etcd.snapshot import LocalSnapshot, SnapshotRecord
from provision.phases import UPGRADE_STEP_PHASES, Phase, PhaseContext, run_upgrade
from provision.phases.upgrade_repositories import choose
from provision.resources import PLAYBOOKS_DIR
from tests.support.ansible_modules import load as library
from tests.support.apiserver import FakeApiServer, Response, object_list, status
from tests.support.kube_objects import node, pod
from tests.support.refusal import assert_refused, run_main


def snapshot(directory: Path, name: str) -> LocalSnapshot:
    """A snapshot as etcd_snapshot leaves it on this machine (its record: what the etcd work checked)."""
    record = SnapshotRecord.model_validate({
        "schema": 1, "name": name, "cluster": "cp1", "member": "cp1", "members": ["cp1"],
        "ca_sha256": "c" * 64, "etcd_cluster_id": "1", "etcd_version": "3.6.5", "taken_at": "2026-11-25T12:00:00+00:00",
        "revision": 41, "total_key": 900, "hash": 1234, "total_size": 8192, "size": 4096, "sha256": "a" * 64,
        "live_keys": 880})
    return LocalSnapshot(directory / name, record)


@pytest.fixture
def cluster(tmp_path: Path):
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.20.0.10\n[workers]\nw1 ansible_host=10.20.0.11\n"
                     "w2 ansible_host=10.20.0.12\n")
    return load_inventory(hosts)


def test_each_step_runs_its_phases_with_its_release_and_the_record_says_where_it_stands(
        cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ran: list[tuple[str, str]] = []

    def phase(name: str, *, fail: bool = False) -> Phase:
        def check(ctx: PhaseContext) -> str:
            ran.append((name, ctx.settings.kubernetes.version))
            if name == "upgrade_repositories":
                assert ctx.step is not None and ctx.state.upgrade is not None
                ctx.state.upgrade.releases[f"1.{ctx.step.minor}"] = f"1.{ctx.step.minor}.4"
            if name == "etcd_snapshot":
                ctx.results.etcd_snapshot = snapshot(tmp_path, f"before-{ctx.settings.kubernetes.version}.db")
            if fail:
                raise BootstrapError(f"{name} broke on w2")
            return f"{name} done"
        return Phase(name, name, check)

    names = ("preflight", "etcd_probe", "etcd_snapshot", *UPGRADE_STEP_PHASES, "upgrade_gpu_driver", "smoke")
    # The real upload phase: with no etcd.snapshot_target it skips, saying so.
    upload = {"etcd_snapshot_upload": phases_module.PHASES["etcd_snapshot_upload"]}
    monkeypatch.setattr(phases_module, "PHASES", {n: phase(n) for n in names} | upload)
    plan = UpgradePlan(Release(35, 2), Target(37), (Step(36, "1.36", ("cp1",), ("w1", "w2")),
                                                    Step(37, "1.37", ("cp1",), ("w1", "w2"))))
    ctx = PhaseContext(cluster=cluster, settings=Settings(), state=ClusterState.load(cluster),
                       upgrade=UpgradeOptions(Target(37), step=True))
    ctx.results.versions = ClusterVersions(Release(35, 2), (
        NodeVersions("cp1", True, Release(35, 2), Release(35, 2), Release(35, 2)),
        NodeVersions("w1", False, Release(35, 2), Release(35, 2)), NodeVersions("w2", False, Release(34, 7),
                                                                                Release(35, 2))))
    result = run_upgrade(ctx, plan)
    assert result.ok, result.error
    step_phases = [n for n in UPGRADE_STEP_PHASES if n != "upgrade_repositories"]
    # A snapshot before each step, with that step's settings.
    assert ran == [("preflight", "1.37"),
                   ("etcd_probe", "1.36"), ("etcd_snapshot", "1.36"), ("upgrade_repositories", "1.36"),
                   *[(n, "1.36.4") for n in step_phases],
                   ("etcd_probe", "1.37"), ("etcd_snapshot", "1.37"), ("upgrade_repositories", "1.37"),
                   *[(n, "1.37.4") for n in step_phases], ("upgrade_gpu_driver", "1.37"), ("smoke", "1.37")]
    assert [(o.name, o.status) for o in result.outcomes][:6] == [
        ("preflight", "ok"), ("etcd_probe (1.36)", "ok"), ("etcd_snapshot (1.36)", "ok"),
        ("etcd_snapshot_upload (1.36)", "skipped"), ("upgrade_repositories (1.36)", "ok"),
        ("upgrade_prepull (1.36.4)", "ok")]
    saved = ClusterState.load(cluster)
    assert saved.upgrade is not None and saved.upgrade.finished and saved.kubernetes_version == "1.37.4"
    assert saved.upgrade.releases == {"1.36": "1.36.4", "1.37": "1.37.4"}
    assert [s["minor"] for s in saved.upgrade.plan] == ["1.36", "1.37"]
    # What a rollback of each step needs: the snapshot from before it and each node's versions before it.
    steps = saved.upgrade.steps
    assert {minor: step.snapshot["name"] for minor, step in steps.items() if step.snapshot} == {
        "1.36": "before-1.36.db", "1.37": "before-1.37.db"}
    assert steps["1.36"].before == {"cp1": {"kubelet": "1.35.2", "kubeadm": "1.35.2", "static_pods": "1.35.2"},
                                    "w1": {"kubelet": "1.35.2", "kubeadm": "1.35.2", "static_pods": None},
                                    "w2": {"kubelet": "1.34.7", "kubeadm": "1.35.2", "static_pods": None}}
    assert steps["1.37"].before["cp1"] == {"kubelet": "1.36", "kubeadm": "1.36", "static_pods": "1.36"}

    # A failure in a step stops the upgrade there, unfinished, and nothing after it runs.
    ran.clear()
    monkeypatch.setattr(phases_module, "PHASES", {n: phase(n, fail=(n == "upgrade_workers")) for n in names} | upload)
    failed = run_upgrade(PhaseContext(cluster=cluster, settings=Settings(), state=ClusterState(),
                                      upgrade=UpgradeOptions(Target(37), step=True)), plan)
    assert str(failed.error) == "upgrade_workers broke on w2"
    assert ran[-1] == ("upgrade_workers", "1.36.4") and ("network", "1.36.4") not in ran
    assert [o.status for o in failed.outcomes if o.name.startswith("network")] == ["not run"]
    unfinished = ClusterState.load(cluster).upgrade
    assert unfinished is not None and not unfinished.finished


def test_the_etcd_snapshot_comes_first_and_a_failed_one_stops_the_upgrade_before_anything_changes(
        cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def phase(name: str, *, fail: bool = False) -> Phase:
        def check(ctx: PhaseContext) -> str:
            ran.append(name)
            if fail:
                raise BootstrapError("etcd snapshot: no healthy etcd member to take it from")
            if name == "upgrade_repositories" and ctx.state.upgrade is not None:
                ctx.state.upgrade.releases["1.36"] = "1.36.4"
            return f"{name} done"
        return Phase(name, name, check)
    names = ("preflight", "etcd_probe", *UPGRADE_STEP_PHASES, "upgrade_gpu_driver", "smoke")
    monkeypatch.setattr(phases_module, "PHASES", {n: phase(n) for n in names} | {"etcd_snapshot": phase(
        "etcd_snapshot", fail=True), "etcd_snapshot_upload": phase("etcd_snapshot_upload")})
    plan = UpgradePlan(Release(35, 2), Target(36), (Step(36, "1.36", ("cp1",), ("w1", "w2")),))
    ctx = PhaseContext(cluster=cluster, settings=Settings(), state=ClusterState(), upgrade=UpgradeOptions(Target(36)))
    result = run_upgrade(ctx, plan)
    assert ran == ["preflight", "etcd_probe", "etcd_snapshot"]
    assert str(result.error) == "etcd snapshot: no healthy etcd member to take it from"
    # The operator took one: etcd is not even read.
    ran.clear()
    ctx.upgrade = UpgradeOptions(Target(36), skip_etcd_snapshot=True)
    skipped = run_upgrade(ctx, plan)
    assert skipped.ok and ran[:2] == ["preflight", "upgrade_repositories"]
    assert [(o.name, o.status, o.detail) for o in skipped.outcomes[:2]] == [
        ("preflight", "ok", "preflight done"),
        ("etcd_snapshot (1.36)", "skipped", "--skip-etcd-snapshot: the operator took one")]


def test_workers_go_one_at_a_time_or_parallel_at_a_time(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from provision.phases import upgrade_workers

    batches: list[list[str]] = []
    monkeypatch.setattr(upgrade_workers, "upgrade_nodes", lambda ctx, names: batches.append(list(names)))
    monkeypatch.setattr(upgrade_workers, "finish_left_behind", lambda ctx, names: [])
    state = ClusterState(upgrade=UpgradeRecord("1.36", {"1.36": "1.36.4"}))
    step = Step(36, "1.36.4", (), ("w1", "w2", "w3"))
    for parallel, expected in ((Batch(1), [["w1"], ["w2"], ["w3"]]), (Batch(2), [["w1", "w2"], ["w3"]]),
                               (Batch(percent=50), [["w1", "w2"], ["w3"]])):
        batches.clear()
        ctx = PhaseContext(cluster=cluster, settings=Settings(), state=state, step=step,
                           upgrade=UpgradeOptions(Target(36), parallel=parallel))
        detail = upgrade_workers.check(ctx)
        assert batches == expected
        assert detail == f"w1, w2, w3 at 1.36.4, {'one' if parallel == Batch(1) else parallel} at a time"


def test_the_upgrade_record_survives_the_state_file(cluster) -> None:
    state = ClusterState(kubernetes_version="1.36.4", certs_timer=True, upgrade=UpgradeRecord(
        "1.37", {"1.37": "1.37.1"}, {"w1": NodeStage("1.37.1", "drained", was_unschedulable=True)},
        [{"minor": "1.37", "version": "1.37", "control_planes": ["cp1"], "workers": ["w1"]}],
        steps={"1.37": StepRecord("2026-11-25T12:00:00+00:00", {"w1": {"kubelet": "1.36.4", "kubeadm": "1.36.4",
                                                                      "static_pods": None}},
                                  {"path": "/s/etcd-1.db", "sha256": "a" * 64, "revision": 41})}))
    state.save(cluster)
    assert ClusterState.load(cluster) == state


def test_the_steps_release_is_the_repositorys_newest_or_the_one_asked_for_if_it_is_there() -> None:
    offered = (Release(36, 4), Release(36, 3), Release(35, 9))
    assert choose(Step(36, "1.36", (), ()), offered, "file:///r/v1.36/") == "1.36.4"
    assert choose(Step(36, "1.36.3", (), ()), offered, "file:///r/v1.36/") == "1.36.3"
    with pytest.raises(BootstrapError, match=r"kubeadm 1.36.9 is not in the Kubernetes repository file:///r/v1.36/ "
                                             r"\(it offers 1.36.4, 1.36.3\): ask for one of those with --to"):
        choose(Step(36, "1.36.9", (), ()), offered, "file:///r/v1.36/")
    with pytest.raises(BootstrapError, match="offers no kubeadm 1.37: check the mirror or offline source"):
        choose(Step(37, "1.37", (), ()), offered, "https://mirror/v1.37/")


# --- drains for an upgrade, through the stand-in API server ---------------------------------------------------

def _node_api(server: FakeApiServer, unschedulable: dict[str, bool]) -> None:
    def read(request: Any) -> Any:
        found = node(request.params["name"])
        found["spec"] = {"unschedulable": unschedulable.get(request.params["name"], False)}
        return found

    def patch(request: Any) -> Any:
        unschedulable[request.params["name"]] = request.json["spec"]["unschedulable"]
        return read(request)
    server.add("GET", "/api/v1/nodes/{name}", read)
    server.add("PATCH", "/api/v1/nodes/{name}", patch)


def test_a_pod_its_budget_holds_back_stops_the_drain_by_name_and_nothing_is_forced(tmp_path: Path) -> None:
    with FakeApiServer() as server:
        cordoned: dict[str, bool] = {}
        _node_api(server, cordoned)
        web = pod("web-0", "w1", {"app": "web"}, namespace="shop", owner="ReplicaSet")
        server.add("GET", "/api/v1/pods", object_list("PodList", [web]))
        refusal = status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
        refusal.body["details"] = {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget web "
                                               "needs 2 healthy pods and has 2 currently"}]}
        server.add("POST", "/api/v1/namespaces/{ns}/pods/{name}/eviction", refusal)
        api = load_api_client(server.write_kubeconfig(tmp_path / "kubeconfig"))
        assert cordon(api, "w1") is False and cordon(api, "w1") is True
        waits: list[str] = []
        with pytest.raises(BootstrapError) as stopped:
            drain_for_upgrade(api, "w1", timeout_s=0.5, sleep=lambda s: None,
                              on_wait=lambda blocked: waits.append(f"{blocked.pod}: {blocked.reason}"))
        assert str(stopped.value) == (
            "drain of w1 timed out after 0.5 s: pod shop/web-0 is not evicted: The disruption budget web needs 2 "
            "healthy pods and has 2 currently; let its disruption budget allow it (scale the workload up, or relax "
            "the budget), or raise upgrade.drain_timeout_s, then re-run the upgrade with the same --to (w1 stays "
            "cordoned, nothing on it was upgraded)")
        assert waits[0] == "shop/web-0: The disruption budget web needs 2 healthy pods and has 2 currently"
        assert not server.requests_to("DELETE")
        # Only one cordon was sent; uncordon puts it back once, then has nothing to do.
        assert len(server.requests_to("PATCH")) == 1
        assert uncordon(api, "w1") is True and uncordon(api, "w1") is False and cordoned == {"w1": False}


def test_a_pod_no_controller_would_start_again_stops_the_drain_before_any_eviction(tmp_path: Path) -> None:
    with FakeApiServer() as server:
        scratch = pod("scratch", "w1", {"run": "scratch"}, namespace="default")
        daemon = pod("calico-node-x", "w1", {"k8s-app": "calico-node"}, owner="DaemonSet")
        server.add("GET", "/api/v1/pods", object_list("PodList", [scratch, daemon]))
        api = load_api_client(server.write_kubeconfig(tmp_path / "kubeconfig"))
        with pytest.raises(BootstrapError, match=r"^drain of w1: pod default/scratch is managed by no controller, "
                                                 r"so nothing would start it again elsewhere"):
            drain_for_upgrade(api, "w1", timeout_s=5, sleep=lambda s: None)
        assert not server.requests_to("POST")


def test_the_evicted_pods_go_and_the_drain_ends(tmp_path: Path) -> None:
    with FakeApiServer() as server:
        web = pod("web-1", "w1", {"app": "web"}, namespace="default", owner="ReplicaSet")
        server.add("GET", "/api/v1/pods", object_list("PodList", [web]), object_list("PodList", []))
        server.add("POST", "/api/v1/namespaces/{ns}/pods/{name}/eviction", lambda r: Response(201, r.json))
        api = load_api_client(server.write_kubeconfig(tmp_path / "kubeconfig"))
        drain_for_upgrade(api, "w1", timeout_s=5, sleep=lambda s: None)
        assert [r.path for r in server.requests_to("POST")] == ["/api/v1/namespaces/default/pods/web-1/eviction"]


# --- the operator's kubeconfig after kubeadm renewed the control plane's --------------------------------------

def test_the_operators_kubeconfig_takes_the_renewed_credentials_and_keeps_its_server(cluster, tmp_path: Path) -> None:
    local = admin_kubeconfig_path(cluster)
    local.parent.mkdir(parents=True)
    local.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "admin",
        "clusters": [{"name": "kubernetes", "cluster": {"server": "https://10.20.0.100:6443",
                                                        "certificate-authority-data": "T0xE"}}],
        "users": [{"name": "kubernetes-admin", "user": {"client-certificate-data": "T0xE", "client-key-data": "T0xE"}}],
        "contexts": [{"name": "admin", "context": {"cluster": "kubernetes", "user": "kubernetes-admin"}}]}))
    fetched = tmp_path / "admin.conf.fetched"
    fetched.write_text(yaml.safe_dump({
        "clusters": [{"name": "kubernetes", "cluster": {"server": "https://cp1:6443", "certificate-authority-data": "Q0E="}}],
        "users": [{"name": "kubernetes-admin", "user": {"client-certificate-data": "TkVX", "client-key-data": "S0VZ"}}]}))
    assert refresh_admin_credentials(fetched, cluster, Settings()) == local
    refreshed = yaml.safe_load(local.read_text())
    assert refreshed["clusters"][0]["cluster"] == {"server": "https://10.20.0.100:6443",
                                                   "certificate-authority-data": "Q0E="}
    assert refreshed["users"][0]["user"] == {"client-certificate-data": "TkVX", "client-key-data": "S0VZ"}
    assert oct(local.stat().st_mode & 0o777) == "0o600" and oct(fetched.stat().st_mode & 0o777) == "0o600"


# --- what a node reports (playbooks/library/cb_kube_versions.py) ----------------------------------------------

def test_the_versions_a_node_reports_are_read_from_each_tools_own_words() -> None:
    module = library("cb_kube_versions")
    assert module.kubeadm_version("v1.36.4") == "v1.36.4" and module.kubeadm_version("kubeadm placeholder") is None
    assert module.kubelet_version("Kubernetes v1.36.4") == "v1.36.4" and module.kubelet_version("v1.36.4") is None
    assert module.kubectl_version(json.dumps({"clientVersion": {"gitVersion": "v1.36.4"}})) == "v1.36.4"
    assert module.kubectl_version("Client Version: v1.36.4") is None
    assert module.containerd_version("containerd containerd.io 1.7.28 b98a3aace656320842a23f4a392a33f46af97866") == \
        "1.7.28"
    assert module.containerd_version("containerd github.com/containerd/containerd/v2 v2.1.5 fcd43222d6b0") == "2.1.5"
    assert module.containerd_version("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1") == "1.6.20"
    assert module.containerd_version("") is None and module.containerd_version("containerd") is None
    manifest = "spec:\n  containers:\n  - command: [kube-apiserver]\n    image: registry.lab:5000/k8s/kube-apiserver:v1.36.4\n"
    assert module.static_pod_version(manifest, "kube-apiserver") == "v1.36.4"
    assert module.static_pod_version(manifest, "kube-scheduler") is None
    madison = (" kubeadm | 1.36.4-1.1 | https://pkgs.k8s.io/core:/stable:/v1.36/deb  Packages\n"
               " kubeadm | 1.36.3-1.1 | https://pkgs.k8s.io/core:/stable:/v1.36/deb  Packages\n")
    assert module._sorted(module.apt_versions(madison)) == ["1.36.4", "1.36.3"]
    assert module.dnf_versions("1.36.4\n1.36.10\nLast metadata expiration check\n") == ["1.36.4", "1.36.10"]
    assert module._sorted(["1.36.4", "1.36.10", "1.36.4"]) == ["1.36.10", "1.36.4"]


def test_the_upgrade_playbooks_are_where_the_phases_say() -> None:
    for name in ("upgrade_versions.yml", "upgrade_repositories.yml", "upgrade_prepull.yml", "upgrade_node.yml",
                 "certs_read.yml", "certs_health.yml", "certs_renew.yml", "certs_timer.yml"):
        assert (PLAYBOOKS_DIR / name).is_file()


# --- refused before any connection ----------------------------------------------------------------------------

def test_an_upgrade_without_a_cluster_here_or_with_bad_flags_is_refused_before_any_connection(cluster) -> None:
    inventory = str(cluster.inventory_path)
    # The fix, as printed, is the same run: it names the inventory this one was given.
    assert_refused(run_main("upgrade", "--to", "1.37", "-i", inventory), "no cluster formed from",
                   f"`bootstrap up --inventory {inventory}` forms one")
    assert_refused(run_main("upgrade", "--to", "seven", "-i", inventory), "'--to'", "is not a Kubernetes version")
    assert_refused(run_main("upgrade", "--to", "1.33", "-i", inventory), "--to:", "past its end of life")
    for bad in ("0", "101%", "two", "2.5"):
        assert_refused(run_main("upgrade", "--parallel", bad, "-i", inventory), "--parallel")
    assert_refused(run_main("upgrade", "--pause-after", "0", "-i", inventory), "--pause-after")
    assert_refused(run_main("certs", "check", "-i", inventory), "no cluster formed from")


# --- batches: --parallel N or N%, --canary, --pause-after -----------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([f"w{i}" for i in range(40)]), unique=True, max_size=40),
       st.one_of(st.builds(Batch, count=st.integers(1, 50)), st.builds(Batch, percent=st.integers(1, 100))),
       st.booleans())
def test_every_worker_is_in_one_batch_in_order_none_larger_than_asked(workers: list[str], batch: Batch,
                                                                      canary: bool) -> None:
    groups = worker_batches(workers, batch, canary=canary)
    assert [name for group in groups for name in group] == workers
    assert all(group for group in groups)
    if canary and workers:
        assert groups[0] == (workers[0],)
    rest = groups[1:] if canary and workers else groups
    size = batch.size(len(workers))
    assert size >= 1 and all(len(group) <= size for group in rest)
    assert all(len(group) == size for group in rest[:-1])
    if batch.percent is not None and workers:
        assert size == -(-len(workers) * batch.percent // 100)


def test_a_batch_is_a_number_or_a_percentage_and_nothing_else() -> None:
    assert Batch.parse("3") == Batch(3) and str(Batch.parse("3")) == "3"
    assert Batch.parse("25%") == Batch(percent=25) and Batch(percent=25).size(10) == 3 and Batch(percent=1).size(3) == 1
    for bad in ("0", "0%", "101%", "1000", "-1", "two", "25 %", "2.5", "", "１"):
        with pytest.raises(InputError, match=r"^--parallel: .* is not a batch size \(a number of nodes, 1 to 999, or "
                                             r"a percentage of them, 1% to 100%\): write it as '2' or '25%'$"):
            Batch.parse(bad)


def test_a_canary_goes_first_alone_and_a_pause_stops_between_groups_until_confirmed(
        cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from provision.phases import upgrade_workers

    batches: list[list[str]] = []

    def upgrade(ctx: PhaseContext, names: tuple[str, ...]) -> None:
        batches.append(list(names))
        assert ctx.state.upgrade is not None
        for name in names:
            ctx.state.upgrade.nodes[name] = NodeStage("1.36.4", "done")
    monkeypatch.setattr(upgrade_workers, "upgrade_nodes", upgrade)
    monkeypatch.setattr(upgrade_workers, "finish_left_behind", lambda ctx, names: [])
    step = Step(36, "1.36.4", (), ("w1", "w2"))
    asked: list[str] = []

    def run(answer: bool | None, state: ClusterState) -> str:
        ctx = PhaseContext(cluster=cluster, settings=Settings(), state=state, step=step, upgrade=UpgradeOptions(
            Target(36), canary=True, pause_after=1,
            confirm=None if answer is None else (lambda question: asked.append(question) or answer)))
        return upgrade_workers.check(ctx)

    # No one to ask (--yes, or no terminal): the canary alone, then the upgrade stops, as asked.
    state = ClusterState(upgrade=UpgradeRecord("1.36", {"1.36": "1.36.4"}))
    with pytest.raises(UpgradePaused) as paused:
        run(None, state)
    assert batches == [["w1"]] and paused.value.exit_code == 3
    assert str(paused.value) == ("paused after w1 at 1.36.4 (the canary first); w2 left (--pause-after 1): check the "
                                 "upgraded workers, then run the same command again to go on")
    # The same command again: w1 is done (the plan leaves it out) and no second canary is taken.
    batches.clear()
    step = Step(36, "1.36.4", (), ("w2",))
    assert run(None, state) == "w2 at 1.36.4, one at a time" and batches == [["w2"]]
    # Asked and confirmed, it goes on; refused, it stops.
    batches.clear()
    step = Step(36, "1.36.4", (), ("w1", "w2"))
    fresh = ClusterState(upgrade=UpgradeRecord("1.36", {"1.36": "1.36.4"}))
    assert run(True, fresh) == "w1, w2 at 1.36.4, w1 first (canary), then one at a time"
    assert batches == [["w1"], ["w2"]] and asked == ["w1 at 1.36.4 (the canary first); w2 left: go on?"]
    batches.clear()
    with pytest.raises(UpgradePaused):
        run(False, ClusterState(upgrade=UpgradeRecord("1.36", {"1.36": "1.36.4"})))
    assert batches == [["w1"]]
