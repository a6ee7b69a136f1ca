"""The etcd phases as the engine runs them, with the playbooks' answers taken from three real lab members
(tests/data/etcd/probe-systemd-3.5.16.json): `bootstrap upgrade` names etcd_snapshot alone and gets the probe run
first; the snapshot comes from the first member that can take it, and a member without room, or no member that
answers, stops the run before its playbook starts, naming each member's state."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from provision.inputs.inventory import Cluster, load_inventory
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState
from provision.nodes.runner import HostTally, PlaybookResult, TaskFailure
from provision.phases import PHASES, PhaseContext, engine, run_phases, select_phases
from tests.support.paths import REPO_ROOT

PROBES = json.loads((REPO_ROOT / "tests" / "data" / "etcd" / "probe-systemd-3.5.16.json").read_text())


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\nn1 ansible_host=10.0.0.1\nn2 ansible_host=10.0.0.2\nn3 ansible_host=10.0.0.3\n")
    return load_inventory(hosts)


class FakeRunner:
    """Stands in for run_playbook: each playbook "runs" by leaving the module documents a real run would."""

    def __init__(self, tmp_path: Path, probes: dict[str, Any], unreachable: tuple[str, ...] = ()) -> None:
        self.tmp_path, self.probes, self.unreachable = tmp_path, probes, unreachable
        self.ran: list[tuple[str, list[str] | None]] = []

    def __call__(self, playbook: str, cluster: Cluster, settings: Settings, **kwargs: Any) -> PlaybookResult:
        self.ran.append((playbook, kwargs.get("limit")))
        run_dir = self.tmp_path / f"run-{len(self.ran)}"
        folder = run_dir / "artifacts" / "ident" / "job_events"
        folder.mkdir(parents=True)
        if playbook == "etcd_probe.yml":
            for counter, (host, document) in enumerate(self.probes.items()):
                if host not in self.unreachable:
                    event = {"event": "runner_on_ok", "counter": counter,
                             "event_data": {"host": host, "res": {"cb_etcd": document}}}
                    (folder / f"{counter}.json").write_text(json.dumps(event))
        failures = [TaskFailure(host, "Report etcd", "Failed to connect to the host via ssh: timed out",
                                unreachable=True) for host in self.unreachable]
        tally = {host: HostTally(unreachable=int(host in self.unreachable)) for host in self.probes}
        return PlaybookResult(playbook.removesuffix(".yml"), playbook, 4 if failures else 0,
                              "failed" if failures else "successful", run_dir, tally, failures, 0.1)


def probes(**changes: dict[str, Any]) -> dict[str, Any]:
    """The recorded documents, each node's updated with its changes (nested dicts merged one level down)."""
    found = copy.deepcopy(PROBES)
    for node, change in changes.items():
        for key, value in change.items():
            found[node][key] = found[node][key] | value if isinstance(value, dict) else value
    return found


def run(cluster: Cluster, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch, *names: str) -> tuple[PhaseContext, Any]:
    monkeypatch.setattr(engine, "run_playbook", runner)
    ctx = PhaseContext(cluster=cluster, settings=Settings(), state=ClusterState.load(cluster))
    return ctx, run_phases(select_phases(names), ctx)


def test_the_snapshot_alone_runs_the_probe_first_and_a_node_without_room_stops_it_before_its_playbook(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = FakeRunner(tmp_path, probes(n1={"free_bytes": {"snapshot_dir": 1 << 20}}))
    ctx, result = run(cluster, runner, monkeypatch, "etcd_snapshot")
    assert [o.name for o in result.outcomes] == ["etcd_probe", "etcd_snapshot"]
    assert result.outcomes[0].detail == "etcd 3.5.16 (systemd): n1 healthy, n2 healthy, n3 healthy"
    assert runner.ran == [("etcd_probe.yml", None)]  # the snapshot's playbook never started
    assert str(result.error) == ("etcd snapshot: n1:/var/lib/etcd-snapshots has 1 MiB free and a snapshot needs "
                                 "64 MiB: free some space there (etcd's database is 0 MiB)")
    assert ctx.results.etcd_snapshot is None


def test_the_snapshot_is_taken_on_the_first_member_that_can_take_it(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from provision.phases import etcd_snapshot

    runner = FakeRunner(tmp_path, probes(n1={"running": False, "member": None}), unreachable=("n2",))
    ctx, _ = run(cluster, runner, monkeypatch, "etcd_probe")
    assert ctx.results.etcd is not None and ctx.results.etcd.unreachable == {
        "n2": "unreachable at 'Report etcd': Failed to connect to the host via ssh: timed out"}
    name, report = etcd_snapshot.source(ctx)
    assert name == "n3" and report.name == "n3"
    variables = etcd_snapshot.extra_vars(ctx)["cb_etcd_snapshot"]
    assert variables["node"] == "n3" and variables["cluster"] == "n1" and variables["keep"] == 5
    assert variables["status_argv"] == ["/usr/bin/etcdutl", "snapshot", "status"]
    assert variables["client"]["endpoint"] == "https://127.0.0.1:2379"


def test_with_no_member_that_answers_each_ones_state_is_named(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stopped = {"running": False, "member": None}
    unhealthy = {"member": PROBES["n3"]["member"] | {"health": {"healthy": False, "error": "context deadline exceeded"}}}
    runner = FakeRunner(tmp_path, probes(n1=stopped, n3=unhealthy), unreachable=("n2",))
    _, result = run(cluster, runner, monkeypatch, "etcd_probe", "etcd_snapshot")
    message = str(result.error)
    assert message.startswith("etcd snapshot: no healthy etcd member to take it from (")
    assert "n2: unreachable at 'Report etcd'" in message
    assert "n1: etcd is not running (`systemctl stop etcd.service`?)" in message
    assert "n3: etcd does not answer healthy (context deadline exceeded)" in message
    assert [p for p, _ in runner.ran] == ["etcd_probe.yml"]


def test_every_etcd_phase_is_in_the_catalog_with_its_playbook() -> None:
    assert PHASES["etcd_probe"].read_only and PHASES["etcd_probe"].provides == ("etcd",)
    assert PHASES["etcd_snapshot"].needs == ("etcd",)
    for name in ("etcd_probe", "etcd_snapshot"):
        assert (REPO_ROOT / "playbooks" / str(PHASES[name].playbook)).is_file()
