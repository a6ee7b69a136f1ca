"""The inventory's builder on its own, without Ansible: plain data in (inventory_model.InventoryData, written here
by hand as the reader would hand it over), a Cluster or one line out. The reader is the only module that meets
Ansible's objects; tests/test_bad_input_hosts.py and the others drive both through `load_inventory`.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.errors import InputError
from provision.inputs.files import VaultValue
from provision.inputs.inventory_builder import build_cluster
from provision.inputs.inventory_model import InventoryData

PATH = Path("/srv/inventories/hosts.ini")


def data(groups: dict[str, tuple[str, ...]], variables: dict[str, dict[str, Any]] | None = None,
         host_groups: dict[str, tuple[str, ...]] | None = None) -> InventoryData:
    hosts = tuple(dict.fromkeys(h for members in groups.values() for h in members))
    found = {host: {"ansible_host": f"10.0.0.{index}"} for index, host in enumerate(hosts, 1)}
    for host, extra in (variables or {}).items():
        found[host] = found[host] | extra
    return InventoryData(path=PATH, inventory_format="ini", groups={"all": hosts, **groups}, hosts=hosts,
                         host_groups=host_groups or {h: tuple(g for g, m in groups.items() if h in m) for h in hosts},
                         variables=found)


def test_control_planes_come_first_each_role_in_its_groups_order() -> None:
    cluster = build_cluster(data({"workers": ("w2", "w1"), "control_plane": ("cp1",)},
                                 {"w1": {"gpu": "true", "ansible_port": "2222", "k8s_nodename": "gpu-1"}}))
    assert [(n.name, n.host, n.role) for n in cluster.nodes] == [
        ("cp1", "cp1", "control_plane"), ("w2", "w2", "worker"), ("gpu-1", "w1", "worker")]
    worker = cluster.node("gpu-1")
    assert (worker.gpu, worker.port, worker.address) == ("true", 2222, "10.0.0.2")


def test_aliases_of_other_installers_name_the_roles() -> None:
    cluster = build_cluster(data({"kube_control_plane": ("m1",), "kube_node": ("n1",)}))
    assert [n.role for n in cluster.nodes] == ["control_plane", "worker"]


@pytest.mark.parametrize(("groups", "variables", "says"), [
    ({"workers": ("w1",)}, {}, "no control plane"),
    ({"control_plane": ("a", "b", "c", "d")}, {}, "etcd wants an odd number"),
    ({"control_plane": ("a",), "workers": ("a",)}, {}, "is in both [control_plane] and [workers]"),
    ({"control_plane": ("a",), "k8s_cluster": ("b",)}, {}, "only [k8s_cluster], which gathers them"),
    ({"control_plane": ("a",), "etcd": ("a", "e")}, {}, "external etcd is not supported"),
    ({"control_plane": ("a",), "masters": ("b",)}, {}, "both list control planes, differently"),
    ({"control_plane": ("a",)}, {"a": {"ansible_host": "10.0.0.300"}}, "ansible_host='10.0.0.300'"),
    ({"control_plane": ("a",)}, {"a": {"ansible_connection": "local"}}, "ansible_connection='local'"),
    ({"control_plane": ("a",)}, {"a": {"ansible_port": "22.5"}}, "ansible_port"),
    ({"control_plane": ("a",)}, {"a": {"ansible_become_password": VaultValue()}}, "vault-encrypted"),
    ({"control_plane": ("a",)}, {"a": {"nested": {"deeper": [VaultValue()]}}}, "nested.deeper[0] is vault-encrypted"),
    ({"control_plane": ("A",)}, {}, "not a valid Kubernetes node name"),
    ({"control_plane": ("a", "b", "c")}, {"b": {"ansible_host": "10.0.0.1"}}, "share the address 10.0.0.1:22"),
    ({"control_plane": ("a",), "workers": ("b",)}, {"b": {"gpu": "maybe"}}, "gpu='maybe' is not valid"),
], ids=["no-control-plane", "even", "both-roles", "gathered-only", "external-etcd", "two-alias-groups",
        "bad-address", "local-connection", "fraction-port", "vault", "nested-vault", "upper-case", "shared-address",
        "gpu-word"])
def test_bad_plain_data_is_one_line_naming_the_file_and_host(groups: dict[str, tuple[str, ...]],
                                                            variables: dict[str, dict[str, Any]], says: str) -> None:
    with pytest.raises(InputError) as refused:
        build_cluster(data(groups, variables))
    line = str(refused.value)
    assert says in line and str(PATH) in line and "\n" not in line, line


def test_two_control_planes_and_the_readers_warnings_are_said() -> None:
    built = build_cluster(InventoryData(path=PATH, inventory_format="yaml", groups={"control_plane": ("a", "b")},
                                        hosts=("a", "b"), host_groups={"a": ("control_plane",), "b": ("control_plane",)},
                                        variables={"a": {"ansible_host": "10.0.0.1"}, "b": {"ansible_host": "10.0.0.2"}},
                                        warnings=("group_vars/x.yml: not read",)))
    assert any("tolerate no failure" in w for w in built.warnings) and built.warnings[-1] == "group_vars/x.yml: not read"
    assert built.inventory_format == "yaml"


def test_the_builder_does_not_import_ansible() -> None:
    code = ("import sys\nfrom pathlib import Path\nfrom provision.inputs.inventory_builder import build_cluster\n"
            "from provision.inputs.inventory_model import InventoryData\n"
            "c = build_cluster(InventoryData(Path('h.ini'), 'ini', {'control_plane': ('a',)}, ('a',), "
            "{'a': ('control_plane',)}, {'a': {'ansible_host': '10.0.0.1'}}))\n"
            "print(c.control_plane.name, any(m == 'ansible' or m.startswith('ansible.') for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parent.parent)
    assert done.stdout.split() == ["a", "False"]
