"""Getting the control plane back with `bootstrap node replace` and `bootstrap etcd restore --survivors`, against
the session's real three-member etcd (tests/lab/etcd.py: Debian's etcd 3.5 under systemd, kubeadm's layout).

A member whose data directory is lost is replaced and gets every key back. A dead member (its machine powered
off) is removed through a healthy one; the replace then waits for a machine to answer. With a second machine
gone, quorum is lost and a replace is refused with the way back: a restore onto the one left, then the others
replaced, ending with three healthy members holding exactly the snapshot's keys.

The first control plane is replaced like the others. A snapshot sent to a real S3 server (moto's, run here) with
its certificates sealed, then every control plane reset (etcd's data and /etc/kubernetes/pki gone, and this
machine's copies), comes back from the store alone.

What cannot run here: under kubeadm's static pods the fresh machine joins with `kubeadm join --control-plane`
(the node's own phases); here etcd joins by itself (learner, then promoted).
"""
from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab.etcd import DATA_DIR, PKI_DIR, EtcdCluster, cluster_config
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


def test_the_first_control_plane_is_replaced_like_the_others(cluster: EtcdCluster) -> None:
    n1, n2 = cluster.lab.node("n1"), cluster.lab.node("n2")
    cluster.etcd.put(n2, {f"/registry/leases/kube-node-lease/n{i}": f"lease-{i}" for i in range(5)})
    expected = cluster.etcd.keys(n2, local=False)
    n1.ssh(f"systemctl stop etcd && rm -rf {DATA_DIR}/member")
    outcome = bootstrap(cluster, "node", "replace", "n1", "--yes")
    assert outcome.code == 0, outcome.stderr
    text = " ".join(outcome.stderr.split())
    assert "removed through n2" in text and "n1 joined etcd through n2" in text
    cluster.healthy()
    assert cluster.etcd.keys(n1, local=True) == expected


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real S3 server (moto's) on this machine, a bucket in it, and credentials for it in the environment."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for name, value in {"AWS_ACCESS_KEY_ID": "lab", "AWS_SECRET_ACCESS_KEY": "lab-secret",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    import boto3

    boto3.client("s3", endpoint_url=f"http://{host}:{port}").create_bucket(Bucket="etcd-backups")
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def test_every_control_plane_lost_comes_back_from_the_store_alone(cluster: EtcdCluster, store: str,
                                                                  tmp_path: Path) -> None:
    key = tmp_path / "pki.key"
    key.write_text("a passphrase only the operator knows\n")
    key.chmod(0o600)
    config = cluster_config(cluster.lab, tmp_path / "cluster.yaml", snapshot_keep=2,
                            snapshot_target="s3://etcd-backups/lab", s3_endpoint=store, pki_key_file=str(key))
    n1 = cluster.lab.node("n1")
    cluster.etcd.put(n1, {f"/registry/secrets/prod/db-{i}": f"password-{i}" for i in range(10)})
    outcome = run_main(*cluster.args("etcd", "snapshot", "--output", "json", config=config), timeout_s=900)
    assert outcome.code == 0, outcome.stderr
    name = Path(json.loads(outcome.stdout)["snapshot"]["path"]).name
    expected = cluster.etcd.keys(n1, local=False)
    ca = n1.ssh(f"sha256sum {PKI_DIR}/etcd/ca.crt").stdout.split()[0]
    import boto3

    listed = boto3.client("s3", endpoint_url=store).list_objects_v2(Bucket="etcd-backups", Prefix="lab/")
    stem = name.removesuffix(".db")
    assert {o["Key"] for o in listed["Contents"]} >= {f"lab/{name}", f"lab/{stem}.json", f"lab/{stem}.pki.enc"}

    # Every control plane reset: etcd stopped, its data, its certificates and every copy gone, here too.
    for node in cluster.lab.nodes:
        node.ssh(f"systemctl stop etcd && rm -rf {DATA_DIR}/member {DATA_DIR}.cb-* {PKI_DIR} "
                 "/var/lib/etcd-snapshots")
    shutil.rmtree(cluster.snapshots_here, ignore_errors=True)

    outcome = run_main(*cluster.args("etcd", "restore", "--from", f"s3://etcd-backups/lab/{name}", "--yes",
                                     config=config), timeout_s=900)
    assert outcome.code == 0, outcome.stderr
    assert "put back on n1, n2, n3" in " ".join(outcome.stderr.split())
    cluster.healthy()
    for node in cluster.lab.nodes:
        assert node.ssh(f"sha256sum {PKI_DIR}/etcd/ca.crt").stdout.split()[0] == ca
        assert cluster.etcd.keys(node, local=True) == expected, node.name
