"""The add-ons' images, read from their rendered manifests wherever a manifest names one, and moved offline.

A release names more images than its controllers' containers: sidecars (KServe's kube-rbac-proxy), init containers
(Pipelines' alpine), and images its controllers start later, named as text: env values (Pipelines' driver and
launcher), args (Argo's --executor-image) and ConfigMaps (KServe's storage initializer, agent, router). One rule
finds them (playbooks/module_utils/cb_images.py): the addon role's module runs it on the control plane over the
fetched manifest and moves each image to offline.image_repository; the bundle build runs it over the manifests it
packs. The stand-in release below has one of each; upstream's manifests are never part of this repository
(tests/test_addon_conformance.py renders the real ones where they can be reached)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from provision.bundle.build import bundle_images
from provision.inputs.settings import parse_settings
from provision.render.addons import addon_plan
from provision.render.images import manifest_images
from provision.resources import module_utils
from tests.support import ansible_modules

cb_images = module_utils("cb_images")
REGISTRY = "registry.lan:5000"
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl (the module reads with it)")


def deployment(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "kserve"},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


# Where each kind of reference sits in the releases (KServe 0.21's kserve.yaml, Pipelines 2.17's
# platform-agnostic overlay, Argo's workflow-controller): image -> how it is named.
RELEASE = [
    deployment("kserve-controller-manager", {
        "containers": [
            {"name": "manager", "image": "kserve/kserve-controller:v0.21.0",
             "env": [{"name": "POD_NAMESPACE", "value": "kserve"}, {"name": "ENABLE_WEBHOOK", "value": "true"},
                     {"name": "METRICS_ADDR", "value": "http://127.0.0.1:8080/metrics"}],
             "args": ["--metrics-addr=127.0.0.1:8080", "--leader-elect"]},
            {"name": "kube-rbac-proxy", "image": "quay.io/brancz/kube-rbac-proxy:v0.18.0",
             "args": ["--upstream=http://127.0.0.1:8080/"]}]}),
    deployment("llmisvc-controller-manager", {
        "initContainers": [{"name": "log", "image": "docker.io/fluent/fluent-bit:3.2", "restartPolicy": "Always"}],
        "containers": [{"name": "manager", "image": "kserve/llmisvc-controller:v0.21.0"}]}),
    deployment("ml-pipeline", {
        "initContainers": [{"name": "wait", "image": "docker.io/alpine:3.23", "command": ["sh", "-c", "true"]}],
        "containers": [{"name": "api", "image": "ghcr.io/kubeflow/kfp-api-server:2.17.0",
                        "env": [{"name": "V2_DRIVER_IMAGE", "value": "ghcr.io/kubeflow/kfp-driver:2.17.0"},
                                {"name": "V2_LAUNCHER_IMAGE", "value": "ghcr.io/kubeflow/kfp-launcher:2.17.0"},
                                {"name": "DBCONFIG_HOST", "value": "mysql"}]}]}),
    deployment("workflow-controller", {
        "containers": [{"name": "controller", "image": "quay.io/argoproj/workflow-controller:v4.0.5",
                        "args": ["--configmap", "workflow-controller-configmap", "--executor-image",
                                 "quay.io/argoproj/argoexec:v4.0.5"]}]}),
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "inferenceservice-config", "namespace": "kserve"},
     "data": {"storageInitializer": json.dumps({"image": "kserve/storage-initializer:v0.21.0", "memoryLimit": "1Gi"}),
              "localModel": json.dumps({"enabled": False, "defaultJobImage": "kserve/storage-initializer:v0.21.0",
                                        "jobNamespace": "kserve-localmodel-jobs"}),
              "router": json.dumps({"image": "kserve/router:v0.21.0", "cpuLimit": "1"}),
              "ingress": json.dumps({"ingressGateway": "knative-serving/knative-ingress-gateway",
                                     "domainTemplate": "{{ .Name }}-{{ .Namespace }}.{{ .IngressDomain }}"})}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "workflow-controller-configmap"},
     "data": {"executor": "imagePullPolicy: IfNotPresent\nimage: quay.io/argoproj/argoexec:v4.0.5\n",
              "artifactRepository": "archiveLogs: true\ns3:\n  endpoint: minio-service.kubeflow:9000\n"}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "debug"},
     "spec": {"containers": [{"name": "c", "image": "busybox:1.37"}],
              "ephemeralContainers": [{"name": "e", "image": "docker.io/library/busybox:1.37"}]}},
    {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ClusterServingRuntime", "metadata": {"name": "kserve-sklearnserver"},
     "spec": {"containers": [{"name": "kserve-container", "image": "kserve/sklearnserver:v0.21.0"}]}},
]
IMAGES = ["kserve/kserve-controller:v0.21.0", "quay.io/brancz/kube-rbac-proxy:v0.18.0",
          "docker.io/fluent/fluent-bit:3.2", "kserve/llmisvc-controller:v0.21.0", "docker.io/alpine:3.23",
          "ghcr.io/kubeflow/kfp-api-server:2.17.0", "ghcr.io/kubeflow/kfp-driver:2.17.0",
          "ghcr.io/kubeflow/kfp-launcher:2.17.0", "quay.io/argoproj/workflow-controller:v4.0.5",
          "quay.io/argoproj/argoexec:v4.0.5", "kserve/storage-initializer:v0.21.0", "kserve/router:v0.21.0",
          "busybox:1.37", "docker.io/library/busybox:1.37", "kserve/sklearnserver:v0.21.0"]


def test_every_image_a_release_names_is_found_and_nothing_else() -> None:
    assert sorted(manifest_images(yaml.safe_dump_all(RELEASE))) == sorted(IMAGES)


def test_the_bundles_list_holds_every_image_its_manifests_name() -> None:
    settings = parse_settings({})
    listed = bundle_images(settings, gpu=False, control_plane=["registry.k8s.io/kube-apiserver:v1.36.4"],
                           manifests=[yaml.safe_dump_all(RELEASE)])
    assert [image for image in IMAGES if image not in listed] == []
    assert "registry.k8s.io/kube-apiserver:v1.36.4" in listed


def run_module(manifest: Path, tmp_path: Path, registry: str | None = REGISTRY) -> dict[str, Any]:
    arguments: dict[str, Any] = {"path": str(manifest)} | ({"registry": registry} if registry else {})
    return ansible_modules.run("cb_addon_images", arguments, tmp_path)


@needs_kubectl
def test_offline_every_image_of_the_release_moves_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    settings = parse_settings({"offline": {"source": "/srv/cb", "image_repository": REGISTRY}})
    part = addon_plan(settings, "kserve").parts[1]
    directory = tmp_path / "release"
    directory.mkdir()
    manifest = directory / part.file
    manifest.write_text(yaml.safe_dump_all(RELEASE))
    first = run_module(manifest, tmp_path, addon_plan(settings, "kserve").image_registry)
    assert first["changed"] and sorted(first["images"]) == sorted(IMAGES)
    assert first["moved"]["quay.io/brancz/kube-rbac-proxy:v0.18.0"] == f"{REGISTRY}/brancz/kube-rbac-proxy:v0.18.0"
    # What the role then applies: kustomize over the moved file. Every image it names is under the registry.
    (directory / "kustomization.yaml").write_text(part.kustomization)
    rendered = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=True)
    applied = manifest_images(rendered.stdout)
    assert sorted(applied) == sorted(cb_images.moved(image, REGISTRY) for image in IMAGES)
    assert [image for image in applied if not image.startswith(f"{REGISTRY}/")] == []
    config = next(d for d in yaml.safe_load_all(rendered.stdout) if d["metadata"]["name"] == "inferenceservice-config")
    assert json.loads(config["data"]["router"])["image"] == f"{REGISTRY}/kserve/router:v0.21.0"
    second = run_module(manifest, tmp_path)
    assert not second["changed"] and sorted(second["images"]) == sorted(applied)


@needs_kubectl
def test_online_the_images_are_listed_and_the_manifest_left_as_fetched(tmp_path: Path) -> None:
    manifest = tmp_path / "release.yaml"
    manifest.write_text(yaml.safe_dump_all(RELEASE))
    before = manifest.read_text()
    result = run_module(manifest, tmp_path, None)
    assert sorted(result["images"]) == sorted(IMAGES) and not result["changed"] and manifest.read_text() == before


REFERENCES = st.builds(
    lambda host, path, tag: f"{host}{'/'.join(path)}:{tag}",
    st.sampled_from(["", "docker.io/", "quay.io/", "ghcr.io/", "gcr.io/", "registry.k8s.io/", "localhost:5000/"]),
    st.lists(st.from_regex(r"[a-z0-9]{1,6}(?:[-_.][a-z0-9]{1,4})?", fullmatch=True), min_size=1, max_size=3),
    st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,12}", fullmatch=True))


@given(st.lists(REFERENCES, min_size=1, max_size=6, unique=True))
def test_moving_puts_every_image_under_the_registry_once(images: list[str]) -> None:
    text = "\n".join(f"- image: {image}\n  env: {{IMAGE: '{image}'}}" for image in images)
    once = cb_images.move_in_text(text, images, REGISTRY)
    assert cb_images.move_in_text(once, [cb_images.moved(i, REGISTRY) for i in images], REGISTRY) == once
    for image in images:
        assert once.count(cb_images.moved(image, REGISTRY)) >= 2
    assert all(line.split(": ", 1)[1].startswith(REGISTRY) for line in once.splitlines() if line.startswith("- image"))
