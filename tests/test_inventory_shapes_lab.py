"""An inventory in kubeasz's shape on real lab nodes: host names are IP addresses, k8s_nodename names the nodes.
Ansible reaches each node by its IP address; prepare makes the node name its hostname and lists every node in
/etc/hosts; kubeadm (a stand-in, tests/support/kube_stand_ins.py) is given the node name to register."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from provision.inputs.inventory import load_inventory
from provision.inputs.settings import load_settings
from provision.inputs.state import ClusterState
from provision.nodes.runner import run_playbook
from provision.phases import PHASES, PhaseContext
from tests.lab.lab import Lab
from tests.support.kube_stand_ins import install_command, leaked
from tests.support.node_reports import installed_release

NODE_NAMES = Path(__file__).resolve().parent / "playbooks" / "node_names.yml"


@pytest.fixture(autouse=True)
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def test_ip_address_host_names_with_k8s_nodename_become_hostnames_and_kubeadm_node_names(
        lab_factory: Callable[..., Lab]) -> None:
    lab = lab_factory(2)
    master, worker = lab.node("n1"), lab.node("n2")
    lab.inventory_path.write_text("\n".join([
        "[etcd]", master.ip, "", "[kube_master]", f"{master.ip} k8s_nodename='master-01'", "",
        "[kube_node]", f"{worker.ip} k8s_nodename='worker-01'", "", "[harbor]", "", "[ex_lb]", "",
        "[all:vars]", "k8s_nodename=''", "ansible_user=tester", "ansible_become=true",
        f"ansible_ssh_private_key_file={lab.key_path}", f"ansible_python_interpreter={lab.flavour.python}", ""]))
    cluster = load_inventory(lab.inventory_path)
    assert [(n.name, n.host) for n in cluster.nodes] == [("master-01", master.ip), ("worker-01", worker.ip)]
    settings = load_settings(lab.config_path)

    named = run_playbook(str(NODE_NAMES), cluster, settings, phase="node-names")
    assert named.ok, named.failures
    # Ansible reports by its own names for the hosts, the IP addresses.
    assert set(named.tally) == {master.ip, worker.ip}
    for node, name in ((master, "master-01"), (worker, "worker-01")):
        assert node.ssh("hostname").stdout.strip() == name
        hosts = node.ssh("sed -n '/BEGIN cluster-bootstrap nodes/,/END/p' /etc/hosts").stdout.splitlines()
        assert hosts[1:-1] == [f"{master.ip} master-01", f"{worker.ip} worker-01"]
    again = run_playbook(str(NODE_NAMES), cluster, settings, phase="node-names")
    assert again.ok and sum(again.changed.values()) == 0

    for node in (master, worker):
        node.ssh(install_command(f"{master.ip}:6443"))
    ctx = PhaseContext(cluster=cluster, settings=settings, state=ClusterState.load(cluster))
    ctx.state.kubernetes_version = installed_release(settings)  # prepare's decision (the kubeadm here is a fake)
    for phase in ("control_plane", "join"):
        definition = PHASES[phase]
        assert definition.playbook and definition.extra_vars
        result = run_playbook(definition.playbook, cluster, settings, phase=phase,
                              extra_vars=definition.extra_vars(ctx))
        assert result.ok, result.failures
        assert leaked(result.run_dir) == []
    init = master.ssh("cat /etc/kubernetes/kubeadm-config.yaml").stdout
    assert "name: master-01" in init
    (join,) = worker.ssh("cat /root/kubeadm-calls").stdout.splitlines()
    assert " --node-name worker-01 " in join
