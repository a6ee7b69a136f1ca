"""What the control-plane endpoint puts on the nodes, rendered in Python and checked here: kube-vip's static pod
(ARP, the VIP, the interface, super-admin.conf only while the first control plane initialises), the local API
proxy (HAProxy's configuration with every control plane a health-checked server, and its static pod), and
kube-proxy's kubeconfig through the proxy. The pods are validated strictly against the Kubernetes API."""
from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from provision.inputs import versions
from provision.inputs.inventory import Cluster, load_inventory
from provision.inputs.settings import Settings, parse_settings
from provision.render.endpoint import api_endpoint, endpoint_mode
from provision.render.manifests import api_proxy, kube_proxy_kubeconfig, kube_vip_manifest

KUBERNETES_VERSIONS = [f"{release.name}.0" for release in versions.KUBERNETES_RELEASES]
HOSTS = ("[control_plane]\ncp1 ansible_host=203.0.113.1 node_ip=10.20.0.1\ncp2 ansible_host=10.20.0.2\n"
         "cp3 ansible_host=cp3.example.com\n[workers]\nw1 ansible_host=10.20.0.11\n")
VIP = parse_settings({"control_plane": {"vip": "10.20.0.100"}})
OFFLINE = {"offline": {"source": "/srv/offline", "image_repository": "registry.local:5000"}}


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    path = tmp_path / "hosts.ini"
    path.write_text(HOSTS)
    return load_inventory(path)


def pods(cluster: Cluster) -> dict[str, dict]:
    return {"kube-vip": yaml.safe_load(kube_vip_manifest(VIP, interface="eth1")),
            "kube-vip-during-init": yaml.safe_load(kube_vip_manifest(VIP, interface="eth1", during_init=True)),
            "api-proxy": yaml.safe_load(api_proxy(cluster, Settings()).manifest)}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_static_pods_validate_strictly(cluster: Cluster, version: str) -> None:
    errors = []
    for name, pod in pods(cluster).items():
        try:
            kubernetes_validate.validate(pod, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{name} ({version}): {exc.message} at {list(exc.path)}")
    assert errors == []


def _env(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}


def test_kube_vip_announces_the_vip_by_arp_on_the_interface_with_leader_election(cluster: Cluster) -> None:
    pod = pods(cluster)["kube-vip"]
    env = _env(pod)
    assert env["address"] == "10.20.0.100" and env["vip_interface"] == "eth1"
    assert env["vip_arp"] == "true" and env["cp_enable"] == "true" and env["vip_leaderelection"] == "true"
    assert env["port"] == "6443" and env["vip_leasename"] == "plndr-cp-lock"
    assert "svc_enable" not in env  # Services of type LoadBalancer are not its job here
    assert pod["spec"]["hostNetwork"] is True
    assert pod["spec"]["containers"][0]["image"] == versions.KUBE_VIP_IMAGE == "ghcr.io/kube-vip/kube-vip:v1.2.4"
    assert pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] == ["NET_ADMIN", "NET_RAW"]
    # It talks to its own control plane's API server, as the admin.
    assert pod["spec"]["hostAliases"] == [{"hostnames": ["kubernetes"], "ip": "127.0.0.1"}]
    assert pod["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/admin.conf"


@pytest.mark.parametrize("version", [f"1.{r.minor}" for r in versions.KUBERNETES_RELEASES])
@pytest.mark.parametrize("during_init,kubeconfig", [(True, "/etc/kubernetes/super-admin.conf"),
                                                    (False, "/etc/kubernetes/admin.conf")])
def test_while_kubeadm_init_runs_kube_vip_uses_super_admin_conf(version: str, during_init: bool,
                                                                 kubeconfig: str) -> None:
    settings = parse_settings({"control_plane": {"vip": "10.20.0.100"}, "kubernetes": {"version": version}})
    pod = yaml.safe_load(kube_vip_manifest(settings, interface="eth0", during_init=during_init))
    (volume,) = pod["spec"]["volumes"]
    assert volume["hostPath"]["path"] == kubeconfig
    # Mounted where kube-vip reads its kubeconfig, whichever file it is.
    assert pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == "/etc/kubernetes/admin.conf"


def test_images_follow_the_settings_and_the_offline_registry(cluster: Cluster) -> None:
    offline = parse_settings({**OFFLINE, "control_plane": {"vip": "10.20.0.100"}})
    assert yaml.safe_load(kube_vip_manifest(offline, interface="eth0"))["spec"]["containers"][0]["image"] == \
        "registry.local:5000/kube-vip/kube-vip:v1.2.4"
    proxy = yaml.safe_load(api_proxy(cluster, parse_settings(OFFLINE)).manifest)
    assert proxy["spec"]["containers"][0]["image"] == "registry.local:5000/library/haproxy:3.2.19-alpine"
    pinned = parse_settings({"control_plane": {"proxy_image": "harbor.example.com/haproxy:3.2.24"}})
    assert yaml.safe_load(api_proxy(cluster, pinned).manifest)["spec"]["containers"][0]["image"] == \
        "harbor.example.com/haproxy:3.2.24"


def haproxy_sections(config: str) -> dict[str, list[str]]:
    """HAProxy's configuration as section header -> its directives (comments and blank lines dropped)."""
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for raw in config.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line.startswith((" ", "\t")):
            current = sections.setdefault(line.strip(), [])
        else:
            current.append(" ".join(line.split()))
    return sections


def test_the_local_proxy_listens_on_loopback_in_front_of_every_api_server(cluster: Cluster) -> None:
    proxy = api_proxy(cluster, Settings())
    sections = haproxy_sections(proxy.config)
    assert set(sections) == {"global", "defaults", "frontend api", "backend api_servers"}
    assert "mode tcp" in sections["defaults"]
    assert sections["frontend api"] == ["bind 127.0.0.1:6444", "default_backend api_servers"]
    backend = sections["backend api_servers"]
    # Each control plane at the address the nodes reach it on: node_ip, else an IP ansible_host, else its name.
    assert [d for d in backend if d.startswith("server ")] == [
        "server cp1 10.20.0.1:6443", "server cp2 10.20.0.2:6443", "server cp3 cp3.example.com:6443"]
    # A server that stops answering /readyz leaves the rotation; TLS is checked by the clients, not the proxy.
    assert "option httpchk GET /readyz" in backend
    assert "default-server inter 5s fall 3 rise 2 check check-ssl verify none" in backend


def test_the_proxy_pod_restarts_when_its_configuration_changes(cluster: Cluster, tmp_path: Path) -> None:
    def config_hash(proxy_cluster: Cluster) -> str:
        pod = yaml.safe_load(api_proxy(proxy_cluster, Settings()).manifest)
        return str(pod["metadata"]["annotations"]["cluster-bootstrap/config-hash"])

    smaller = tmp_path / "two.ini"
    smaller.write_text("[control_plane]\ncp1 ansible_host=10.20.0.1\ncp2 ansible_host=10.20.0.2\n")
    first = config_hash(cluster)
    assert re.fullmatch(r"[0-9a-f]{16}", first)
    assert first == config_hash(cluster) != config_hash(load_inventory(smaller))
    pod = yaml.safe_load(api_proxy(cluster, Settings()).manifest)
    assert pod["spec"]["volumes"][0]["hostPath"] == {"path": "/etc/kubernetes/cb-api-proxy", "type": "Directory"}
    assert pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == "/usr/local/etc/haproxy"


def test_kube_proxy_reaches_the_api_through_the_local_proxy_verified_as_kubernetes(cluster: Cluster) -> None:
    endpoint = api_endpoint(cluster, Settings())
    assert endpoint_mode(cluster, Settings()) == "proxy"
    config = yaml.safe_load(kube_proxy_kubeconfig(endpoint))
    (entry,) = config["clusters"]
    assert entry["cluster"]["server"] == "https://127.0.0.1:6444"
    # 127.0.0.1 is in no API server certificate; "kubernetes" is in every one kubeadm makes.
    assert entry["cluster"]["tls-server-name"] == "kubernetes"
    assert entry["cluster"]["certificate-authority"] == "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    assert config["users"] == [{"name": "default", "user": {
        "tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}}]


@pytest.mark.parametrize("hosts,settings,mode,operator,nodes", [
    ("[control_plane]\ncp1 ansible_host=10.0.0.1\n", {}, "none", "https://10.0.0.1:6443", "https://10.0.0.1:6443"),
    (HOSTS, {}, "proxy", "https://203.0.113.1:6443", "https://127.0.0.1:6444"),
    (HOSTS, {"control_plane": {"vip": "10.20.0.100"}}, "vip", "https://10.20.0.100:6443", "https://10.20.0.100:6443"),
    ("[control_plane]\ncp1 ansible_host=10.0.0.1\n", {"control_plane": {"endpoint": "proxy"}}, "proxy",
     "https://10.0.0.1:6443", "https://127.0.0.1:6444"),
    ("[control_plane]\ncp1 ansible_host=10.0.0.1\n", {"control_plane": {"vip": "10.0.0.100"}}, "vip",
     "https://10.0.0.100:6443", "https://10.0.0.100:6443"),
])
def test_the_endpoint_auto_chooses(tmp_path: Path, hosts: str, settings: dict, mode: str, operator: str,
                                   nodes: str) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text(hosts)
    endpoint = api_endpoint(load_inventory(path), parse_settings(settings))
    assert (endpoint.mode, endpoint.operator_url, endpoint.node_url) == (mode, operator, nodes)


def test_every_template_under_endpoint_is_covered() -> None:
    from provision.resources import MANIFESTS_DIR

    assert {p.name for p in (MANIFESTS_DIR / "endpoint").iterdir()} == {
        "kube-vip.yaml.j2", "api-proxy.yaml.j2", "haproxy.cfg.j2", "kube-proxy-kubeconfig.yaml.j2"}
