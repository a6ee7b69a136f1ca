"""etcd snapshots on this machine, judged on a real one: a snapshot `bootstrap etcd snapshot` took of a lab etcd
(3.5.16) and the record that came with it (tests/data/etcd/). A copy is named as complete only when it is the
file its record describes, ending with the integrity hash etcd appends; cut short or changed anywhere, it is
refused, and removed. The last N are kept, other clusters' snapshots left alone. A snapshot brought to `restore`
is checked here before any node is touched."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provision.errors import BootstrapError, InputError
from provision.nodes.etcd.snapshot import (
    PART_SUFFIX,
    SnapshotRecord,
    clean_parts,
    file_facts,
    identity_problems,
    keep_newest,
    load_snapshot,
    local_snapshots,
    needed_bytes,
    record_path,
    snapshot_problems,
    space_problem,
    store_fetched,
)
from tests.support.paths import REPO_ROOT
from tests.support.refusal import assert_refused, run_main

DATA = REPO_ROOT / "tests" / "data" / "etcd"
SNAPSHOT = (DATA / "snapshot-3.5.16.db").read_bytes()
RECORD = json.loads((DATA / "snapshot-3.5.16.json").read_text())
NAME = RECORD["name"]


def record(**changes: object) -> SnapshotRecord:
    return SnapshotRecord.model_validate(RECORD | changes)


def fetched(directory: Path, content: bytes = SNAPSHOT, **changes: object) -> SnapshotRecord:
    """A copy as the fetch leaves it: `<name>.db.part` in the directory."""
    rec = record(**changes)
    (directory / (rec.name + PART_SUFFIX)).write_bytes(content)
    return rec


def saved(directory: Path, **changes: object) -> Path:
    """A complete snapshot in the directory, under the record's name."""
    rec = record(**changes)
    (directory / rec.name).write_bytes(SNAPSHOT)
    record_path(directory / rec.name).write_text(json.dumps(rec.model_dump(mode="json", by_alias=True)))
    return directory / rec.name


def test_the_snapshot_etcd_streamed_ends_with_its_integrity_hash_and_is_the_file_its_record_describes(
        tmp_path: Path) -> None:
    path = tmp_path / NAME
    path.write_bytes(SNAPSHOT)
    facts = file_facts(path)
    assert facts.trailer_ok
    assert (facts.size, facts.sha256) == (RECORD["size"], RECORD["sha256"])
    assert snapshot_problems(record(), facts) == []


def test_a_copy_that_checks_out_is_named_with_its_record_beside_it(tmp_path: Path) -> None:
    rec = fetched(tmp_path)
    snapshot = store_fetched(rec, tmp_path, keep=5, node="n1")
    assert snapshot.path == tmp_path / NAME
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([NAME, NAME.replace(".db", ".json")])
    assert snapshot.path.stat().st_mode & 0o777 == 0o600
    assert json.loads(record_path(snapshot.path).read_text())["sha256"] == RECORD["sha256"]
    assert (snapshot.revision, snapshot.keys, snapshot.hash) == (RECORD["revision"], RECORD["total_key"],
                                                                  RECORD["hash"])


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(SNAPSHOT) - 1))
def test_a_copy_cut_short_anywhere_is_refused_and_never_named_as_complete(tmp_path: Path, cut: int) -> None:
    directory = tmp_path / f"cut-{cut}"
    directory.mkdir()
    rec = fetched(directory, SNAPSHOT[:cut])
    with pytest.raises(BootstrapError, match="fails its check: it is .* bytes and its record says"):
        store_fetched(rec, directory, keep=5, node="n1")
    assert list(directory.iterdir()) == []


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(where=st.integers(min_value=0, max_value=len(SNAPSHOT) - 1), flip=st.integers(min_value=1, max_value=255))
def test_a_copy_with_any_byte_changed_is_refused(tmp_path: Path, where: int, flip: int) -> None:
    directory = tmp_path / f"flip-{where}-{flip}"
    directory.mkdir()
    damaged = bytearray(SNAPSHOT)
    damaged[where] ^= flip
    rec = fetched(directory, bytes(damaged))
    with pytest.raises(BootstrapError, match="SHA-256 is not its record's"):
        store_fetched(rec, directory, keep=5, node="n1")
    assert not (directory / NAME).exists()


def test_a_file_etcd_did_not_stream_is_refused_even_with_a_record_that_matches_it(tmp_path: Path) -> None:
    # A database copied out of a data directory has no integrity hash: its own record cannot vouch for it.
    body = SNAPSHOT[:-32]
    path = tmp_path / NAME
    path.write_bytes(body)
    facts = file_facts(path)
    rec = record(size=facts.size, sha256=facts.sha256)
    assert any("integrity hash etcd appends" in p for p in snapshot_problems(rec, facts))


def test_the_last_n_of_this_cluster_are_kept_and_other_clusters_snapshots_are_left_alone(tmp_path: Path) -> None:
    mine = [saved(tmp_path, name=f"n1-2026112{day}T000000Z-r{day}.db", taken_at=f"2026-11-2{day}T00:00:00Z")
            for day in range(1, 6)]
    theirs = saved(tmp_path, name="master-20261120T000000Z-r9.db", cluster="master",
                   taken_at="2026-11-20T00:00:00Z")
    removed = keep_newest(tmp_path, "n1", 2)
    assert sorted(p.name for p in removed) == sorted(
        [p.name for p in mine[:3]] + [record_path(p).name for p in mine[:3]])
    assert [s.path for s in local_snapshots(tmp_path)] == [theirs, *mine[3:]]


def test_a_copy_a_killed_run_left_is_cleaned_by_the_next_run(tmp_path: Path) -> None:
    (tmp_path / ("n1-20261125T000000Z-r3.db" + PART_SUFFIX)).write_bytes(SNAPSHOT[:100])
    kept = saved(tmp_path)
    assert [p.name for p in clean_parts(tmp_path)] == ["n1-20261125T000000Z-r3.db.part"]
    assert [s.path for s in local_snapshots(tmp_path)] == [kept]


def test_a_snapshot_brought_to_restore_is_checked_here_before_any_node_is_touched(tmp_path: Path) -> None:
    good = saved(tmp_path)
    assert load_snapshot(good).record.revision == RECORD["revision"]

    with pytest.raises(InputError, match="no such snapshot"):
        load_snapshot(tmp_path / "missing.db")
    lone = tmp_path / "lone" / NAME
    lone.parent.mkdir()
    lone.write_bytes(SNAPSHOT)
    with pytest.raises(InputError, match="no record beside it .*take one with it"):
        load_snapshot(lone)
    renamed = tmp_path / "renamed.db"
    shutil.copy(good, renamed)
    shutil.copy(record_path(good), record_path(renamed))
    with pytest.raises(InputError, match="a snapshot keeps the name it was taken under"):
        load_snapshot(renamed)
    record_path(lone).write_text("{not json")
    with pytest.raises(InputError, match="not a snapshot record \\(not JSON text\\)"):
        load_snapshot(lone)
    good.write_bytes(SNAPSHOT[:-1] + bytes([SNAPSHOT[-1] ^ 1]))
    with pytest.raises(InputError, match="fails its check: its SHA-256 is not its record's"):
        load_snapshot(good)


@pytest.mark.parametrize("name", ["../escape.db", "/etc/passwd.db", "a/b.db", ".hidden.db", "snapshot"])
def test_a_record_cannot_name_a_file_outside_the_snapshot_directory(name: str) -> None:
    with pytest.raises(ValueError, match="not a snapshot's file name"):
        record(name=name)


def test_a_snapshot_of_another_cluster_is_told_apart_by_its_etcd_ca() -> None:
    assert identity_problems(record(), [RECORD["ca_sha256"]] * 3) == []
    other = "0" * 64
    problem, = identity_problems(record(), [other])
    assert "taken from another cluster" in problem and RECORD["ca_sha256"][:16] in problem
    assert identity_problems(record(ca_sha256=None), [other]) == [
        "its record names no etcd CA, so which cluster it came from is unknown"]


def test_room_for_a_snapshot_is_its_database_and_a_margin() -> None:
    needed = needed_bytes(100 << 20)
    assert needed > 100 << 20
    assert space_problem("n1:/var/lib/etcd-snapshots", needed, needed) is None
    assert space_problem("n1:/var/lib/etcd-snapshots", None, needed) is None
    problem = space_problem("n1:/var/lib/etcd-snapshots", 10 << 20, needed)
    assert problem == f"n1:/var/lib/etcd-snapshots has 10 MiB free and a snapshot needs {needed >> 20} MiB: " \
                      "free some space there"


def test_taking_the_cluster_down_forgets_its_state_here_but_keeps_its_snapshots(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from provision.cli.commands.reset import forget_local_cluster
    from provision.inputs.inventory import load_inventory
    from provision.inputs.state import cluster_dir
    from provision.nodes.etcd.snapshot import default_directory

    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config to touch
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\nn1 ansible_host=10.0.0.1\n")
    cluster = load_inventory(hosts)
    directory = cluster_dir(cluster)
    (directory / "state.json").write_text("{}")
    (directory / "admin.conf").write_text("kind: Config")
    default_directory(cluster).mkdir()
    kept = saved(default_directory(cluster))
    notes = forget_local_cluster(cluster)
    assert notes == ["local kubeconfig and state removed",
                     f"1 etcd snapshot kept in {default_directory(cluster)}"]
    assert sorted(p.name for p in directory.rglob("*")) == sorted(
        ["etcd-snapshots", kept.name, record_path(kept).name])


@pytest.mark.parametrize("schedule", ["hourly\nExecStartPre=/bin/sh -c id", "every hour", " hourly"])
def test_a_schedule_systemd_would_not_read_as_one_calendar_is_refused_naming_the_setting(
        tmp_path: Path, schedule: str) -> None:
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.0.0.1\n")
    config = tmp_path / "cluster.yaml"
    config.write_text(f"etcd:\n  snapshot_timer: true\n  snapshot_schedule: {json.dumps(schedule)}\n")
    outcome = run_main("etcd", "snapshots", "--inventory", str(hosts), "--config", str(config))
    assert_refused(outcome, str(config), "snapshot_schedule", "is not a systemd calendar", "write it as '*-*-* 00/6:00:00'")
