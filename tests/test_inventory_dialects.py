"""Inventories as users write them for other installers (kubespray, kubeasz, the tutorials) are read unchanged;
what bootstrap cannot do is refused, and what it reads differently is said, each in one line naming the group or
variable and what to write instead."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from provision.errors import InputError
from provision.inputs.inventory import Cluster
from provision.inputs.validation import load_cluster
from provision.nodes.runner import run_inventory
from provision.render.playbook_vars import playbook_vars
from tests.support.paths import REPO_ROOT

KUBESPRAY_SAMPLE = """\
[kube_control_plane]
node1 ansible_host=95.54.0.12 ip=10.3.0.1 etcd_member_name=etcd1
node2 ansible_host=95.54.0.13 ip=10.3.0.2 etcd_member_name=etcd2
node3 ansible_host=95.54.0.14 ip=10.3.0.3 etcd_member_name=etcd3

[etcd:children]
kube_control_plane

[kube_node]
node4 ansible_host=95.54.0.15 ip=10.3.0.4
node5 ansible_host=95.54.0.16 ip=10.3.0.5

[calico_rr]

[k8s_cluster:children]
kube_control_plane
kube_node
calico_rr
"""

# kubespray's YAML sample of its 2.1x releases: hyphenated groups, settings as inventory vars.
KUBESPRAY_YAML = """\
all:
  hosts:
    node1: {ansible_host: 192.168.0.11}
    node2: {ansible_host: 192.168.0.12}
    node3: {ansible_host: 192.168.0.13}
    node4: {ansible_host: 192.168.0.14}
  vars:
    container_manager: containerd
    kube_network_plugin: calico
    kube_pods_subnet: 10.233.64.0/18
    kube_proxy_mode: iptables
  children:
    etcd:
      hosts:
        node1:
        node2:
        node3:
    k8s-cluster:
      children:
        calico-rr: {hosts: {}}
        kube-master:
          hosts:
            node1:
            node2:
            node3:
        kube-node:
          hosts:
            node4:
"""

KUBEASZ = """\
[etcd]
192.168.1.1
192.168.1.2
192.168.1.3

[kube_master]
192.168.1.1 k8s_nodename='master-01'
192.168.1.2 k8s_nodename='master-02'
192.168.1.3 k8s_nodename='master-03'

[kube_node]
192.168.1.4 k8s_nodename='worker-01'

[harbor]

[ex_lb]

[chrony]

[all:vars]
SECURE_PORT="6443"
CONTAINER_RUNTIME="containerd"
CLUSTER_NETWORK="calico"
PROXY_MODE="ipvs"
SERVICE_CIDR="10.96.0.0/12"
CLUSTER_CIDR="10.244.0.0/16"
k8s_nodename=''
"""

TUTORIAL = "[master]\nk8s-master ansible_host=10.0.0.1\n[worker]\nk8s-worker-1 ansible_host=10.0.0.2\n"


def load(tmp_path: Path, text: str, name: str = "hosts.ini", settings: str | None = None) -> Cluster:
    path = tmp_path / name
    path.write_text(text)
    config = None
    if settings is not None:
        config = tmp_path / "cluster.yaml"
        config.write_text(settings)
    return load_cluster(path, config)[0]


def refused(tmp_path: Path, text: str, name: str = "hosts.ini", settings: str | None = None) -> str:
    with pytest.raises(InputError) as raised:
        load(tmp_path, text, name, settings)
    message = str(raised.value)
    assert "\n" not in message
    return message


# --- the shapes users write are read unchanged ---------------------------------------------------------------

def test_kubesprays_sample_is_three_control_planes_with_stacked_etcd_and_its_ip_is_the_node_address(
        tmp_path: Path) -> None:
    cluster = load(tmp_path, KUBESPRAY_SAMPLE)
    assert [n.name for n in cluster.control_planes] == ["node1", "node2", "node3"]
    assert cluster.control_plane.name == "node1"
    assert [n.name for n in cluster.workers] == ["node4", "node5"]
    assert [(n.address, n.ip) for n in cluster.control_planes] == [
        ("95.54.0.12", "10.3.0.1"), ("95.54.0.13", "10.3.0.2"), ("95.54.0.14", "10.3.0.3")]
    # etcd_member_name means nothing with kubeadm's stacked etcd: said once, not refused.
    assert cluster.warnings == (f"{tmp_path / 'hosts.ini'}: etcd_member_name is not used: kubeadm names each etcd "
                                "member after its node; remove it",)


def test_kubesprays_older_yaml_sample_reads_and_its_settings_variables_are_named_with_the_key_to_write(
        tmp_path: Path) -> None:
    cluster = load(tmp_path, KUBESPRAY_YAML, "hosts.yml")
    assert [n.name for n in cluster.control_planes] == ["node1", "node2", "node3"]
    assert [n.name for n in cluster.workers] == ["node4"]
    # Only the variable whose value differs from the effective setting is said (the runtime, plugin and proxy
    # mode are already what bootstrap does).
    (warning,) = cluster.warnings
    assert "kube_pods_subnet='10.233.64.0/18' is not read" in warning
    assert "where kubernetes.pod_cidr is 10.244.0.0/16" in warning
    assert "write `kubernetes.pod_cidr: 10.233.64.0/18` in cluster.yaml" in warning


def test_kubeasz_hosts_named_by_ip_address_get_their_k8s_nodename_as_node_name_and_hostname(tmp_path: Path) -> None:
    cluster = load(tmp_path, KUBEASZ)
    assert [(n.name, n.host, n.address, n.role) for n in cluster.nodes] == [
        ("master-01", "192.168.1.1", "192.168.1.1", "control_plane"),
        ("master-02", "192.168.1.2", "192.168.1.2", "control_plane"),
        ("master-03", "192.168.1.3", "192.168.1.3", "control_plane"),
        ("worker-01", "192.168.1.4", "192.168.1.4", "worker")]
    assert cluster.node("master-02") is cluster.node("192.168.1.2")
    assert cluster.hosts(["master-01", "worker-01"]) == ["192.168.1.1", "192.168.1.4"]
    (warning,) = cluster.warnings
    assert "PROXY_MODE='ipvs' is not read" in warning and "kubernetes.kube_proxy_mode is iptables" in warning

    # Ansible reaches the nodes by their inventory names; the roles learn each one's node name.
    variables = playbook_vars(cluster, load_cluster(tmp_path / "hosts.ini", None)[1])
    assert variables["cb_node_names"] == {"192.168.1.1": "master-01", "192.168.1.2": "master-02",
                                          "192.168.1.3": "master-03", "192.168.1.4": "worker-01"}
    assert variables["cb_control_plane"] == {"name": "master-01", "host": "192.168.1.1", "address": "192.168.1.1"}


def test_the_groups_file_names_hosts_as_ansible_does_with_the_first_control_plane_apart(tmp_path: Path) -> None:
    from provision.inputs.files import parse_yaml
    from provision.inputs.settings import Settings

    cluster = load(tmp_path, KUBEASZ)
    groups = parse_yaml(run_inventory(cluster, tmp_path, Settings()).read_text(), "inventory.yml")["all"]["children"]
    assert list(groups["control_plane"]["hosts"]) == ["192.168.1.1", "192.168.1.2", "192.168.1.3"]
    assert list(groups["first_control_plane"]["hosts"]) == ["192.168.1.1"]
    assert list(groups["workers"]["hosts"]) == ["192.168.1.4"]


def test_the_tutorials_master_and_worker_groups(tmp_path: Path) -> None:
    cluster = load(tmp_path, TUTORIAL)
    assert (cluster.control_plane.name, [w.name for w in cluster.workers]) == ("k8s-master", ["k8s-worker-1"])
    assert cluster.warnings == ()


@pytest.mark.parametrize("control_planes,workers", [("kube_master", "node"), ("masters", "nodes"),
                                                    ("control_plane", "kube_node")])
def test_every_alias_of_both_roles(tmp_path: Path, control_planes: str, workers: str) -> None:
    cluster = load(tmp_path, f"[{control_planes}]\ncp1 ansible_host=10.0.0.1\n[{workers}]\nw1 ansible_host=10.0.0.2\n")
    assert [(n.name, n.role) for n in cluster.nodes] == [("cp1", "control_plane"), ("w1", "worker")]


def test_two_control_planes_are_accepted_with_a_warning_that_they_tolerate_no_failure(tmp_path: Path) -> None:
    cluster = load(tmp_path, "[control_plane]\ncp1 ansible_host=10.0.0.1\ncp2 ansible_host=10.0.0.2\n")
    (warning,) = cluster.warnings
    assert "two control planes ('cp1' and 'cp2') tolerate no failure" in warning
    assert "a third control plane tolerates one" in warning


def test_a_foreign_group_of_nodes_is_read_with_a_warning_saying_what_to_write(tmp_path: Path) -> None:
    cluster = load(tmp_path, TUTORIAL + "[chrony]\nk8s-master\n")
    assert cluster.warnings == (f"{tmp_path / 'hosts.ini'}: [chrony] is not used: no time server is set up: "
                                "prepare turns on time synchronisation on every node; remove the group",)


def test_the_example_inventories_in_the_other_installers_shapes_validate_unchanged() -> None:
    examples = REPO_ROOT / "inventory"
    kubeasz, _ = load_cluster(examples / "kubeasz.ini", examples / "cluster.example.yaml")
    assert [n.name for n in kubeasz.control_planes] == ["master-01", "master-02", "master-03"]
    assert {w.split(": ")[1].split("=")[0] for w in kubeasz.warnings} == {"SERVICE_CIDR", "CLUSTER_CIDR"}
    tutorial, _ = load_cluster(examples / "master-worker.ini", None)
    assert [n.name for n in tutorial.nodes] == ["k8s-master", "k8s-worker-1", "k8s-worker-2"]


def test_kubesprays_example_with_the_ha_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.keys import write_private_key

    write_private_key(tmp_path / ".ssh" / "id_ed25519")
    monkeypatch.setenv("HOME", str(tmp_path))
    examples = REPO_ROOT / "inventory"
    cluster, settings = load_cluster(examples / "kubespray-ha.ini", examples / "cluster.ha.example.yaml")
    assert len(cluster.control_planes) == 3 and settings.control_plane.vip == "10.3.0.100"


# --- what cannot be done is refused, with what to write instead ---------------------------------------------

REFUSALS = [
    ("ip-host-name-without-k8s-nodename", "[control_plane]\n10.0.0.1\n",
     ["host '10.0.0.1' is an IP address", "name the node with k8s_nodename", "10.0.0.1 k8s_nodename=gpu-worker-1"]),
    ("ip-host-name-with-empty-k8s-nodename", "[kube_master]\n10.0.0.1 k8s_nodename=''\n",
     ["host '10.0.0.1' is an IP address"]),
    ("k8s-nodename-upper-case", "[kube_master]\n10.0.0.1 k8s_nodename=Master-01\n",
     ["k8s_nodename='Master-01' is not a valid Kubernetes node name", "upper-case"]),
    ("k8s-nodename-an-ip-address", "[kube_master]\n10.0.0.1 k8s_nodename=10.0.0.1\n",
     ["k8s_nodename='10.0.0.1' is not a valid Kubernetes node name: it is an IP address"]),
    ("k8s-nodename-twice", "[kube_master]\n10.0.0.1 k8s_nodename=m1\n[kube_node]\n10.0.0.2 k8s_nodename=m1\n",
     ["hosts '10.0.0.1' and '10.0.0.2' are both named 'm1'", "k8s_nodename"]),
    ("two-node-name-variables", "[kube_master]\n10.0.0.1 k8s_nodename=m1 kube_override_hostname=m2\n",
     ["k8s_nodename='m1' and kube_override_hostname='m2' name the node differently: keep one"]),
    ("host-name-invalid-beside-k8s-nodename", "[kube_master]\nmaster_1 ansible_host=10.0.0.1 k8s_nodename=m1\n",
     ["host 'master_1' is not a valid inventory host name", "'_'"]),
    ("external-etcd", KUBESPRAY_SAMPLE + "[etcd]\netcd1 ansible_host=10.3.0.9\n",
     ["[etcd] lists 'etcd1', which is not a control plane", "external etcd is not supported",
      "stacked etcd runs one member on each control plane"]),
    ("etcd-leaves-out-a-control-plane", "[kube_control_plane]\ncp1 ansible_host=10.0.0.1\ncp2 ansible_host=10.0.0.2\n"
     "cp3 ansible_host=10.0.0.3\n[etcd]\ncp1\n", ["[etcd] leaves out control plane 'cp2'", "[etcd:children]"]),
    ("only-in-k8s-cluster", TUTORIAL + "[k8s_cluster]\nstray ansible_host=10.0.0.9\n",
     ["host 'stray' is in neither [control_plane] nor [workers] (only [k8s_cluster], which gathers them)"]),
    ("external-load-balancer", TUTORIAL + "[ex_lb]\nlb1 ansible_host=10.0.0.9\n",
     ["host 'lb1' is in [ex_lb]", "control_plane.endpoint", "cluster.yaml"]),
    ("bastion", TUTORIAL + "[bastion]\nbastion ansible_host=203.0.113.1\n",
     ["host 'bastion' is in [bastion]", "ProxyJump"]),
    ("route-reflector", TUTORIAL + "[calico_rr]\nrr1 ansible_host=10.0.0.9\n", ["host 'rr1' is in [calico_rr]"]),
    ("ip-not-an-address", "[kube_control_plane]\nnode1 ansible_host=95.54.0.12 ip=node1.lan\n",
     ["host 'node1': ip='node1.lan' is not an IPv4 address"]),
    ("ip-and-node-ip-differ", "[kube_control_plane]\nnode1 ansible_host=95.54.0.12 ip=10.3.0.1 node_ip=10.3.0.2\n",
     ["node_ip=10.3.0.2 and ip=10.3.0.1 differ", "keep one"]),
    ("access-ip-differs", "[kube_control_plane]\nnode1 ansible_host=95.54.0.12 ip=10.3.0.1 access_ip=95.54.0.99\n",
     ["access_ip='95.54.0.99' differs from the node's address 10.3.0.1", "remove access_ip"]),
]


@pytest.mark.parametrize(("case", "text", "expected"), REFUSALS, ids=[c[0] for c in REFUSALS])
def test_what_cannot_be_done_is_refused_in_one_line(tmp_path: Path, case: str, text: str, expected: list[str]) -> None:
    message = refused(tmp_path, text)
    assert message.startswith(str(tmp_path / "hosts.ini"))
    for words in expected:
        assert words in message


def test_the_cli_refuses_what_it_cannot_do_in_one_line_with_exit_2_before_any_connection(tmp_path: Path) -> None:
    """kubespray's sample with an [etcd] group of other hosts: `config validate` says why and what to write."""
    hosts = tmp_path / "hosts.ini"
    hosts.write_text(KUBESPRAY_SAMPLE + "[etcd]\netcd1 ansible_host=10.3.0.9\n")
    result = subprocess.run([sys.executable, "-m", "provision", "config", "validate", "--inventory", str(hosts)],
                            capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "BOOTSTRAP_STATE_DIR": str(tmp_path / "state"),
                                 "COLUMNS": "400"})
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "[etcd] lists 'etcd1', which is not a control plane" in line and "external etcd is not supported" in line
    assert result.stdout == ""


def test_access_ip_equal_to_ip_is_accepted(tmp_path: Path) -> None:
    cluster = load(tmp_path, "[kube_control_plane]\nnode1 ansible_host=95.54.0.12 ip=10.3.0.1 access_ip=10.3.0.1\n")
    assert cluster.control_plane.ip == "10.3.0.1"
