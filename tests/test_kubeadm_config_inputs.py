"""Pod and service networks that would break `kubeadm init` or the pod network are refused before any node is
touched, with the fix in the message."""
from __future__ import annotations

from pathlib import Path

import pytest

from provision.errors import InputError
from provision.inputs.validation import load_cluster

HOSTS = "[control_plane]\ncp1 ansible_host=192.168.1.10\n[workers]\nw1 ansible_host=192.168.1.11\n"


def _load(tmp_path: Path, settings: str, hosts: str = HOSTS) -> None:
    (tmp_path / "hosts.ini").write_text(hosts)
    (tmp_path / "cluster.yaml").write_text(settings)
    load_cluster(tmp_path / "hosts.ini", tmp_path / "cluster.yaml")


@pytest.mark.parametrize("settings,hosts,words", [
    # The seed tutorials' pod network against the usual 192.168.x node network.
    ("kubernetes:\n  pod_cidr: 192.168.0.0/16\n", HOSTS,
     ["pod_cidr 192.168.0.0/16 contains node 'cp1' (192.168.1.10)", "e.g. 10.244.0.0/16"]),
    # The address the nodes talk on (node_ip) counts, not only the one we SSH to.
    ("kubernetes:\n  pod_cidr: 172.16.0.0/16\n",
     "[control_plane]\ncp1 ansible_host=203.0.113.7 node_ip=172.16.4.2\n",
     ["pod_cidr 172.16.0.0/16 contains node 'cp1' (172.16.4.2)"]),
    ("", "[control_plane]\ncp1 ansible_host=203.0.113.7 node_ip=cp1.lan\n",
     ["host 'cp1': node_ip='cp1.lan' is not an IPv4 address"]),
    ("kubernetes:\n  pod_cidr: 10.244.0.0/25\n", HOSTS,
     ["pod_cidr 10.244.0.0/25 is smaller than the /24 each node takes", "10.244.0.0/16"]),
    ("kubernetes:\n  pod_cidr: 10.244.0.0/24\n", HOSTS,
     ["pod_cidr 10.244.0.0/24 has room for 1 nodes", "hosts.ini has 2"]),
], ids=["seed-192.168", "node-ip-in-pod-cidr", "node-ip-not-an-address", "pod-cidr-too-small",
        "pod-cidr-too-few-nodes"])
def test_refused_with_the_fix(tmp_path: Path, settings: str, hosts: str, words: list[str]) -> None:
    with pytest.raises(InputError) as raised:
        _load(tmp_path, settings, hosts)
    message = str(raised.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_good_networks_pass(tmp_path: Path) -> None:
    _load(tmp_path, "kubernetes:\n  version: '1.35'\n  kube_proxy_mode: nftables\n  pod_cidr: 10.244.0.0/23\n")
