"""The kubeadm configuration `kubeadm init --config` reads, rendered for every supported Kubernetes minor and
held against the fields kubeadm.k8s.io/v1beta4 defines: the only API kubeadm 1.36 and 1.37 read (v1beta3 is
gone), and one 1.35 reads too.

kubeadm cannot run here, so its API is encoded below as the known fields per kind and version (learnt from
the kubeadm configuration reference): a misspelt or misplaced field, a v1beta3 field, or a value of the wrong
shape (v1beta4's {name, value} argument lists against v1beta3's maps) fails the test.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.inputs import versions
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import parse_settings
from provision.render.kubeadm_config import init_config_documents, node_ip, render_init_config
from tests.support.node_reports import installed_release

# --- the kubeadm API, as field sets -----------------------------------------------------------------------
# A schema is one of: STR, INT, BOOL (scalars); MAP_STR / MAP_BOOL (free keys); [schema] (a list of it);
# {field: schema} (an object with exactly these possible fields).
STR, INT, BOOL, MAP_STR, MAP_BOOL = "str", "int", "bool", "map[str]str", "map[str]bool"
DURATION = STR

TAINT = {"key": STR, "value": STR, "effect": STR, "timeAdded": STR}
BOOTSTRAP_TOKEN = {"token": STR, "description": STR, "ttl": DURATION, "expires": STR, "usages": [STR],
                   "groups": [STR]}
API_ENDPOINT = {"advertiseAddress": STR, "bindPort": INT}
PATCHES = {"directory": STR}
HOST_PATH_MOUNT = {"name": STR, "hostPath": STR, "mountPath": STR, "readOnly": BOOL, "pathType": STR}
ARG = {"name": STR, "value": STR}
ENV_VAR = {"name": STR, "value": STR, "valueFrom": MAP_STR}


def _node_registration(v1beta4: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {"name": STR, "criSocket": STR, "taints": [TAINT], "ignorePreflightErrors": [STR],
                              "imagePullPolicy": STR, "kubeletExtraArgs": [ARG] if v1beta4 else MAP_STR}
    if v1beta4:
        fields["imagePullSerial"] = BOOL
    return fields


def _component(v1beta4: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {"extraArgs": [ARG] if v1beta4 else MAP_STR, "extraVolumes": [HOST_PATH_MOUNT]}
    if v1beta4:
        fields["extraEnvs"] = [ENV_VAR]
    return fields


def kubeadm_schema(v1beta4: bool) -> dict[str, dict[str, Any]]:
    timeouts = {"controlPlaneComponentHealthCheck": DURATION, "kubeletHealthCheck": DURATION,
                "kubernetesAPICall": DURATION, "etcdAPICall": DURATION, "tlsBootstrap": DURATION,
                "discovery": DURATION, "upgradeManifests": DURATION}
    init = {"apiVersion": STR, "kind": STR, "bootstrapTokens": [BOOTSTRAP_TOKEN],
            "nodeRegistration": _node_registration(v1beta4), "localAPIEndpoint": API_ENDPOINT,
            "certificateKey": STR, "skipPhases": [STR], "patches": PATCHES}
    local_etcd = {"imageRepository": STR, "imageTag": STR, "dataDir": STR,
                  "extraArgs": [ARG] if v1beta4 else MAP_STR, "serverCertSANs": [STR], "peerCertSANs": [STR]}
    api_server = _component(v1beta4) | {"certSANs": [STR]}
    dns = {"imageRepository": STR, "imageTag": STR}
    cluster = {"apiVersion": STR, "kind": STR,
               "etcd": {"local": local_etcd, "external": {"endpoints": [STR], "caFile": STR, "certFile": STR,
                                                          "keyFile": STR}},
               "networking": {"serviceSubnet": STR, "podSubnet": STR, "dnsDomain": STR},
               "kubernetesVersion": STR, "controlPlaneEndpoint": STR, "apiServer": api_server,
               "controllerManager": _component(v1beta4), "scheduler": _component(v1beta4), "dns": dns,
               "certificatesDir": STR, "imageRepository": STR, "featureGates": MAP_BOOL, "clusterName": STR}
    if v1beta4:
        init |= {"dryRun": BOOL, "timeouts": timeouts}
        local_etcd["extraEnvs"] = [ENV_VAR]
        dns["disabled"] = BOOL
        cluster |= {"proxy": {"disabled": BOOL}, "encryptionAlgorithm": STR, "certificateValidityPeriod": DURATION,
                    "caCertificateValidityPeriod": DURATION}
    else:
        api_server["timeoutForControlPlane"] = DURATION
    return {"InitConfiguration": init, "ClusterConfiguration": cluster}


# Component configs that kubeadm passes through: the fields we may set (a subset of each API).
KUBELET_V1BETA1 = {"apiVersion": STR, "kind": STR, "cgroupDriver": STR, "containerRuntimeEndpoint": STR,
                   "clusterDNS": [STR], "clusterDomain": STR, "resolvConf": STR, "failSwapOn": BOOL, "maxPods": INT,
                   "serverTLSBootstrap": BOOL, "rotateCertificates": BOOL, "failCgroupV1": BOOL}
KUBE_PROXY_V1ALPHA1 = {"apiVersion": STR, "kind": STR, "mode": STR, "clusterCIDR": STR, "bindAddress": STR,
                       "metricsBindAddress": STR}
COMPONENT_SCHEMAS = {("kubelet.config.k8s.io/v1beta1", "KubeletConfiguration"): KUBELET_V1BETA1,
                     ("kubeproxy.config.k8s.io/v1alpha1", "KubeProxyConfiguration"): KUBE_PROXY_V1ALPHA1}


def conform(value: Any, schema: Any, where: str) -> list[str]:
    """Every way `value` departs from `schema`, as 'path: problem'."""
    if schema in (STR, INT, BOOL):
        expected = {STR: str, INT: int, BOOL: bool}[schema]
        ok = isinstance(value, expected) and not (schema == INT and isinstance(value, bool))
        return [] if ok else [f"{where}: expected {schema}, got {type(value).__name__} {value!r}"]
    if schema in (MAP_STR, MAP_BOOL):
        inner = str if schema == MAP_STR else bool
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, inner) for k, v in value.items()):
            return [f"{where}: expected {schema}, got {value!r}"]
        return []
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {type(value).__name__} {value!r}"]
        return [p for i, item in enumerate(value) for p in conform(item, schema[0], f"{where}[{i}]")]
    if not isinstance(value, dict):
        return [f"{where}: expected an object, got {type(value).__name__} {value!r}"]
    problems = [f"{where}.{key}: not a field of this API version" for key in value if key not in schema]
    return problems + [p for key, item in value.items() if key in schema for p in conform(item, schema[key], f"{where}.{key}")]


# --- fixtures -----------------------------------------------------------------------------------------------

def inventory(tmp_path: Path, text: str | None = None) -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text(text or "[control_plane]\ncp1 ansible_host=10.20.0.10\n[workers]\n"
                            "w1 ansible_host=10.20.0.11\nw2 ansible_host=10.20.0.12\n")
    return path


def render(tmp_path: Path, settings: dict[str, Any] | None = None, hosts: str | None = None) -> list[dict[str, Any]]:
    cluster = load_inventory(inventory(tmp_path, hosts))
    parsed = parse_settings(settings or {})
    text = render_init_config(cluster, parsed, installed_release(parsed))
    documents = list(yaml.safe_load_all(text))
    assert documents == init_config_documents(cluster, parsed, installed_release(parsed))
    return documents


def by_kind(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in documents}


# Every supported minor, bare and pinned to the patch the versions table saw, and an untested newer one.
VERSIONS = [r.name for r in versions.KUBERNETES_RELEASES] + [r.latest_patch for r in versions.KUBERNETES_RELEASES]


@pytest.mark.parametrize("allow_cgroup_v1", [False, True], ids=["cgroup-v2", "cgroup-v1-allowed"])
@pytest.mark.parametrize("version", [*VERSIONS, "1.38"])
def test_every_rendered_field_exists_in_kubeadm_v1beta4(tmp_path: Path, version: str, allow_cgroup_v1: bool) -> None:
    documents = render(tmp_path, {"kubernetes": {"version": version, "allow_untested_versions": version == "1.38"},
                                  "kubelet": {"allow_cgroup_v1": allow_cgroup_v1}})
    api_version = "kubeadm.k8s.io/v1beta4"
    schema = kubeadm_schema(True)
    kinds = [d["kind"] for d in documents]
    assert kinds == ["InitConfiguration", "ClusterConfiguration", "KubeletConfiguration", "KubeProxyConfiguration"]
    problems = []
    for document in documents:
        kind = document["kind"]
        if kind in schema:
            assert document["apiVersion"] == api_version
            problems += conform(document, schema[kind], kind)
        else:
            problems += conform(document, COMPONENT_SCHEMAS[(document["apiVersion"], kind)], kind)
    assert problems == []


def test_the_schemas_catch_fields_of_the_other_version() -> None:
    # The check above would be worthless if both versions accepted the same shapes.
    v1beta3, v1beta4 = kubeadm_schema(False), kubeadm_schema(True)
    registration = {"name": "cp1", "kubeletExtraArgs": [{"name": "node-ip", "value": "10.0.0.1"}]}
    assert conform({"nodeRegistration": registration}, v1beta4["InitConfiguration"], "Init") == []
    assert conform({"nodeRegistration": registration}, v1beta3["InitConfiguration"], "Init") == [
        "Init.nodeRegistration.kubeletExtraArgs: expected map[str]str, got [{'name': 'node-ip', 'value': '10.0.0.1'}]"]
    assert conform({"timeouts": {}}, v1beta3["InitConfiguration"], "Init") == ["Init.timeouts: not a field of this API version"]
    assert conform({"apiServer": {"timeoutForControlPlane": "4m0s"}}, v1beta4["ClusterConfiguration"], "C") == [
        "C.apiServer.timeoutForControlPlane: not a field of this API version"]
    assert conform({"networking": {"podCIDR": "x"}}, v1beta4["ClusterConfiguration"], "C") == [
        "C.networking.podCIDR: not a field of this API version"]


def test_nothing_is_rendered_in_v1beta3(tmp_path: Path) -> None:
    text = "".join(render_init_config(load_inventory(inventory(tmp_path)), parse_settings({"kubernetes": {"version": v}}),
                                      installed_release(parse_settings({"kubernetes": {"version": v}}))) for v in VERSIONS)
    assert "v1beta3" not in text and "timeoutForControlPlane" not in text
    assert text.count("apiVersion: kubeadm.k8s.io/v1beta4") == 2 * len(VERSIONS)


def test_cgroup_v1_hosts_run_only_when_the_settings_allow_them(tmp_path: Path) -> None:
    # From 1.35 the kubelet refuses cgroup v1 (KEP-5573) and kubeadm's SystemVerification check refuses the
    # host: both must be turned off together, and only on request.
    default = by_kind(render(tmp_path))
    assert "failCgroupV1" not in default["KubeletConfiguration"]
    assert "ignorePreflightErrors" not in default["InitConfiguration"]["nodeRegistration"]
    allowed = by_kind(render(tmp_path, {"kubelet": {"allow_cgroup_v1": True}}))
    assert allowed["KubeletConfiguration"]["failCgroupV1"] is False
    assert allowed["InitConfiguration"]["nodeRegistration"]["ignorePreflightErrors"] == ["SystemVerification"]


@pytest.mark.parametrize("version", ["1.35", "1.36"])
def test_values_come_from_the_settings(tmp_path: Path, version: str) -> None:
    docs = by_kind(render(tmp_path, {"kubernetes": {"version": version, "pod_cidr": "10.32.0.0/16",
                                                    "service_cidr": "10.100.0.0/16", "dns_domain": "k8s.example",
                                                    "kube_proxy_mode": "ipvs"},
                                     "mirrors": {"image_repository": "harbor.example.com/k8s"}}))
    cluster = docs["ClusterConfiguration"]
    assert cluster["networking"] == {"podSubnet": "10.32.0.0/16", "serviceSubnet": "10.100.0.0/16",
                                     "dnsDomain": "k8s.example"}
    assert cluster["imageRepository"] == "harbor.example.com/k8s"
    assert cluster["controlPlaneEndpoint"] == "10.20.0.10:6443"
    assert {"cp1", "10.20.0.10"} <= set(cluster["apiServer"]["certSANs"])
    # A bare minor is resolved to the release installed on the control plane (prepare's report), never left to
    # kubeadm, whose default "stable-1" is a lookup on dl.k8s.io.
    assert cluster["kubernetesVersion"] == f"v{versions.kubernetes_release(int(version[2:])).latest_patch}"
    assert docs["KubeletConfiguration"]["cgroupDriver"] == "systemd"
    assert docs["KubeProxyConfiguration"]["mode"] == "ipvs"
    assert docs["KubeProxyConfiguration"]["clusterCIDR"] == "10.32.0.0/16"
    init = docs["InitConfiguration"]
    assert init["localAPIEndpoint"] == {"advertiseAddress": "10.20.0.10", "bindPort": 6443}
    registration = init["nodeRegistration"]
    assert registration["name"] == "cp1"
    assert registration["criSocket"] == "unix:///run/containerd/containerd.sock"
    assert registration["kubeletExtraArgs"] == [{"name": "node-ip", "value": "10.20.0.10"}]
    # Workers exist: the control plane keeps kubeadm's default taint.
    assert "taints" not in registration
    # The token kubeadm init makes anyway is short-lived and has no fixed value.
    assert init["bootstrapTokens"][0]["ttl"] == "15m0s" and "token" not in init["bootstrapTokens"][0]


def test_an_exact_release_is_pinned(tmp_path: Path) -> None:
    docs = by_kind(render(tmp_path, {"kubernetes": {"version": "1.36.4"}}))
    assert docs["ClusterConfiguration"]["kubernetesVersion"] == "v1.36.4"


@pytest.mark.parametrize("version", VERSIONS)
def test_kubeadm_is_always_given_the_exact_release_installed(tmp_path: Path, version: str) -> None:
    cluster = load_inventory(inventory(tmp_path))
    docs = by_kind(init_config_documents(cluster, parse_settings({"kubernetes": {"version": version}}), "1.36.7"))
    assert docs["ClusterConfiguration"]["kubernetesVersion"] == "v1.36.7"
    with pytest.raises(ValueError, match="exact release"):
        init_config_documents(cluster, parse_settings({"kubernetes": {"version": version}}), "1.36")


@pytest.mark.parametrize("settings,expected", [
    ({"mirrors": {"profile": "cn"}}, "registry.aliyuncs.com/google_containers"),
    ({"offline": {"source": "/srv/offline", "image_repository": "registry.local:5000"}}, "registry.local:5000"),
    ({}, "registry.k8s.io"),
])
def test_image_repository_follows_mirrors_and_offline(tmp_path: Path, settings: dict[str, Any], expected: str) -> None:
    assert by_kind(render(tmp_path, settings))["ClusterConfiguration"]["imageRepository"] == expected


def test_a_single_node_cluster_runs_workloads_on_its_control_plane(tmp_path: Path) -> None:
    docs = by_kind(render(tmp_path, hosts="[control_plane]\nsolo ansible_host=10.20.0.10\n"))
    assert docs["InitConfiguration"]["nodeRegistration"]["taints"] == []


def test_node_ip_host_variable_beats_ansible_host_and_a_host_name_leaves_it_to_kubeadm(tmp_path: Path) -> None:
    hosts = ("[control_plane]\ncp1 ansible_host=203.0.113.7 node_ip=192.168.56.10\n"
             "[workers]\nw1 ansible_host=w1.example.com\n")
    cluster = load_inventory(inventory(tmp_path, hosts))
    assert node_ip(cluster.node("cp1")) == "192.168.56.10"
    assert node_ip(cluster.node("w1")) is None
    docs = by_kind(init_config_documents(cluster, parse_settings({}), "1.36.4"))
    assert docs["InitConfiguration"]["localAPIEndpoint"]["advertiseAddress"] == "192.168.56.10"
    # The operator reaches the API server on the public address, the nodes on the private one: both certified.
    assert {"203.0.113.7", "192.168.56.10"} <= set(docs["ClusterConfiguration"]["apiServer"]["certSANs"])

    named = load_inventory(inventory(tmp_path, "[control_plane]\ncp1 ansible_host=cp1.example.com\n"))
    docs = by_kind(init_config_documents(named, parse_settings({}), "1.36.4"))
    assert "localAPIEndpoint" not in docs["InitConfiguration"]
    assert "kubeletExtraArgs" not in docs["InitConfiguration"]["nodeRegistration"]
    assert "controlPlaneEndpoint" not in docs["ClusterConfiguration"]
    assert "cp1.example.com" in docs["ClusterConfiguration"]["apiServer"]["certSANs"]


# --- several control planes ------------------------------------------------------------------------------------

HA_HOSTS = ("[kube_control_plane]\ncp1 ansible_host=203.0.113.1 ip=10.20.0.1\ncp2 ansible_host=203.0.113.2 ip=10.20.0.2\n"
            "cp3 ansible_host=203.0.113.3 ip=10.20.0.3\n[kube_node]\nw1 ansible_host=10.20.0.11\n")
HA_ENDPOINTS = {"vip": ({"control_plane": {"vip": "10.20.0.100"}}, "10.20.0.100:6443"),
                # Without a VIP kubeadm's endpoint is the first control plane (joins and TLS bootstrap go there);
                # the nodes' local proxies carry the rest.
                "proxy": ({}, "10.20.0.1:6443")}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("mode", sorted(HA_ENDPOINTS))
def test_the_ha_configuration_fits_that_releases_kubeadm_api_and_certifies_every_way_in(
        tmp_path: Path, version: str, mode: str) -> None:
    settings, endpoint = HA_ENDPOINTS[mode]
    documents = render(tmp_path, {**settings, "kubernetes": {"version": version}}, hosts=HA_HOSTS)
    schema = kubeadm_schema(True)
    problems = [p for d in documents if d["kind"] in schema for p in conform(d, schema[d["kind"]], d["kind"])]
    assert problems == []
    docs = by_kind(documents)
    cluster = docs["ClusterConfiguration"]
    assert cluster["controlPlaneEndpoint"] == endpoint
    sans = cluster["apiServer"]["certSANs"]
    # Every control plane by name, inventory address and cluster address, and the VIP: a client may reach any.
    expected = ["cp1", "203.0.113.1", "10.20.0.1", "cp2", "203.0.113.2", "10.20.0.2", "cp3", "203.0.113.3",
                "10.20.0.3"] + (["10.20.0.100"] if mode == "vip" else [])
    assert sans == expected
    # kubeadm init runs on the first control plane, advertising its cluster address.
    init = docs["InitConfiguration"]
    assert init["nodeRegistration"]["name"] == "cp1"
    assert init["localAPIEndpoint"] == {"advertiseAddress": "10.20.0.1", "bindPort": 6443}
    # The certificate key and tokens are never written into the file.
    assert "certificateKey" not in init and "token" not in init["bootstrapTokens"][0]


def test_a_control_plane_named_only_by_dns_still_gets_an_endpoint_for_the_proxy(tmp_path: Path) -> None:
    hosts = ("[control_plane]\ncp1 ansible_host=cp1.example.com\ncp2 ansible_host=cp2.example.com\n"
             "cp3 ansible_host=cp3.example.com\n")
    docs = by_kind(render(tmp_path, hosts=hosts))
    assert docs["ClusterConfiguration"]["controlPlaneEndpoint"] == "cp1.example.com:6443"
    assert "localAPIEndpoint" not in docs["InitConfiguration"]
