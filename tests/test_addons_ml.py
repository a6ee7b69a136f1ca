"""The ML platform's add-ons: cert-manager and KServe (Standard mode, no Knative or Istio), Kubeflow Pipelines
standalone, Node and GPU Feature Discovery, the DCGM exporter. What each brings is planned from the release table
and the settings; our own objects are validated with kubernetes-validate (strict, every supported minor); an
add-on whose Kubernetes range misses the cluster's minor is refused when the settings are read; a DaemonSet that
is not ready on its nodes is explained by its pods."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from provision.inputs import versions
from provision.inputs.addons import ADDON_ORDER, ADDONS
from provision.inputs.settings import Settings, parse_settings
from provision.kube.addons import wait_for_addon
from provision.kube.client import load_api_client
from provision.render.addons import ClusterFacts, PartPlan, addon_plan, part_source
from tests.support.apiserver import FakeApiServer, object_list
from tests.support.kube_objects import daemon_set, pod
from tests.support.refusal import assert_refused, run_main
from tests.support.server_side_apply import LiveObject

KUBERNETES_VERSIONS = [f"{release.name}.0" for release in versions.KUBERNETES_RELEASES]


def own_objects(settings: Settings, name: str, facts: ClusterFacts | None = None) -> list[dict[str, Any]]:
    plan = addon_plan(settings, name, facts)  # type: ignore[arg-type]
    return [obj for part in plan.parts if part.fetch == "local" for obj in yaml.safe_load_all(part.content)]


def patches(settings: Settings, name: str) -> list[dict[str, Any]]:
    plan = addon_plan(settings, name)  # type: ignore[arg-type]
    return [yaml.safe_load(p["patch"]) for part in plan.parts
            for p in yaml.safe_load(part.kustomization).get("patches", [])]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_our_objects_for_the_ml_addons_validate_strictly(version: str) -> None:
    settings = Settings()
    found = [obj for name in ("kserve", "dcgm_exporter") for obj in own_objects(settings, name)]
    assert {o["kind"] for o in found} == {"Namespace", "ConfigMap"}
    for obj in found:
        kubernetes_validate.validate(obj, version, strict=True)


def test_kserve_gets_its_namespace_first_then_the_release_then_standard_mode() -> None:
    plan = addon_plan(Settings(), "kserve")
    assert [(p.name, p.fetch, p.wait_after) for p in plan.parts] == [
        ("namespace", "local", False), ("release", "url", True), ("runtimes", "url", True),
        ("cluster-bootstrap", "local", False)]
    assert plan.parts[1].source == "https://github.com/kserve/kserve/releases/download/v0.21.0/kserve.yaml"
    config = own_objects(Settings(), "kserve")[-1]
    assert (config["metadata"]["name"], config["metadata"]["namespace"]) == ("inferenceservice-config", "kserve")
    assert json.loads(config["data"]["deploy"]) == {"defaultDeploymentMode": "Standard"}
    # Only that key: the release keeps the rest of its configuration (applied server-side, under its own manager).
    assert list(config["data"]) == ["deploy"]
    assert plan.parts[-1].field_manager != plan.parts[1].field_manager


# The keys of KServe's inferenceservice-config as the release ships them (config/configmap/inferenceservice.yaml,
# read at kserve master of 2026-08-21; v0.20.0 has the same keys); values stand in for upstream's JSON.
KSERVE_RELEASE_KEYS = ("explainers", "storageInitializer", "credentials", "ingress", "logger", "batcher", "agent",
                       "router", "deploy", "metricsAggregator", "localModel", "security", "inferenceService",
                       "opentelemetryCollector", "autoscaler")


def kserve_release_config() -> dict[str, Any]:
    data = {key: json.dumps({"from": "the release", "key": key}) for key in KSERVE_RELEASE_KEYS}
    data["deploy"] = json.dumps({"defaultDeploymentMode": "Serverless"})
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "inferenceservice-config", "namespace": "kserve"}, "data": data}


def kustomized(part: PartPlan, documents: list[dict[str, Any]], directory: Path) -> list[dict[str, Any]]:
    """What `kubectl kustomize` makes of a part (the role applies exactly that): the release file stood in for."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / part.file).write_text(part.content if part.fetch == "local" else yaml.safe_dump_all(documents))
    (directory / "kustomization.yaml").write_text(part.kustomization)
    rendered = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=True)
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]


def test_the_ssa_replay_prunes_what_one_manager_stops_sending() -> None:
    # What 3fe2742 did: the release and our one key under the same manager, the release's keys pruned.
    live = LiveObject()
    live.apply(kserve_release_config(), "cluster-bootstrap")
    ours = own_objects(Settings(), "kserve")[-1]
    live.apply(ours, "cluster-bootstrap")
    assert list(live.content["data"]) == ["deploy"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl (its built-in kustomize)")
def test_kserves_configuration_keeps_the_releases_keys_and_our_deploy_mode(tmp_path: Path) -> None:
    plan = addon_plan(Settings(), "kserve")
    objects: dict[tuple[str, str, str], LiveObject] = {}
    states = []
    for run in range(2):  # `up`, then `up` again
        for part in plan.parts:
            release = [kserve_release_config()] if part.name == "release" else []
            for doc in kustomized(part, release, tmp_path / str(run) / part.name):
                key = (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
                objects.setdefault(key, LiveObject()).apply(doc, part.field_manager)
        states.append(json.dumps({str(k): v.content for k, v in objects.items()}, sort_keys=True))
    data = objects[("ConfigMap", "kserve", "inferenceservice-config")].content["data"]
    assert set(data) == set(KSERVE_RELEASE_KEYS)
    assert json.loads(data["deploy"]) == {"defaultDeploymentMode": "Standard"}
    assert json.loads(data["storageInitializer"]) == {"from": "the release", "key": "storageInitializer"}
    # A second run leaves the object as the first did (no field passes between managers).
    assert states[0] == states[1]


def test_release_files_move_to_the_mirror_and_the_offline_source() -> None:
    assert part_source(Settings(), "cert_manager", "release") == (
        "url", "https://github.com/cert-manager/cert-manager/releases/download/v1.21.2/cert-manager.yaml")
    offline = parse_settings({"offline": {"source": "/srv/cb", "image_repository": "registry.lan:5000"}})
    assert part_source(offline, "kserve", "runtimes") == ("url", "file:///srv/cb/addons/kserve/v0.21.0/runtimes.yaml")
    # The images are moved on the control plane, from the fetched manifest (tests/test_addon_images.py).
    assert addon_plan(offline, "dcgm_exporter").image_registry == "registry.lan:5000"


def test_the_gpu_agents_run_on_gpu_nodes_and_gfd_follows_the_mig_strategy() -> None:
    mig = parse_settings({"gpu": {"mig": {"strategy": "mixed", "profile": "1g.10gb"}}})
    (dcgm,) = patches(mig, "dcgm_exporter")
    (gfd,) = patches(mig, "gpu_feature_discovery")
    for patch in (dcgm, gfd):
        spec = patch["spec"]["template"]["spec"]
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert gfd["spec"]["template"]["spec"]["containers"] == [
        {"name": "gpu-feature-discovery", "env": [{"name": "MIG_STRATEGY", "value": "mixed"}]}]
    kustomization = yaml.safe_load(addon_plan(mig, "gpu_feature_discovery").parts[0].kustomization)
    assert kustomization["namespace"] == "node-feature-discovery"


def test_dcgm_gets_a_service_monitor_only_where_the_prometheus_operator_is() -> None:
    assert [o["kind"] for o in own_objects(Settings(), "dcgm_exporter")] == ["Namespace"]
    monitor = own_objects(Settings(), "dcgm_exporter", ClusterFacts(service_monitors=True))[-1]
    assert monitor["kind"] == "ServiceMonitor" and monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "dcgm-exporter"}}
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "interval": "15s", "path": "/metrics"}]


def test_enabling_an_addon_enables_what_it_needs_in_install_order() -> None:
    assert parse_settings({"addons": {"enabled": ["gpu_feature_discovery", "kserve"]}}).addons.enabled == (
        "cert_manager", "kserve", "node_feature_discovery", "gpu_feature_discovery")
    for name in ADDON_ORDER:
        assert ADDONS[name].kubernetes_source, name


@pytest.mark.parametrize(("settings", "words"), [
    ("kubernetes:\n  version: '1.37'\naddons:\n  enabled: [kserve]\n",
     ["cert_manager v1.21.2 supports Kubernetes 1.33-1.36, not 1.37 (needed by kserve)", "leave kserve out"]),
    ("kubernetes:\n  version: '1.37'\naddons:\n  enabled: [cert_manager]\n", ["leave cert_manager out"]),
    ("addons:\n  dcgm_exporter_version: v4.5.3\n", ["not a release tag of NVIDIA DCGM exporter", "4.5.3-4.8.2"]),
    ("addons:\n  pipelines_version: v2.17.0\n", ["write it as 2.17.0"]),
])
def test_an_addon_outside_the_clusters_kubernetes_range_is_refused_before_anything_runs(
        tmp_path: Path, settings: str, words: list[str]) -> None:
    inventory, config = tmp_path / "hosts.ini", tmp_path / "cluster.yaml"
    inventory.write_text("[control_plane]\ncp1 ansible_host=10.0.0.1\n")
    config.write_text(settings)
    assert_refused(run_main("up", "-i", str(inventory), "-c", str(config)), f"{config}: ", *words)


def test_a_gpu_agent_not_ready_on_a_node_is_explained_by_its_pod(tmp_path: Path) -> None:
    image = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"
    with FakeApiServer() as api:
        api.add("GET", "/apis/apps/v1/namespaces/gpu-monitoring/daemonsets/dcgm-exporter",
                daemon_set("dcgm-exporter", "gpu-monitoring", image, ready=1, scheduled=2))
        api.add("GET", "/api/v1/namespaces/gpu-monitoring/pods", object_list("PodList", [
            pod("dcgm-exporter-x7k2p", "w2", {"app": "dcgm-exporter"}, namespace="gpu-monitoring", phase="Running",
                image=image, waiting="CrashLoopBackOff", restarts=5)]))
        status = wait_for_addon(load_api_client(api.write_kubeconfig(tmp_path / "kubeconfig")), "dcgm_exporter",
                                Settings(), timeout_s=0, sleep=lambda _: None)
    (problem,) = status.problems
    assert problem.describe().startswith("gpu-monitoring/dcgm-exporter: not ready on every node (1/2): w2: "
                                         "dcgm-exporter CrashLoopBackOff (pod dcgm-exporter-x7k2p")
    assert problem.settled
    assert status.daemonsets == {"dcgm-exporter": "1/2"} and ADDONS["dcgm_exporter"].daemonsets
