"""Getting the control plane back with `bootstrap node replace` and `bootstrap etcd restore --survivors`, against
the session's real three-member etcd (tests/lab/etcd.py: Debian's etcd 3.5 under systemd, kubeadm's layout).

A member whose data directory is lost is replaced and gets every key back. A dead member (its machine powered
off) is removed through a healthy one; the replace then waits for a machine to answer. With a second machine
gone, quorum is lost and a replace is refused with the way back: a restore onto the one left, then the others
replaced, ending with three healthy members holding exactly the snapshot's keys.

What cannot run here: under kubeadm's static pods the fresh machine joins with `kubeadm join --control-plane`
(the node's own phases); here etcd joins by itself (learner, then promoted).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lab.etcd import DATA_DIR, EtcdCluster
from tests.support.refusal import Outcome, run_main


@pytest.fixture
def cluster(etcd_cluster: EtcdCluster, private_state_dir: None, monkeypatch: pytest.MonkeyPatch) -> EtcdCluster:
    etcd_cluster.healthy()
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(etcd_cluster.state))
    return etcd_cluster


def bootstrap(cluster: EtcdCluster, *command: str) -> Outcome:
    return run_main(*cluster.args(*command), timeout_s=900)


def test_a_member_whose_data_directory_is_lost_is_replaced_and_gets_every_key_back(cluster: EtcdCluster) -> None:
    n1, n2 = cluster.lab.node("n1"), cluster.lab.node("n2")
    cluster.etcd.put(n1, {f"/registry/pods/default/pod-{i}": f"spec-{i}" for i in range(20)})
    expected = cluster.etcd.keys(n1, local=False)
    n2.ssh(f"systemctl stop etcd && rm -rf {DATA_DIR}/member")

    outcome = bootstrap(cluster, "node", "replace", "n2", "--yes")
    assert outcome.code == 0, outcome.stderr
    text = " ".join(outcome.stderr.split())
    assert "n2's etcd member" in text and "removed through n1" in text
    assert "n2 joined etcd through n1 (learner, then promoted): members n1, n2, n3, all healthy" in text
    cluster.healthy()
    assert cluster.etcd.keys(n2, local=True) == expected
    # The join's drop-in is gone: etcd.service runs as its own configuration says.
    assert n2.ssh("ls /etc/systemd/system/etcd.service.d/ 2>/dev/null; true").stdout.strip() == ""


def test_quorum_lost_then_back_from_a_snapshot_onto_the_survivor_and_the_others_replaced(cluster: EtcdCluster) -> None:
    n1, n2, n3 = (cluster.lab.node(name) for name in ("n1", "n2", "n3"))
    cluster.etcd.put(n1, {f"/registry/deployments/default/app-{i}": f"replicas-{i}" for i in range(10)})
    outcome = bootstrap(cluster, "etcd", "snapshot", "--output", "json")
    assert outcome.code == 0, outcome.stderr
    snapshot = Path(json.loads(outcome.stdout)["snapshot"]["path"])
    expected = cluster.etcd.keys(n1, local=False)
    try:
        # n3's machine dies: its member goes out of etcd through n1 (quorum: n1 and n2), and the replace stops
        # there until a machine answers for n3.
        n3.stop()
        outcome = bootstrap(cluster, "node", "replace", "n3", "--yes")
        assert outcome.code == 1
        assert "n3's etcd member is out of etcd, but n3 does not answer" in outcome.lines[-1]
        assert cluster.etcd.member_names(n1) == ["n1", "n2"]

        # n2's dies too: one of two members left, no quorum. Replacing is refused, naming the way back.
        n2.stop()
        outcome = bootstrap(cluster, "node", "replace", "n2", "--yes")
        assert outcome.code == 1
        # etcd 3.5 lists its members only with a quorum; n1 still answers for itself.
        assert "etcd has no quorum: no member can list its members (answering for themselves: n1)" \
            in outcome.lines[-1]
        # The command printed carries this run's inputs.
        assert (f"`bootstrap etcd restore --inventory {cluster.inventory} --config {cluster.config} SNAPSHOT "
                "--survivors n1`") in outcome.lines[-1]

        # The way back: the snapshot restored onto the survivor, a cluster of one.
        outcome = bootstrap(cluster, "etcd", "restore", str(snapshot), "--survivors", "n1", "--yes")
        assert outcome.code == 0, outcome.stderr
        cluster.etcd.wait_healthy([n1])
        assert cluster.etcd.member_names(n1) == ["n1"]
        assert cluster.etcd.keys(n1, local=True) == expected
    finally:
        for node in (n2, n3):
            node.start()

    # The machines are back (with their old data, members of the old cluster): each replaced in turn.
    for name in ("n2", "n3"):
        outcome = bootstrap(cluster, "node", "replace", name, "--yes")
        assert outcome.code == 0, outcome.stderr
    cluster.healthy()
    for node in cluster.lab.nodes:
        assert cluster.etcd.keys(node, local=True) == expected, node.name
