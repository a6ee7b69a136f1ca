"""`bootstrap etcd snapshot` against a real etcd: three lab nodes, each a control plane running Debian's etcd 3.5
under systemd with kubeadm's certificates, data directory and member names (tests/lab/etcd.py).

A snapshot is taken on a healthy member with the cluster's own client certificates, checked there, kept on the
node, streamed here and checked again; taken from another member while one is down; a copy interrupted midway
leaves nothing named as complete and the next run finishes; a machine without room for it, here or on the node,
is refused before anything is written. One lab for the file, snapshot_keep 2.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from provision.nodes.etcd.snapshot import PART_SUFFIX, load_snapshot, local_snapshots
from tests.lab.etcd import LabEtcd, cluster_config, control_plane_inventory, throttle
from tests.lab.lab import Lab
from tests.support.paths import REPO_ROOT
from tests.support.refusal import Outcome, run_main

NODE_SNAPSHOTS = "/var/lib/etcd-snapshots"


@dataclass
class EtcdCluster:
    lab: Lab
    etcd: LabEtcd
    inventory: Path
    config: Path
    state: Path

    @property
    def snapshots_here(self) -> Path:
        return self.state / "clusters" / f"n1@{self.lab.node('n1').ip}" / "etcd-snapshots"

    def args(self, *command: str) -> list[str]:
        return [*command, "--inventory", str(self.inventory), "--config", str(self.config)]

    def bootstrap(self, *command: str) -> Outcome:
        """`bootstrap COMMAND` through the real entry point, as a user runs it."""
        return run_main(*self.args(*command), timeout_s=900)

    def node_snapshots(self, name: str) -> list[str]:
        out = self.lab.node(name).ssh(f"ls {NODE_SNAPSHOTS} 2>/dev/null; true").stdout
        return sorted(line for line in out.split() if line.endswith(".db"))


@pytest.fixture(scope="module")
def cluster(lab_factory: Callable[..., Lab], tmp_path_factory: pytest.TempPathFactory) -> EtcdCluster:
    lab = lab_factory(3)
    etcd = LabEtcd.up(lab)
    work = tmp_path_factory.mktemp("etcd-snapshot")
    return EtcdCluster(lab, etcd, control_plane_inventory(lab, work / "hosts.ini"),
                       cluster_config(lab, work / "cluster.yaml", snapshot_keep=2), work / "state")


@pytest.fixture(autouse=True)
def shared_state(private_state_dir: None, cluster: EtcdCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file's tests share one cluster's state on this machine (its snapshots), as one operator would."""
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(cluster.state))


def test_a_snapshot_is_taken_on_a_member_checked_kept_there_and_copied_here(cluster: EtcdCluster) -> None:
    n1 = cluster.lab.node("n1")
    written = {f"/registry/configmaps/default/cm-{i}": f"value-{i}" for i in range(20)}
    cluster.etcd.put(n1, written)
    revision = json.loads(cluster.etcd.etcdctl(n1, "endpoint status -w json").stdout)[0]["Status"]["header"]["revision"]

    outcome = cluster.bootstrap("etcd", "snapshot", "--output", "json")
    assert outcome.code == 0, outcome.stderr
    document = json.loads(outcome.stdout)
    taken = document["snapshot"]
    path = Path(taken["path"])
    assert path.parent == cluster.snapshots_here
    assert path.name.startswith("n1-") and path.name.endswith(f"-r{revision}.db")
    assert taken["revision"] == revision and taken["member"] == "n1"
    snapshot = load_snapshot(path)  # the check restore runs: size, SHA-256, etcd's integrity hash
    assert snapshot.record.live_keys == len(cluster.etcd.keys(n1))
    assert snapshot.record.members == ["n1", "n2", "n3"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    # The node keeps the same file among its last two.
    on_node = n1.ssh(f"sha256sum {NODE_SNAPSHOTS}/{path.name}").stdout.split()[0]
    assert on_node == snapshot.record.sha256
    # etcd's own reading of the copy here agrees with the record (etcdutl on the node, fed the copy back).
    read = subprocess.run([*n1.ssh_command(), "cat > /tmp/copy.db && etcdutl snapshot status /tmp/copy.db -w json; "
                           "rm -f /tmp/copy.db"], input=path.read_bytes(), capture_output=True, check=True, timeout=120)
    status = json.loads(read.stdout)
    assert (status["revision"], status["totalKey"], status["hash"]) == (
        snapshot.revision, snapshot.keys, snapshot.hash)


def test_a_snapshot_is_taken_from_another_member_while_one_is_down(cluster: EtcdCluster) -> None:
    n1 = cluster.lab.node("n1")
    n1.ssh("systemctl stop etcd")
    try:
        outcome = cluster.bootstrap("etcd", "snapshot")
        assert outcome.code == 0, outcome.stderr
        assert "n1 stopped, n2 healthy, n3 healthy" in " ".join(outcome.stderr.split())
        newest = local_snapshots(cluster.snapshots_here)[-1]
        assert newest.record.member == "n2" and newest.record.node == "n2"
    finally:
        n1.ssh("systemctl start --no-block etcd")
        cluster.etcd.wait_healthy([n1])


def test_a_copy_interrupted_midway_is_never_named_as_complete_and_the_next_run_finishes(
        cluster: EtcdCluster) -> None:
    n1 = cluster.lab.node("n1")
    cluster.etcd.bulk(n1, 3)
    complete_before = [s.path for s in local_snapshots(cluster.snapshots_here)]
    throttle(n1, "1mbit")
    command = [sys.executable, "-m", "provision", *cluster.args("etcd", "snapshot")]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        part = _wait_for_growing_part(cluster.snapshots_here, process)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        throttle(n1, None)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    # What arrived is there under its part name, nothing more is named as complete.
    assert part.exists() and 0 < part.stat().st_size < load_node_record(cluster, part)["size"]
    assert [s.path for s in local_snapshots(cluster.snapshots_here)] == complete_before

    outcome = cluster.bootstrap("etcd", "snapshot")
    assert outcome.code == 0, outcome.stderr
    assert not list(cluster.snapshots_here.glob(f"*{PART_SUFFIX}"))
    kept = local_snapshots(cluster.snapshots_here)
    # snapshot_keep: 2, here and on the node.
    assert len(kept) == 2 and load_snapshot(kept[-1].path).record.live_keys == len(cluster.etcd.keys(n1))
    assert len(cluster.node_snapshots("n1")) == 2


def load_node_record(cluster: EtcdCluster, part: Path) -> dict[str, object]:
    name = part.name.removesuffix(PART_SUFFIX).removesuffix(".db")
    return json.loads(cluster.lab.node("n1").ssh(f"cat {NODE_SNAPSHOTS}/{name}.json").stdout)


def _wait_for_growing_part(directory: Path, process: subprocess.Popen[bytes], timeout_s: float = 300) -> Path:
    """The copy under way: a part here with some bytes in it (the run would fail the test by ending first)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "the snapshot run ended before its copy could be interrupted"
        parts = [p for p in directory.glob(f"*{PART_SUFFIX}") if p.stat().st_size > 0] if directory.is_dir() else []
        if parts:
            return parts[0]
        time.sleep(0.2)
    raise AssertionError(f"no copy under way in {directory} after {timeout_s} s")


def test_no_room_for_the_snapshot_here_or_on_the_node_is_refused_before_anything_is_written(
        cluster: EtcdCluster, tmp_path: Path) -> None:
    n1 = cluster.lab.node("n1")
    on_node = cluster.node_snapshots("n1")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        outcome = cluster.bootstrap("etcd", "snapshot", "--dir", str(small))
    finally:
        subprocess.run(["umount", str(small)], check=True)
    assert outcome.code == 1
    assert f"this machine's {small} has 1 MiB free and a snapshot needs" in outcome.lines[-1]
    assert cluster.node_snapshots("n1") == on_node

    n1.ssh(f"mkdir -p /tmp/full {NODE_SNAPSHOTS} && mount -t tmpfs -o size=1m tmpfs /tmp/full && mount --bind /tmp/full {NODE_SNAPSHOTS}")
    try:
        outcome = cluster.bootstrap("etcd", "snapshot")
        assert n1.ssh(f"ls -A {NODE_SNAPSHOTS}").stdout.strip() == ""
    finally:
        n1.ssh(f"umount {NODE_SNAPSHOTS} && umount /tmp/full")
    assert outcome.code == 1
    assert f"n1:{NODE_SNAPSHOTS} has 1 MiB free and a snapshot needs" in outcome.lines[-1]
    assert cluster.node_snapshots("n1") == on_node
