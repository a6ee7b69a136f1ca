"""Every manifest the cluster phases apply, rendered from the settings and validated with kubernetes-validate in
strict mode (an unknown or misspelt field fails) for Kubernetes 1.30 to 1.34."""
from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes import client

from provision.inputs.settings import Settings, parse_settings
from provision.kube.verify import Expectations, dns_probe_pod
from provision.render.manifests import (
    CALICO_IMAGES,
    calico_source,
    device_plugin_manifest,
    image_ref,
    runtimeclass_manifest,
)
from provision.resources import MANIFESTS_DIR

KUBERNETES_VERSIONS = ["1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0"]
SETTINGS = {
    "defaults": {},
    "runtimeclass": {"gpu": {"runtime": "runtimeclass"}},
    "offline": {"offline": {"source": "/srv/offline", "image_repository": "registry.local:5000"},
                "kubernetes": {"pod_cidr": "172.20.0.0/16"}},
}


def manifests(settings: Settings) -> dict[str, list[dict[str, Any]]]:
    """Name -> the Kubernetes objects in it, for every object manifest we apply (the kustomization aside)."""
    calico = calico_source(settings)
    pod = client.ApiClient().sanitize_for_serialization(dns_probe_pod(
        Expectations(nodes=("n1",), dns_probe_image=image_ref(settings, settings.verify.dns_probe_image)), 60))
    return {
        "nvidia-device-plugin": list(yaml.safe_load_all(device_plugin_manifest(settings))),
        "runtimeclass-nvidia": list(yaml.safe_load_all(runtimeclass_manifest())),
        "calico-node-patch": list(yaml.safe_load_all(calico.kustomization["calico-node-patch.yaml"])),
        "dns-probe-pod": [pod],
    }


def test_every_template_under_manifests_is_covered() -> None:
    # A new cluster manifest must be added to the validation below (smoke/ is the smoke test's own, endpoint/
    # is held by test_manifests_endpoint.py).
    found = {p.relative_to(MANIFESTS_DIR).as_posix() for p in MANIFESTS_DIR.rglob("*")
             if p.is_file() and p.relative_to(MANIFESTS_DIR).parts[0] not in ("smoke", "endpoint")}
    assert found == {"nvidia-device-plugin.yaml.j2", "runtimeclass-nvidia.yaml", "calico/kustomization.yaml.j2",
                     "calico/calico-node-patch.yaml.j2"}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("variant", sorted(SETTINGS))
def test_manifests_validate_strictly(version: str, variant: str) -> None:
    errors = []
    for name, objects in manifests(parse_settings(SETTINGS[variant])).items():
        assert objects, name
        for obj in objects:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                errors.append(f"{name} ({variant}, {version}): {exc.message} at {list(exc.path)}")
    assert errors == []


def test_strict_validation_would_catch_a_misspelt_field() -> None:
    daemonset = next(yaml.safe_load_all(device_plugin_manifest(Settings())))
    daemonset["spec"]["template"]["spec"]["nodeSelectr"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, "1.31.0", strict=True)


def _pod_spec(settings: Settings) -> dict[str, Any]:
    return next(yaml.safe_load_all(device_plugin_manifest(settings)))["spec"]["template"]["spec"]


def test_device_plugin_image_version_and_runtime_follow_the_settings() -> None:
    spec = _pod_spec(Settings())
    assert spec["containers"][0]["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert "runtimeClassName" not in spec
    assert _pod_spec(parse_settings({"gpu": {"runtime": "runtimeclass"}}))["runtimeClassName"] == "nvidia"
    pinned = parse_settings({"gpu": {"device_plugin_version": "v0.16.2",
                                     "device_plugin_image": "harbor.example.com/nvidia/k8s-device-plugin"}})
    assert _pod_spec(pinned)["containers"][0]["image"] == "harbor.example.com/nvidia/k8s-device-plugin:v0.16.2"
    offline = parse_settings(SETTINGS["offline"])
    assert _pod_spec(offline)["containers"][0]["image"] == "registry.local:5000/nvidia/k8s-device-plugin:v0.17.0"


@pytest.mark.parametrize("image,expected", [
    ("docker.io/calico/node:v3.28.2", "registry.local:5000/calico/node:v3.28.2"),
    ("nvcr.io/nvidia/k8s-device-plugin:v0.17.0", "registry.local:5000/nvidia/k8s-device-plugin:v0.17.0"),
    ("localhost:5000/x/y:1", "registry.local:5000/x/y:1"),
    ("busybox:1.36", "registry.local:5000/busybox:1.36"),
])
def test_offline_images_move_to_the_offline_registry(image: str, expected: str) -> None:
    offline = parse_settings(SETTINGS["offline"])
    assert image_ref(offline, image) == expected
    assert image_ref(Settings(), image) == image


def test_calico_comes_from_the_pinned_release_with_the_pool_set_to_the_pod_cidr() -> None:
    source = calico_source(parse_settings({"calico": {"version": "v3.27.4"}, "kubernetes": {"pod_cidr": "10.50.0.0/16"}}))
    assert source.url == "https://raw.githubusercontent.com/projectcalico/calico/v3.27.4/manifests/calico.yaml"
    kustomization = yaml.safe_load(source.kustomization["kustomization.yaml"])
    assert kustomization["resources"] == ["calico-v3.27.4.yaml"] == [source.upstream_file]
    patch_files = [p["path"] for p in kustomization["patches"]]
    assert patch_files == ["calico-node-patch.yaml"] and set(patch_files) < set(source.kustomization)
    assert "images" not in kustomization  # containerd's registry mirrors apply to docker.io as they are
    patch = yaml.safe_load(source.kustomization["calico-node-patch.yaml"])
    assert (patch["kind"], patch["metadata"]["name"], patch["metadata"]["namespace"]) == \
        ("DaemonSet", "calico-node", "kube-system")
    env = {e["name"]: e["value"] for e in patch["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CALICO_IPV4POOL_CIDR"] == "10.50.0.0/16"
    assert env["IP_AUTODETECTION_METHOD"] == "kubernetes-internal-ip"


def test_calico_mirror_and_offline_sources() -> None:
    assert calico_source(parse_settings({"mirrors": {"profile": "cn"}})).url == \
        "https://mirrors.tuna.tsinghua.edu.cn/github-raw/projectcalico/calico/v3.28.2/manifests/calico.yaml"
    offline = calico_source(parse_settings(SETTINGS["offline"]))
    assert offline.url == "file:///srv/offline/calico/v3.28.2/manifests/calico.yaml"
    images = yaml.safe_load(offline.kustomization["kustomization.yaml"])["images"]
    assert images == [{"name": f"docker.io/calico/{name}", "newName": f"registry.local:5000/calico/{name}"}
                      for name in CALICO_IMAGES]
