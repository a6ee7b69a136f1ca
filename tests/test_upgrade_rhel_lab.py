"""Day 2 on Rocky-9-shaped nodes, whose /usr/bin/python3 is a real CPython 3.9 (EL9's interpreter): `upgrade` through
dnf's version lock, `certs check|renew` and `etcd snapshot`, as a user runs them (`python -m provision`).

The nodes are the lab's rocky9 flavour (tests/lab/README.md): dnf and the node's own Python tools run on the
base's Python 3.11 (platform-python), every module of ours on /usr/bin/python3 = 3.9, the interpreter preflight
chose from the platform table; the node's Python records each of our modules it runs (tests/lab/lab.py
MODULE_RECORDER), and every story asserts its modules ran on 3.9. Kubernetes is the stand-ins of
tests/lab/kube_acting.py from signed RPM repositories, one per minor (tests/lab/repos.py build_kubernetes_rpm_repos),
installed and version-locked as prepare leaves them (tests/lab/cluster.py form_cluster); etcd is Debian's etcd
3.5 laid out as kubeadm's stacked member (tests/lab/etcd.py). What only a real kubeadm, kubelet and EL9 would do is
in docs/upgrade.md and tests/lab/README.md.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from provision.inputs.inventory import load_inventory
from provision.inputs.settings import load_settings
from provision.inputs.state import ClusterState
from provision.phases import PhaseContext, run_phases, select_phases
from tests.lab.cluster import KubeLab, form_cluster
from tests.lab.etcd import EtcdCluster, LabEtcd, cluster_config, control_plane_inventory
from tests.lab.lab import MODULES_LOG, Lab, LabNode, modules_run
from tests.lab.repos import RpmTree
from tests.support.refusal import Outcome, run_main

CONTROL_PLANE, WORKER = "n1", "n2"
PYTHON = "3.9."


@pytest.fixture(scope="module")
def kube(lab_factory: Callable[..., Lab], rpm_tree: RpmTree,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeLab]:
    lab = lab_factory(2, flavour="rocky9", rpm_tree=rpm_tree)
    kube = form_cluster(lab, tmp_path_factory.mktemp("upgrade-rhel"), (CONTROL_PLANE,), (WORKER,))
    try:
        yield kube
    finally:
        kube.fake.server.stop()


def forget_modules(nodes: list[LabNode]) -> None:
    for node in nodes:
        node.ssh(f"rm -f {MODULES_LOG}")


def ran_on_python_39(node: LabNode, *modules: str) -> dict[str, set[str]]:
    """The product's modules the node's Python ran since forget_modules: these among them, every one on 3.9."""
    found = modules_run(node)
    assert set(modules) <= set(found), found
    assert all(version.startswith(PYTHON) for versions in found.values() for version in versions), found
    return found


def test_upgrade_moves_the_version_lock_to_the_next_minor_and_runs_every_module_on_python_3_9(kube: KubeLab) -> None:
    nodes = [kube.lab.node(name) for name in kube.nodes]
    for name in kube.nodes:
        assert kube.packages(name) == dict.fromkeys(("kubeadm", "kubectl", "kubelet"), "1.35.2-150500.1.1 hold")
    forget_modules(nodes)
    outcome = kube.bootstrap("upgrade", "--to", "1.36", "--yes", "--skip-etcd-snapshot")
    assert outcome.code == 0, outcome.stderr
    # Preflight chose the table's interpreter for EL9 (nothing in the inventory names one).
    assert kube.state().pythons[CONTROL_PLANE].interpreter == "/usr/bin/python3"
    for node in nodes:
        # The lock released, the release installed, locked again at exactly that version (dnf versionlock), from the
        # repository of the new minor, with its signatures checked.
        assert kube.packages(node.name) == dict.fromkeys(("kubeadm", "kubectl", "kubelet"), "1.36.4-150500.1.1 hold")
        locked = node.ssh("dnf -q versionlock list").stdout.split()
        assert sorted(locked) == [f"{name}-0:1.36.4-150500.1.1.*" for name in ("kubeadm", "kubectl", "kubelet")]
        listing = node.ssh("cat /etc/yum.repos.d/cb-kubernetes.repo").stdout.replace(" = ", "=")
        assert "/kubernetes/v1.36/rpm/" in listing and "\nrepo_gpgcheck=1" in listing and "\ngpgcheck=1" in listing
        assert kube.running_kubelet(node.name) == "v1.36.4"
        ran_on_python_39(node, "cb_node_state")
    assert "cb_kube_versions" in ran_on_python_39(nodes[0])
    state = kube.state()
    assert state.kubernetes_version == "1.36.4" and state.upgrade is not None and state.upgrade.finished
    # A second run has nothing to do: no kubeadm upgrade anywhere, the version locks where they are.
    started = time.time()
    again = kube.bootstrap("upgrade", "--to", "1.36", "--yes", "--skip-etcd-snapshot")
    assert again.code == 0, again.stderr
    assert [str(c) for c in kube.calls() if c.start >= started and c.tool == "kubeadm"
            and c.args.startswith(("upgrade apply", "upgrade node"))] == []
    for node in nodes:
        assert kube.packages(node.name) == dict.fromkeys(("kubeadm", "kubectl", "kubelet"), "1.36.4-150500.1.1 hold")


def test_certs_check_and_renew_read_and_renew_on_python_3_9(kube: KubeLab) -> None:
    node = kube.lab.node(CONTROL_PLANE)
    forget_modules([node])
    outcome = kube.bootstrap("certs", "check", "-o", "json")
    assert outcome.code == 0, outcome.stderr
    rows = {row["name"]: row for row in json.loads(outcome.stdout)["certificates"]["certificates"]}
    assert {"apiserver", "etcd-server", "admin.conf", "ca"} <= set(rows)
    assert {row["status"] for row in rows.values()} == {"ok"}
    ran_on_python_39(node, "cb_certs")
    before = node.ssh("openssl x509 -noout -serial -in /etc/kubernetes/pki/apiserver.crt").stdout
    forget_modules([node])
    renewed = kube.bootstrap("certs", "renew", "--yes")
    assert renewed.code == 0, renewed.stderr
    assert node.ssh("openssl x509 -noout -serial -in /etc/kubernetes/pki/apiserver.crt").stdout != before
    ran_on_python_39(node, "cb_certs")


@pytest.fixture(scope="module")
def etcd_on_rocky9(lab_factory: Callable[..., Lab], rpm_tree: RpmTree,
                   tmp_path_factory: pytest.TempPathFactory) -> EtcdCluster:
    """One Rocky-9-shaped control plane running a real etcd member (Debian's etcd 3.5, kubeadm's layout)."""
    lab = lab_factory(1, flavour="rocky9", rpm_tree=rpm_tree)
    work = tmp_path_factory.mktemp("etcd-rhel")
    return EtcdCluster(lab, LabEtcd.up(lab), control_plane_inventory(lab, work / "hosts.ini"),
                       cluster_config(lab, work / "cluster.yaml", snapshot_keep=2), work / "state")


def test_an_etcd_snapshot_is_taken_on_python_3_9(etcd_on_rocky9: EtcdCluster,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = etcd_on_rocky9
    node = cluster.lab.nodes[0]
    cluster.etcd.put(node, {"/registry/configmaps/default/on-rocky": "9"})
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(cluster.state))
    # As after `up`: its preflight phase has recorded the node's interpreter (the table's), which every later run
    # names. Without that record a run leaves the choice to Ansible's discovery, which here finds python3.11.
    inventory = load_inventory(cluster.inventory)
    ctx = PhaseContext(cluster=inventory, settings=load_settings(cluster.config), state=ClusterState.load(inventory))
    run_phases(select_phases(("preflight",)), ctx)
    assert ClusterState.load(inventory).pythons[node.name].interpreter == "/usr/bin/python3"
    forget_modules([node])
    outcome: Outcome = run_main(*cluster.args("etcd", "snapshot", "--output", "json"), timeout_s=900)
    assert outcome.code == 0, outcome.stderr
    taken = json.loads(outcome.stdout)["snapshot"]
    assert taken["member"] == node.name and Path(taken["path"]).is_file()
    ran_on_python_39(node, "cb_etcd_snapshot", "cb_etcd")
