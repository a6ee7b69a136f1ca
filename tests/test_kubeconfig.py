"""The admin kubeconfig on the operator's machine: installed with mode 0600 and the server address this
machine reaches, merged into ~/.kube/config under a named context without disturbing other contexts, and
removed again by `down`."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from provision.errors import BootstrapError
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import Settings, parse_settings
from provision.kube.client import load_api_client
from provision.kube.kubeconfig import (
    admin_kubeconfig_path,
    fetched_kubeconfig_path,
    install_admin_kubeconfig,
    merge_kubeconfig,
    unmerge_kubeconfig,
)

# What kubeadm writes to /etc/kubernetes/admin.conf (certificate data shortened).
ADMIN_CONF = {
    "apiVersion": "v1", "kind": "Config", "preferences": {},
    "clusters": [{"name": "kubernetes", "cluster": {"certificate-authority-data": "Q0EtREFUQQ==",
                                                    "server": "https://192.168.56.10:6443"}}],
    "users": [{"name": "kubernetes-admin", "user": {"client-certificate-data": "Q0VSVA==", "client-key-data": "S0VZ"}}],
    "contexts": [{"name": "kubernetes-admin@kubernetes", "context": {"cluster": "kubernetes", "user": "kubernetes-admin"}}],
    "current-context": "kubernetes-admin@kubernetes",
}


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=203.0.113.7 node_ip=192.168.56.10\n")
    return load_inventory(hosts)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_installed_kubeconfig_is_private_and_points_at_the_inventory_address(cluster) -> None:
    fetched = fetched_kubeconfig_path(cluster)
    fetched.write_text(yaml.safe_dump(ADMIN_CONF))
    fetched.chmod(0o644)
    installed = install_admin_kubeconfig(fetched, cluster, Settings())
    assert installed == admin_kubeconfig_path(cluster)
    assert mode(installed) == 0o600 and mode(fetched) == 0o600 and mode(installed.parent) == 0o700
    data = yaml.safe_load(installed.read_text())
    assert data["clusters"][0]["cluster"]["server"] == "https://203.0.113.7:6443"
    assert data["users"] == ADMIN_CONF["users"]
    # The kubernetes library reads it as it is.
    assert load_api_client(installed).configuration.host == "https://203.0.113.7:6443"


def test_a_fetched_file_that_is_not_a_kubeconfig_is_refused(cluster) -> None:
    fetched = fetched_kubeconfig_path(cluster)
    fetched.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    with pytest.raises(BootstrapError, match="has no cluster or user"):
        install_admin_kubeconfig(fetched, cluster, Settings())


def test_merge_adds_a_named_context_and_keeps_the_others(cluster, tmp_path: Path) -> None:
    fetched = fetched_kubeconfig_path(cluster)
    fetched.write_text(yaml.safe_dump(ADMIN_CONF))
    installed = install_admin_kubeconfig(fetched, cluster, Settings())
    target = tmp_path / "home" / ".kube" / "config"
    target.parent.mkdir(parents=True)
    existing = {"apiVersion": "v1", "kind": "Config", "current-context": "prod",
                "clusters": [{"name": "prod", "cluster": {"server": "https://prod:6443"}}],
                "users": [{"name": "prod", "user": {"token": "t"}}],
                "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "prod"}}]}
    target.write_text(yaml.safe_dump(existing))

    merge_kubeconfig(installed, "lab", target)
    merge_kubeconfig(installed, "lab", target)  # again: replaced, not duplicated

    merged = yaml.safe_load(target.read_text())
    assert mode(target) == 0o600
    assert [c["name"] for c in merged["contexts"]] == ["prod", "lab"]
    assert [c["name"] for c in merged["clusters"]] == ["prod", "lab"]
    assert merged["contexts"][1]["context"] == {"cluster": "lab", "user": "lab"}
    assert merged["clusters"][1]["cluster"]["server"] == "https://203.0.113.7:6443"
    assert merged["users"][1]["user"] == ADMIN_CONF["users"][0]["user"]
    assert merged["current-context"] == "lab"
    assert load_api_client(target, context="lab").configuration.host == "https://203.0.113.7:6443"

    assert unmerge_kubeconfig("lab", target) is True
    left = yaml.safe_load(target.read_text())
    assert [c["name"] for c in left["contexts"]] == ["prod"] and left["current-context"] == ""
    assert left["clusters"] == existing["clusters"] and left["users"] == existing["users"]
    assert unmerge_kubeconfig("lab", target) is False


def test_merge_creates_a_missing_kubeconfig(cluster, tmp_path: Path) -> None:
    fetched = fetched_kubeconfig_path(cluster)
    fetched.write_text(yaml.safe_dump(ADMIN_CONF))
    target = tmp_path / "fresh" / "config"
    merge_kubeconfig(install_admin_kubeconfig(fetched, cluster, Settings()), "bootstrap-cp1", target)
    assert mode(target) == 0o600
    assert yaml.safe_load(target.read_text())["current-context"] == "bootstrap-cp1"


def test_a_broken_target_kubeconfig_is_not_overwritten(cluster, tmp_path: Path) -> None:
    fetched = fetched_kubeconfig_path(cluster)
    fetched.write_text(yaml.safe_dump(ADMIN_CONF))
    target = tmp_path / "config"
    target.write_text("clusters: [unclosed\n")
    with pytest.raises(BootstrapError, match="not valid YAML"):
        merge_kubeconfig(install_admin_kubeconfig(fetched, cluster, Settings()), "lab", target)
    assert target.read_text() == "clusters: [unclosed\n"


def test_with_a_vip_the_kubeconfig_points_at_the_vip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.0.0.1\ncp2 ansible_host=10.0.0.2\ncp3 ansible_host=10.0.0.3\n")
    cluster = load_inventory(hosts)
    fetched = fetched_kubeconfig_path(cluster)
    fetched.write_text(yaml.safe_dump(ADMIN_CONF))
    installed = install_admin_kubeconfig(fetched, cluster, parse_settings({"control_plane": {"vip": "10.0.0.100"}}))
    assert yaml.safe_load(installed.read_text())["clusters"][0]["cluster"]["server"] == "https://10.0.0.100:6443"
    # Without one (a local proxy on every node), this machine goes to the first control plane.
    installed = install_admin_kubeconfig(fetched, cluster, Settings())
    assert yaml.safe_load(installed.read_text())["clusters"][0]["cluster"]["server"] == "https://10.0.0.1:6443"
