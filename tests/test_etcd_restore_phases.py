"""`bootstrap etcd restore`'s phases as the engine runs them, the playbooks' answers stood in by what three real lab
members reported (tests/data/etcd/) and the API by the stand-in API server (tests/support/apiserver.py): which
restore a run carries on (the record in the cluster's state names the snapshot's SHA-256), when that record goes
(once the API servers run again), the kubelets restarted on every node, and the API judged by the Nodes the
restored store holds, not by the inventory's.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.inputs.inventory import Cluster, load_inventory
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState, cluster_dir
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.nodes.etcd.snapshot import LocalSnapshot, load_snapshot, record_path
from provision.nodes.runner import HostTally, PlaybookResult, TaskFailure
from provision.phases import ETCD_RESTORE_PHASES, PhaseContext, engine, run_phases, select_phases
from provision.phases.engine import EtcdOptions
from tests.support.apiserver import FakeApiServer, object_list
from tests.support.kube_objects import VERSION, node
from tests.support.paths import REPO_ROOT

DATA = REPO_ROOT / "tests" / "data" / "etcd"
PROBES = json.loads((DATA / "probe-systemd-3.5.16.json").read_text())
RECORD = json.loads((DATA / "snapshot-3.5.16.json").read_text())
PLANES = ("n1", "n2", "n3")


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.ini"
    # w1 joined after the snapshot was taken: the restored store holds no Node of it.
    hosts.write_text("[control_plane]\nn1 ansible_host=10.0.0.1\nn2 ansible_host=10.0.0.2\nn3 ansible_host=10.0.0.3\n"
                     "[workers]\nw1 ansible_host=10.0.0.4\n")
    return load_inventory(hosts)


@pytest.fixture
def snapshot(tmp_path: Path) -> LocalSnapshot:
    path = tmp_path / RECORD["name"]
    path.write_bytes((DATA / "snapshot-3.5.16.db").read_bytes())
    record_path(path).write_text(json.dumps(RECORD))
    return load_snapshot(path)


class RestoreRunner:
    """Stands in for run_playbook: each playbook of the restore "runs" by leaving the module documents a real run
    leaves (the members stopped, restored, started at the raised revision holding the snapshot's Nodes)."""

    def __init__(self, tmp_path: Path, *, kind: str = "static_pod", held_nodes: tuple[str, ...] = PLANES,
                 staged: dict[str, dict[str, Any]] | None = None, silent: tuple[str, ...] = ()) -> None:
        self.tmp_path, self.kind, self.held_nodes = tmp_path, kind, held_nodes
        self.staged = staged or {}
        self.silent = silent  # hosts that send no document of the stage
        self.ran: list[tuple[str, list[str] | None, dict[str, Any]]] = []

    def probe(self, host: str, *, running: bool = True, restored: bool = False) -> dict[str, Any]:
        document = copy.deepcopy(PROBES[host]) | {"kind": self.kind}
        if not running:
            document.update(running=False, member=None)
        elif restored:
            member = document["member"]
            member["status"]["header"]["revision"] = RECORD["revision"] + 1_000_000_000
            member["nodes"] = list(self.held_nodes)
        return document

    def __call__(self, playbook: str, cluster: Cluster, settings: Settings, **kwargs: Any) -> PlaybookResult:
        limit = kwargs.get("limit")
        self.ran.append((playbook, limit, kwargs.get("extra_vars") or {}))
        hosts = list(limit) if limit is not None else [n.host for n in cluster.nodes]
        documents: dict[str, dict[str, Any]] = {}
        if playbook == "etcd_probe.yml":
            documents = {h: {"cb_etcd": self.probe(h)} for h in PLANES}
        elif playbook == "etcd_restore_stage.yml":
            documents = {h: {"cb_etcd_snapshot_status": self.staged.get(h, staged_copy())} for h in hosts
                         if h not in self.silent}
        elif playbook == "etcd_restore_stop.yml":
            documents = {h: {"cb_etcd": self.probe(h, running=False)} for h in hosts}
        elif playbook == "etcd_restore_data.yml":
            documents = {h: {"cb_etcd_restore": {"data_dir": "/var/lib/etcd", "restored": True,
                                                 "moved_aside": "/var/lib/etcd.cb-before-x"}} for h in hosts}
        elif playbook == "etcd_restore_start.yml":
            documents = {h: {"cb_etcd": self.probe(h, restored=True)} for h in hosts}
        run_dir = self.tmp_path / f"run-{len(self.ran)}"
        folder = run_dir / "artifacts" / "ident" / "job_events"
        folder.mkdir(parents=True)
        for counter, (host, result) in enumerate(documents.items()):
            event = {"event": "runner_on_ok", "counter": counter, "event_data": {"host": host, "res": result}}
            (folder / f"{counter}.json").write_text(json.dumps(event))
        failures = [TaskFailure(host, "Read the copy", "Failed to connect to the host via ssh: timed out",
                                unreachable=True) for host in hosts
                    if playbook == "etcd_restore_stage.yml" and host in self.silent]
        tally = {host: HostTally(unreachable=any(f.host == host for f in failures)) for host in hosts}
        return PlaybookResult(playbook.removesuffix(".yml"), playbook, 4 if failures else 0,
                              "failed" if failures else "successful", run_dir, tally, failures, 0.1)


def staged_copy(**changes: Any) -> dict[str, Any]:
    """A member's reading of its staged copy (cb_etcd_snapshot_status), the snapshot's own unless changed."""
    status = {"revision": RECORD["revision"], "total_key": RECORD["total_key"], "hash": RECORD["hash"],
              "total_size": RECORD["total_size"]} | changes.pop("status", {})
    return {"path": f"/var/lib/etcd-snapshots/restore/{RECORD['name']}", "size": RECORD["size"],
            "sha256": RECORD["sha256"], "status": status} | changes


@pytest.fixture
def api(cluster: Cluster) -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add("GET", "/version/", VERSION)
        server.add("GET", "/api/v1/namespaces", object_list("NamespaceList", [
            {"metadata": {"name": name}} for name in ("default", "kube-system")]))
        cluster_dir(cluster).mkdir(parents=True, exist_ok=True)
        server.write_kubeconfig(admin_kubeconfig_path(cluster))
        yield server


def serve_nodes(api: FakeApiServer, *names: str) -> None:
    api.add("GET", "/api/v1/nodes", object_list("NodeList", [node(name) for name in names]))


def restore(cluster: Cluster, snapshot: LocalSnapshot, runner: RestoreRunner,
            monkeypatch: pytest.MonkeyPatch) -> tuple[PhaseContext, Any]:
    monkeypatch.setattr(engine, "run_playbook", runner)
    ctx = PhaseContext(cluster=cluster, settings=Settings(), state=ClusterState.load(cluster),
                       etcd=EtcdOptions(restore=snapshot))
    return ctx, run_phases(select_phases(ETCD_RESTORE_PHASES), ctx)


def recorded(cluster: Cluster) -> dict[str, str] | None:
    return ClusterState.load(cluster).etcd_restore


def unfinished(cluster: Cluster, **record: str) -> None:
    state = ClusterState.load(cluster)
    state.etcd_restore = {"id": "20261101T000000Z", "started": "2026-11-01T00:00:00+00:00"} | record
    state.save(cluster)


def member_ids(runner: RestoreRunner) -> set[object]:
    data = next(extra for playbook, _, extra in runner.ran if playbook == "etcd_restore_data.yml")
    return {member["restore_id"] for member in data["cb_etcd_restore_members"].values()}


# --- issue 30.1: the record names its snapshot and goes once the API servers run -------------------------------

def test_an_unfinished_restore_of_another_snapshot_is_not_carried_on(
        cluster: Cluster, snapshot: LocalSnapshot, api: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    unfinished(cluster, snapshot="n1-20261101T000000Z-r2.db", sha256="0" * 64)
    serve_nodes(api, *PLANES)
    runner = RestoreRunner(tmp_path)
    _, result = restore(cluster, snapshot, runner, monkeypatch)
    assert result.ok, result.error
    assert "20261101T000000Z" not in member_ids(runner)
    assert "restore 20261101T000000Z of n1-20261101T000000Z-r2.db did not finish; a new one" in \
        result.outcomes[1].detail


def test_an_unfinished_restore_of_the_same_snapshot_is_carried_on_under_its_id(
        cluster: Cluster, snapshot: LocalSnapshot, api: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    unfinished(cluster, snapshot=RECORD["name"], sha256=RECORD["sha256"])
    serve_nodes(api, *PLANES)
    runner = RestoreRunner(tmp_path)
    _, result = restore(cluster, snapshot, runner, monkeypatch)
    assert result.ok, result.error
    assert member_ids(runner) == {"20261101T000000Z"}
    assert result.outcomes[1].detail.startswith("carrying on with restore 20261101T000000Z")


def test_the_record_goes_once_the_api_servers_run_even_when_the_api_then_fails_its_check(
        cluster: Cluster, snapshot: LocalSnapshot, api: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    serve_nodes(api, "n1")  # the API serves too little: the check fails after the API servers are back
    _, result = restore(cluster, snapshot, RestoreRunner(tmp_path), monkeypatch)
    assert result.error is not None and result.outcomes[-1].name == "etcd_restore_api"
    assert "does not serve the Nodes the snapshot holds: n2, n3" in str(result.error)
    assert recorded(cluster) is None


def test_the_record_stays_while_the_restore_is_short_of_the_api_servers(
        cluster: Cluster, snapshot: LocalSnapshot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = RestoreRunner(tmp_path)
    monkeypatch.setattr(engine, "run_playbook", runner)
    settings = Settings()
    ctx = PhaseContext(cluster=cluster, settings=settings, state=ClusterState.load(cluster),
                       etcd=EtcdOptions(restore=snapshot))
    names = [n for n in ETCD_RESTORE_PHASES if n != "etcd_restore_api"]
    result = run_phases(select_phases(names), ctx)
    assert result.ok, result.error
    kept = recorded(cluster)
    assert kept is not None and kept["sha256"] == RECORD["sha256"] and kept["snapshot"] == RECORD["name"]


# --- issue 30.2: kubelets restarted, the API judged by the Nodes the snapshot holds --------------------------------

def test_every_kubelet_is_restarted_and_a_node_joined_after_the_snapshot_is_not_required(
        cluster: Cluster, snapshot: LocalSnapshot, api: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    serve_nodes(api, *PLANES)  # w1's kubelet has not registered it again (yet)
    runner = RestoreRunner(tmp_path)
    _, result = restore(cluster, snapshot, runner, monkeypatch)
    assert result.ok, result.error
    playbook, limit, extra = runner.ran[-1]
    assert playbook == "etcd_restore_api.yml"
    assert limit is not None and sorted(limit) == ["n1", "n2", "n3", "w1"]
    assert extra["cb_etcd_api"] == {"restored": ["n1", "n2", "n3"]}
    assert "the kubelets restarted" in result.outcomes[-1].detail
    assert "not in the snapshot: w1" in result.outcomes[-1].detail


def test_a_control_plane_that_joined_after_the_snapshot_does_not_fail_the_restore(
        cluster: Cluster, snapshot: LocalSnapshot, api: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    serve_nodes(api, "n1", "n2", "w1")
    runner = RestoreRunner(tmp_path, held_nodes=("n1", "n2", "w1"))
    _, result = restore(cluster, snapshot, runner, monkeypatch)
    assert result.ok, result.error
    assert "not in the snapshot: n3" in result.outcomes[-1].detail


def test_a_node_the_snapshot_holds_that_the_api_does_not_serve_fails_the_restore(
        cluster: Cluster, snapshot: LocalSnapshot, api: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    serve_nodes(api, *PLANES)
    runner = RestoreRunner(tmp_path, held_nodes=(*PLANES, "w1"))
    _, result = restore(cluster, snapshot, runner, monkeypatch)
    assert "does not serve the Nodes the snapshot holds: w1" in str(result.error)


def test_the_api_servers_and_kubelets_come_back_under_a_systemd_etcd_too(
        cluster: Cluster, snapshot: LocalSnapshot, api: FakeApiServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """kubespray's host etcd: the API servers are static pods still, and stop and come back the same way."""
    serve_nodes(api, *PLANES)
    runner = RestoreRunner(tmp_path, kind="systemd")
    _, result = restore(cluster, snapshot, runner, monkeypatch)
    assert result.ok, result.error
    assert [o.status for o in result.outcomes] == ["ok"] * len(ETCD_RESTORE_PHASES)
    stop = next(extra for playbook, _, extra in runner.ran if playbook == "etcd_restore_stop.yml")
    assert stop["cb_etcd_kinds"] == dict.fromkeys(PLANES, "systemd")


# --- issue 30.11: every member's staged copy compared, a member with no reading named -----------------------------

def test_restore_staging_with_one_members_copy_different_stops_before_etcd_is_touched(
        cluster: Cluster, snapshot: LocalSnapshot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = staged_copy(sha256="f" * 64, status={"revision": RECORD["revision"] + 7})
    runner = RestoreRunner(tmp_path, staged={"n2": other})
    _, result = restore(cluster, snapshot, runner, monkeypatch)
    assert result.outcomes[2].name == "etcd_restore_stage" and result.outcomes[2].status == "failed"
    message = str(result.error)
    assert message.startswith("etcd restore stopped before etcd was touched: the copy on n2 is not the snapshot its "
                              f"record describes (sha256 '{'f' * 64}', the record's '{RECORD['sha256']}'; revision "
                              f"{RECORD['revision'] + 7}, the record's {RECORD['revision']})")
    assert "n1" not in message and "n3" not in message
    assert [p for p, _, _ in runner.ran] == ["etcd_probe.yml", "etcd_restore_stage.yml"]


def test_a_member_with_no_reading_of_its_copy_is_named_and_the_others_still_judged(
        cluster: Cluster, snapshot: LocalSnapshot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = RestoreRunner(tmp_path, silent=("n3",), staged={"n1": staged_copy(path="/tmp/old.db")})
    _, result = restore(cluster, snapshot, runner, monkeypatch)
    message = str(result.error)
    assert "n3 sent no reading of its copy (unreachable at 'Read the copy': Failed to connect" in message
    assert "the copy on n1 is not the snapshot its record describes (path '/tmp/old.db'" in message
    assert [p for p, _, _ in runner.ran] == ["etcd_probe.yml", "etcd_restore_stage.yml"]


def test_an_etcd_without_kubernetes_around_it_has_no_api_server_or_kubelet_to_bring_back(
        cluster: Cluster, snapshot: LocalSnapshot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = RestoreRunner(tmp_path, kind="systemd")
    _, result = restore(cluster, snapshot, runner, monkeypatch)
    assert result.ok, result.error
    assert result.outcomes[-1].status == "skipped" and result.outcomes[-1].detail.startswith("no Kubernetes here")
    assert "etcd_restore_api.yml" not in [p for p, _, _ in runner.ran]
    assert recorded(cluster) is None
