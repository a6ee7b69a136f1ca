"""The restore's and the replace's judges, on what three real lab members reported (tests/data/etcd/) and a real
snapshot's record: what is refused before anything changes (a member that does not answer, another cluster's
snapshot, a member without the tool or the room or the configuration a restore needs), the plan each member
follows, the judge of the restored cluster; which member is a node's, when etcd's quorum is lost, and how a fresh
machine rejoins. The command refuses a snapshot that fails its check, and a survivor that is no control plane,
before it connects anywhere."""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from provision.errors import BootstrapError
from provision.inputs.inventory import Cluster, load_inventory
from provision.nodes.etcd.members import join_problems, joined_problems, members_of, plan_join, quorum_problem
from provision.nodes.etcd.report import EtcdReport, EtcdSurvey
from provision.nodes.etcd.restore import (
    BUMP_REVISION,
    new_restore_id,
    plan_restore,
    restore_refusals,
    restored_problems,
    stopped_problems,
)
from provision.nodes.etcd.snapshot import LocalSnapshot, SnapshotRecord, record_path
from provision.phases import REPLACE_JOIN_KUBEADM_PHASES, REPLACE_JOIN_SYSTEMD_PHASES, replace_join_phases
from tests.support.paths import REPO_ROOT
from tests.support.refusal import assert_refused, run_main

DATA = REPO_ROOT / "tests" / "data" / "etcd"
PROBES = json.loads((DATA / "probe-systemd-3.5.16.json").read_text())
RECORD = json.loads((DATA / "snapshot-3.5.16.json").read_text())
NODES = ["n1", "n2", "n3"]


def report(node: str, **changes: Any) -> EtcdReport:
    document = copy.deepcopy(PROBES[node])
    for key, value in changes.items():
        document[key] = document[key] | value if isinstance(value, dict) and isinstance(document[key], dict) \
            else value
    return EtcdReport.model_validate(document)


def survey(unreachable: tuple[str, ...] = (), **changes: dict[str, Any]) -> EtcdSurvey:
    return EtcdSurvey(reports={n: report(n, **changes.get(n, {})) for n in NODES if n not in unreachable},
                      unreachable=dict.fromkeys(unreachable, "unreachable at 'Report etcd': timed out"), order=NODES)


def snapshot(**changes: Any) -> LocalSnapshot:
    return LocalSnapshot(Path("/snapshots") / RECORD["name"], SnapshotRecord.model_validate(RECORD | changes))


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\nn1 ansible_host=10.88.1.11\nn2 ansible_host=10.88.1.12\n"
                     "n3 ansible_host=10.88.1.13\n")
    return load_inventory(hosts)


# --- restore: refused before anything changes --------------------------------------------------------------------

def test_a_healthy_cluster_of_the_snapshots_own_ca_can_be_restored() -> None:
    assert restore_refusals(snapshot(), survey(), NODES) == []


def test_a_member_that_does_not_answer_is_refused_with_the_way_through_the_survivors() -> None:
    problems = restore_refusals(snapshot(), survey(unreachable=("n3",)), NODES)
    assert problems == ["n3 does not answer (unreachable at 'Report etcd': timed out): a restore rewrites every "
                        "member; bring it back, or restore onto the ones left with --survivors n1,n2 (the others then "
                        "rejoin with `bootstrap node replace NAME`)"]
    # Restoring onto the survivors alone is allowed: the one left out may be dead.
    assert restore_refusals(snapshot(), survey(unreachable=("n3",)), ["n1", "n2"]) == []


def test_a_snapshot_of_another_cluster_is_refused() -> None:
    problem, = restore_refusals(snapshot(ca_sha256="0" * 64), survey(), NODES)
    assert problem.startswith(f"{RECORD['name']}: it was taken from another cluster (its etcd CA sha256:00000000")
    assert problem.endswith("restore a snapshot of this cluster (`bootstrap etcd snapshots`)")


def test_control_planes_that_trust_different_cas_are_not_one_cluster() -> None:
    problems = restore_refusals(snapshot(), survey(n2={"ca_sha256": "1" * 64}), NODES)
    assert any("trust different etcd CAs" in p for p in problems)


def test_a_member_without_a_tool_room_or_configuration_for_the_restore_is_named() -> None:
    etcd36 = {"tools": {"etcdutl": None, "etcdctl_version": "3.6.6"}, "version": "3.6.6"}
    full = {"free_bytes": {"snapshot_dir": 1 << 20, "data_dir": 1 << 20}}
    no_name = {"flags": {"name": ""}}
    problems = restore_refusals(snapshot(), survey(n1=etcd36, n2=full, n3=no_name), NODES)
    assert problems[0] == ("n1: no etcdutl to restore with (etcd 3.6.6: etcdctl lost `snapshot restore` in 3.6); "
                           "put etcdutl 3.6.6 on PATH there")
    assert problems[1].startswith("n2:/var/lib/etcd-snapshots/restore has 1 MiB free and a snapshot needs")
    assert problems[2].startswith("n2:/var/lib/etcd has 1 MiB free")
    assert problems[3] == "n3: etcd's configuration (/lib/systemd/system/etcd.service) has no --name"


def test_a_member_whose_wal_lives_apart_is_refused() -> None:
    apart = {"flags": PROBES["n2"]["flags"] | {"wal-dir": "/ssd/etcd-wal"}}
    problem, = restore_refusals(snapshot(), survey(n2=apart), NODES)
    assert problem.startswith("n2: etcd keeps its WAL apart (--wal-dir /ssd/etcd-wal)")


# --- restore: the plan and the judges ----------------------------------------------------------------------------

def test_every_member_restores_with_its_own_name_and_peer_url_every_member_listed_and_a_new_token() -> None:
    plan = plan_restore(snapshot(), survey(), NODES, "20261125T101500Z")
    assert plan.initial_cluster == ("n1=https://10.88.1.11:2380,n2=https://10.88.1.12:2380,"
                                    "n3=https://10.88.1.13:2380")
    assert plan.token == "cb-restore-20261125T101500Z"
    assert plan.bump_revision == BUMP_REVISION and plan.expected_revision == RECORD["revision"] + BUMP_REVISION
    n2 = plan.member_arguments()["n2"]
    assert (n2["name"], n2["peer_urls"], n2["data_dir"]) == ("n2", "https://10.88.1.12:2380", "/var/lib/etcd")
    assert (n2["uid"], n2["gid"]) == (PROBES["n2"]["data_dir"]["uid"], PROBES["n2"]["data_dir"]["gid"])
    assert n2["restore_argv"] == ["/usr/bin/etcdutl", "snapshot", "restore"]
    assert n2["snapshot"] == f"/var/lib/etcd-snapshots/restore/{RECORD['name']}"


def test_the_revision_is_raised_only_where_every_member_can_raise_it() -> None:
    plan = plan_restore(snapshot(), survey(n3={"tools": {"restore_bumps": False}}), NODES, "r")
    assert plan.bump_revision == 0 and plan.expected_revision == RECORD["revision"]


def test_restoring_onto_the_survivors_stops_the_others_that_answer_too() -> None:
    plan = plan_restore(snapshot(), survey(unreachable=("n3",)), ["n1"], "r")
    assert plan.nodes == ["n1"] and plan.stopped_only == ["n2"]
    assert plan.initial_cluster == "n1=https://10.88.1.11:2380"
    # After the stop: etcd still running anywhere is named.
    assert stopped_problems(plan, survey(n1={"running": False}, n2={"running": False})) == []
    problem, = stopped_problems(plan, survey(n1={"running": False}))
    assert problem.startswith("etcd still runs on n2 after `systemctl stop etcd.service`")


def test_the_restored_cluster_must_hold_the_snapshots_keys_on_every_member_as_one_cluster() -> None:
    plan = plan_restore(snapshot(live_keys=2), survey(), NODES, "r")
    restored = {n: {"member": PROBES[n]["member"] | {"status": PROBES[n]["member"]["status"] | {
        "header": PROBES[n]["member"]["status"]["header"] | {"revision": plan.expected_revision}}}}
        for n in NODES}
    assert restored_problems(plan, survey(**restored)) == []
    fewer = copy.deepcopy(restored)
    fewer["n3"]["member"]["keys"] = 1
    assert restored_problems(plan, survey(**fewer)) == ["etcd on n3 holds 1 keys, the snapshot 2"]
    before = copy.deepcopy(restored)
    before["n1"]["member"]["status"]["header"]["revision"] = 3
    assert restored_problems(plan, survey(**before)) == [
        f"etcd on n1 is at revision 3, before the snapshot's {plan.expected_revision}"]
    two = copy.deepcopy(restored)
    two["n2"]["member"]["members"] = two["n2"]["member"]["members"][:2]
    two["n2"]["member"]["cluster_id"] = "beef"
    assert restored_problems(plan, survey(**two)) == ["etcd on n2 lists the members n1, n2, not n1, n2, n3",
                                                      "the members formed 2 clusters, not one"]


def test_a_restore_id_is_its_start_time() -> None:
    from datetime import UTC, datetime

    assert new_restore_id(datetime(2026, 11, 25, 10, 15, tzinfo=UTC)) == "20261125T101500Z"


# --- replace: membership -----------------------------------------------------------------------------------------

def test_a_nodes_member_is_named_after_it_or_not_started_on_its_address(cluster: Cluster) -> None:
    members = survey().members()
    assert [m.name for m in members_of(cluster.node("n2"), members)] == ["n2"]
    unstarted = members[1].model_copy(update={"name": "", "learner": True})
    assert members_of(cluster.node("n2"), [members[0], unstarted]) == [unstarted]
    assert members_of(cluster.node("n3"), [members[0], unstarted]) == []


def test_a_member_is_removed_while_a_majority_answers_and_refused_with_the_way_back_when_not() -> None:
    assert quorum_problem(survey(unreachable=("n3",)), "n3") is None
    problem = quorum_problem(survey(unreachable=("n3",), n2={"running": False, "member": None}), "n2")
    assert problem == ("etcd has lost its quorum: 1 of its 3 voting members answer (n1), 1 healthy, and 2 are "
                       "needed to change its members: restore a snapshot onto the ones left (`bootstrap etcd restore "
                       "SNAPSHOT --survivors n1`, docs/etcd.md), then replace the others")
    # Without a quorum the one left answers for itself but not healthy: it still lists the members.
    alone = copy.deepcopy(PROBES["n1"]["member"])
    alone["health"] = {"healthy": False, "error": "context deadline exceeded"}
    alone["members"] = alone["members"][:2]
    problem = quorum_problem(survey(unreachable=("n2", "n3"), n1={"member": alone}), "n2")
    assert str(problem).startswith("etcd has lost its quorum: 1 of its 2 voting members answer (n1), 0 healthy")
    nobody = survey(unreachable=("n1", "n2", "n3"))
    assert str(quorum_problem(nobody, "n2")).startswith("etcd has no quorum: no member can list its members "
                                                        "(answering for themselves: none)")
    # etcd 3.5 lists its members only with a quorum: the one left still answers for itself.
    unlisted = copy.deepcopy(alone) | {"members": None}
    problem = quorum_problem(survey(unreachable=("n2", "n3"), n1={"member": unlisted}), "n2")
    assert problem == ("etcd has no quorum: no member can list its members (answering for themselves: n1), so etcd "
                       "cannot change them; restore a snapshot onto the ones left (`bootstrap etcd restore SNAPSHOT "
                       "--survivors n1`, docs/etcd.md), then replace the others")


def test_a_fresh_machine_rejoins_with_the_members_there_are(cluster: Cluster) -> None:
    found = survey(n2={"running": False, "member": None})
    # n2's old member was removed: the others list only themselves.
    for name in ("n1", "n3"):
        found.reports[name] = found.reports[name].model_copy(update={"member": found.reports[name].member.model_copy(
            update={"members": [m for m in found.reports[name].member.members if m.name != "n2"]})})
    assert join_problems(cluster.node("n2"), found, "n1") == []
    plan = plan_join(cluster.node("n2"), found, "n1", "j1")
    assert plan.initial_cluster == "n1=https://10.88.1.11:2380,n3=https://10.88.1.13:2380,n2=https://10.88.1.12:2380"
    assert plan.existing_id is None and plan.backup == "/var/lib/etcd.cb-replaced-j1"
    assert plan.as_dict("n2", "n1")["join_env"] == (f"ETCD_INITIAL_CLUSTER={plan.initial_cluster}\n"
                                                    "ETCD_INITIAL_CLUSTER_STATE=existing\n")
    # Judged after the join: a learner left unpromoted is named.
    joined = survey()
    assert joined_problems(plan, joined) == []
    learner = copy.deepcopy(PROBES["n2"]["member"])
    learner["members"][1]["learner"] = True
    assert joined_problems(plan, survey(n2={"member": learner})) == [
        "n2 is still a learner (not promoted): run `bootstrap node replace n2` again"]


def test_a_machine_that_does_not_answer_cannot_rejoin_until_it_is_up(cluster: Cluster) -> None:
    found = survey(unreachable=("n2",))
    problem, = join_problems(cluster.node("n2"), found, "n1")
    assert problem.startswith("n2 does not answer") and "bring the fresh machine up at 10.88.1.12" in problem
    with pytest.raises(BootstrapError, match="n2's etcd member is out of etcd, but n2 does not answer"):
        replace_join_phases(found, cluster.node("n2"))


def test_the_join_is_etcds_own_under_systemd_and_kubeadms_under_static_pods(cluster: Cluster) -> None:
    assert replace_join_phases(survey(), cluster.node("n2")) == REPLACE_JOIN_SYSTEMD_PHASES == ("etcd_member_join",)
    static = survey(n1={"kind": "static_pod"})
    assert replace_join_phases(static, cluster.node("n2")) == REPLACE_JOIN_KUBEADM_PHASES
    # A control plane that replaces one gets the certificate renewal timer, as `node add` gives it.
    assert REPLACE_JOIN_KUBEADM_PHASES == ("reset", "preflight", "prepare", "join", "certs_timer", "gpu", "verify")


# --- the command's refusals, before any node is touched ----------------------------------------------------------

def test_restore_refuses_a_snapshot_that_fails_its_check_before_touching_any_node(
        cluster: Cluster, tmp_path: Path) -> None:
    damaged = tmp_path / RECORD["name"]
    data = (DATA / "snapshot-3.5.16.db").read_bytes()
    damaged.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    shutil.copy(DATA / "snapshot-3.5.16.json", record_path(damaged))
    outcome = run_main("etcd", "restore", str(damaged), "--yes", "--inventory", str(cluster.inventory_path))
    assert_refused(outcome, str(damaged), "fails its check", "its SHA-256 is not its record's")


def test_restore_refuses_a_survivor_that_is_no_control_plane(cluster: Cluster, tmp_path: Path) -> None:
    good = tmp_path / RECORD["name"]
    shutil.copy(DATA / "snapshot-3.5.16.db", good)
    shutil.copy(DATA / "snapshot-3.5.16.json", record_path(good))
    outcome = run_main("etcd", "restore", str(good), "--survivors", "n1,n9", "--yes",
                       "--inventory", str(cluster.inventory_path))
    assert_refused(outcome, "--survivors", "'n9' is not a control plane", "n1, n2, n3")
