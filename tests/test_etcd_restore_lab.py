"""`bootstrap etcd restore` against a real etcd: the session's three lab control planes, each running Debian's
etcd 3.5 under systemd with kubeadm's certificates, data directory and member names (tests/lab/etcd.py).

A snapshot is taken, keys are written and deleted after it, and the restore brings back exactly the snapshot's
keys on every member, as one new cluster at a raised revision, the old data kept aside. A restore of another
cluster's snapshot, or with a member that does not answer, is refused and changes nothing. A restore killed
midway, run again, finishes under the same id.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision.nodes.etcd.restore import BUMP_REVISION
from provision.nodes.etcd.snapshot import load_snapshot, record_path
from tests.lab.etcd import DATA_DIR, EtcdCluster
from tests.support.paths import REPO_ROOT
from tests.support.refusal import Outcome, run_main

STAGING = "/var/lib/etcd-snapshots/restore"


@pytest.fixture
def cluster(etcd_cluster: EtcdCluster, private_state_dir: None, monkeypatch: pytest.MonkeyPatch) -> EtcdCluster:
    etcd_cluster.healthy()
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(etcd_cluster.state))
    return etcd_cluster


def bootstrap(cluster: EtcdCluster, *command: str) -> Outcome:
    return run_main(*cluster.args(*command), timeout_s=900)


def take_snapshot(cluster: EtcdCluster) -> Path:
    outcome = bootstrap(cluster, "etcd", "snapshot", "--output", "json")
    assert outcome.code == 0, outcome.stderr
    return Path(json.loads(outcome.stdout)["snapshot"]["path"])


def revision(cluster: EtcdCluster, name: str) -> int:
    status = cluster.etcd.etcdctl(cluster.lab.node(name), "endpoint status -w json").stdout
    return int(json.loads(status)[0]["Status"]["header"]["revision"])


def backups(cluster: EtcdCluster, name: str) -> list[str]:
    return cluster.lab.node(name).ssh(f"ls -d {DATA_DIR}.cb-before-* 2>/dev/null; true").stdout.split()


def unfinished_restore(cluster: EtcdCluster) -> object:
    state = cluster.state / "clusters" / f"n1@{cluster.lab.node('n1').ip}" / "state.json"
    return json.loads(state.read_text()).get("etcd_restore")


def test_a_restore_brings_back_exactly_the_snapshots_keys_on_every_member(cluster: EtcdCluster) -> None:
    n1, n2 = cluster.lab.node("n1"), cluster.lab.node("n2")
    cluster.etcd.put(n1, {f"/registry/secrets/default/secret-{i}": f"value-{i}" for i in range(10)})
    path = take_snapshot(cluster)
    expected = cluster.etcd.keys(n1, local=False)
    assert "/registry/secrets/default/secret-0" in expected
    # After the snapshot: a key written, a key deleted, a key changed.
    cluster.etcd.put(n2, {"/registry/after/written": "later", "/registry/secrets/default/secret-1": "changed"})
    cluster.etcd.etcdctl(n2, "del /registry/secrets/default/secret-0")
    before = {node.name: backups(cluster, node.name) for node in cluster.lab.nodes}

    outcome = bootstrap(cluster, "etcd", "restore", str(path), "--yes")
    assert outcome.code == 0, outcome.stderr
    for node in cluster.lab.nodes:
        assert cluster.etcd.keys(node, local=True) == expected, node.name
        assert revision(cluster, node.name) >= load_snapshot(path).revision + BUMP_REVISION
        assert len(backups(cluster, node.name)) == len(before[node.name]) + 1
        assert node.ssh(f"ls -A {STAGING} 2>/dev/null; true").stdout.strip() == ""
        # etcd's own user owns what the restore wrote.
        assert node.ssh(f"stat -c %U:%a {DATA_DIR}").stdout.strip() == "etcd:700"
    assert cluster.etcd.member_names(n1) == ["n1", "n2", "n3"]
    assert unfinished_restore(cluster) is None


def test_a_refused_restore_changes_nothing(cluster: EtcdCluster, tmp_path: Path) -> None:
    n1, n3 = cluster.lab.node("n1"), cluster.lab.node("n3")
    path = take_snapshot(cluster)
    cluster.etcd.put(n1, {"/registry/after/refusal": "kept"})
    keys = cluster.etcd.keys(n1, local=False)
    kept_aside = {node.name: backups(cluster, node.name) for node in cluster.lab.nodes}

    def nothing_changed() -> None:
        for node in cluster.lab.nodes:
            assert cluster.etcd.keys(node, local=True) == keys, node.name
            assert node.ssh("systemctl is-active etcd").stdout.strip() == "active"
            assert backups(cluster, node.name) == kept_aside[node.name]
            assert node.ssh(f"ls -A {STAGING} 2>/dev/null; true").stdout.strip() == ""
        assert unfinished_restore(cluster) is None

    # Another cluster's snapshot: its record names another etcd CA.
    foreign = tmp_path / path.name
    foreign.write_bytes(path.read_bytes())
    record = json.loads(record_path(path).read_text()) | {"ca_sha256": "ab" * 32}
    record_path(foreign).write_text(json.dumps(record))
    outcome = bootstrap(cluster, "etcd", "restore", str(foreign), "--yes")
    assert outcome.code == 1
    assert "etcd restore refused, nothing changed" in outcome.lines[-1]
    assert "it was taken from another cluster (its etcd CA sha256:abababababababab" in outcome.lines[-1]
    nothing_changed()

    # A member that does not answer.
    n3.cut_link()
    try:
        outcome = bootstrap(cluster, "etcd", "restore", str(path), "--yes")
    finally:
        n3.restore_link()
    assert outcome.code == 1
    assert "n3 does not answer" in outcome.lines[-1] and "--survivors n1,n2" in outcome.lines[-1]
    cluster.etcd.wait_healthy(cluster.lab.nodes)
    nothing_changed()


def held_in(cluster: EtcdCluster, name: str, directory: str, text: str) -> bool:
    """Whether the database of a data directory holds this text (etcd's bbolt file keeps keys and values as they
    are written)."""
    found = cluster.lab.node(name).ssh(f"grep -a -c -F {text} {directory}/member/snap/db; true").stdout.strip()
    return found not in ("", "0")


def test_restored_twice_with_the_first_killed_midway_nothing_written_before_either_is_lost(
        cluster: EtcdCluster) -> None:
    n1 = cluster.lab.node("n1")
    path = take_snapshot(cluster)
    expected = cluster.etcd.keys(n1, local=False)
    first_write = f"written-before-the-first-restore-{time.time_ns()}"
    cluster.etcd.put(n1, {"/registry/after/first": first_write})
    before = {node.name: set(backups(cluster, node.name)) for node in cluster.lab.nodes}

    command = [sys.executable, "-m", "provision", *cluster.args("etcd", "restore", str(path), "--yes")]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        # The moment the first member's data has been moved aside: the restore is rewriting the members.
        deadline = time.monotonic() + 600
        while not set(backups(cluster, "n1")) - before["n1"]:
            assert process.poll() is None, "the restore ended before it could be interrupted"
            assert time.monotonic() < deadline, "the restore never reached the members' data"
            time.sleep(0.5)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    interrupted = unfinished_restore(cluster)
    assert isinstance(interrupted, dict) and interrupted["snapshot"] == path.name
    assert interrupted["sha256"] == load_snapshot(path).record.sha256

    outcome = bootstrap(cluster, "etcd", "restore", str(path), "--yes")
    assert outcome.code == 0, outcome.stderr
    assert f"carrying on with restore {interrupted['id']}" in " ".join(outcome.stderr.split())
    first = f"{DATA_DIR}.cb-before-{interrupted['id']}"
    for node in cluster.lab.nodes:
        # One restore, one set of data kept aside: the data from before it, not a half-restored one.
        assert set(backups(cluster, node.name)) - before[node.name] == {first}
        assert held_in(cluster, node.name, first, first_write), node.name
        assert cluster.etcd.keys(node, local=True) == expected, node.name
    assert unfinished_restore(cluster) is None

    # A second restore, once etcd has taken new writes on the restored data: those are kept aside too.
    second_write = f"written-before-the-second-restore-{time.time_ns()}"
    cluster.etcd.put(n1, {"/registry/after/second": second_write})
    time.sleep(1)  # etcd's backend commits its batch within 100 ms: the write is in the database file
    outcome = bootstrap(cluster, "etcd", "restore", str(path), "--yes")
    assert outcome.code == 0, outcome.stderr
    for node in cluster.lab.nodes:
        kept = set(backups(cluster, node.name)) - before[node.name] - {first}
        assert len(kept) == 1, (node.name, kept)
        assert held_in(cluster, node.name, kept.pop(), second_write), node.name
        assert held_in(cluster, node.name, first, first_write), node.name
        assert cluster.etcd.keys(node, local=True) == expected, node.name
