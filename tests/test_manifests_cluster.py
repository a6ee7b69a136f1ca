"""Every manifest the cluster phases apply, rendered from the settings and validated with kubernetes-validate in
strict mode (an unknown or misspelt field fails) for every Kubernetes minor the versions table supports; every
image they name follows the mirror profile and the offline image repository."""
from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes import client

from provision.inputs import versions
from provision.inputs.settings import Settings, parse_settings
from provision.inputs.sources import resolve_sources
from provision.kube.verify import Expectations, dns_probe_pod
from provision.render.manifests import (
    calico_images,
    calico_source,
    device_plugin_manifest,
    image_ref,
    runtimeclass_manifest,
)
from provision.resources import MANIFESTS_DIR

KUBERNETES_VERSIONS = [f"{release.name}.0" for release in versions.KUBERNETES_RELEASES]
SETTINGS = {
    "defaults": {},
    "runtimeclass": {"gpu": {"runtime": "runtimeclass"}},
    "time-slicing": {"gpu": {"sharing": "time-slicing", "replicas": 4}},
    "mps": {"gpu": {"sharing": "mps", "replicas": 2, "runtime": "runtimeclass"}},
    "mig-mixed": {"gpu": {"mig": {"strategy": "mixed", "profile": "1g.10gb"}, "sharing": "time-slicing",
                          "replicas": 2}},
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
    daemonset = list(yaml.safe_load_all(device_plugin_manifest(Settings())))[1]
    daemonset["spec"]["template"]["spec"]["nodeSelectr"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, KUBERNETES_VERSIONS[0], strict=True)


def _pod_spec(settings: Settings) -> dict[str, Any]:
    return list(yaml.safe_load_all(device_plugin_manifest(settings)))[1]["spec"]["template"]["spec"]


def test_device_plugin_image_version_and_runtime_follow_the_settings() -> None:
    spec = _pod_spec(Settings())
    assert spec["containers"][0]["image"] == f"nvcr.io/nvidia/k8s-device-plugin:{versions.DEVICE_PLUGIN_DEFAULT}"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert "runtimeClassName" not in spec
    assert _pod_spec(parse_settings({"gpu": {"runtime": "runtimeclass"}}))["runtimeClassName"] == "nvidia"
    pinned = parse_settings({"gpu": {"device_plugin_version": "v0.19.3",
                                     "device_plugin_image": "harbor.example.com/nvidia/k8s-device-plugin"}})
    assert _pod_spec(pinned)["containers"][0]["image"] == "harbor.example.com/nvidia/k8s-device-plugin:v0.19.3"
    offline = parse_settings(SETTINGS["offline"])
    assert _pod_spec(offline)["containers"][0]["image"] == \
        f"registry.local:5000/nvidia/k8s-device-plugin:{versions.DEVICE_PLUGIN_DEFAULT}"


@pytest.mark.parametrize("image,expected", [
    ("quay.io/calico/node:v3.33.0", "registry.local:5000/calico/node:v3.33.0"),
    ("nvcr.io/nvidia/k8s-device-plugin:v0.20.1", "registry.local:5000/nvidia/k8s-device-plugin:v0.20.1"),
    ("localhost:5000/x/y:1", "registry.local:5000/x/y:1"),
    ("busybox:1.36", "registry.local:5000/busybox:1.36"),
])
def test_offline_images_move_to_the_offline_registry(image: str, expected: str) -> None:
    offline = parse_settings(SETTINGS["offline"])
    assert image_ref(offline, image) == expected
    assert image_ref(Settings(), image) == image


def test_calico_comes_from_the_pinned_release_with_the_pool_set_to_the_pod_cidr() -> None:
    source = calico_source(parse_settings({"calico": {"version": "v3.32.3"}, "kubernetes": {"version": "1.35",
                                                                                           "pod_cidr": "10.50.0.0/16"}}))
    assert source.url == "https://raw.githubusercontent.com/projectcalico/calico/v3.32.3/manifests/calico.yaml"
    kustomization = yaml.safe_load(source.kustomization["kustomization.yaml"])
    assert kustomization["resources"] == ["calico-v3.32.3.yaml"] == [source.upstream_file]
    patch_files = [p["path"] for p in kustomization["patches"]]
    assert patch_files == ["calico-node-patch.yaml"] and set(patch_files) < set(source.kustomization)
    assert "images" not in kustomization  # containerd's registry mirrors apply to quay.io as it is
    patch = yaml.safe_load(source.kustomization["calico-node-patch.yaml"])
    assert (patch["kind"], patch["metadata"]["name"], patch["metadata"]["namespace"]) == \
        ("DaemonSet", "calico-node", "kube-system")
    env = {e["name"]: e["value"] for e in patch["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CALICO_IPV4POOL_CIDR"] == "10.50.0.0/16"
    assert env["IP_AUTODETECTION_METHOD"] == "kubernetes-internal-ip"


@pytest.mark.parametrize("version", [r.name for r in versions.KUBERNETES_RELEASES])
def test_calico_follows_the_kubernetes_minor(version: str) -> None:
    settings = parse_settings({"kubernetes": {"version": version}})
    assert settings.calico.version == versions.kubernetes_release(settings.kubernetes.minor_number).calico
    assert calico_source(settings).upstream_file == f"calico-{settings.calico.version}.yaml"


def test_calico_mirror_and_offline_sources() -> None:
    calico = versions.KUBERNETES_RELEASES[-1].calico
    assert calico_source(parse_settings({"mirrors": {"profile": "cn"}})).url == \
        f"https://files.m.daocloud.io/raw.githubusercontent.com/projectcalico/calico/{calico}/manifests/calico.yaml"
    offline = calico_source(parse_settings(SETTINGS["offline"]))
    assert offline.url == f"file:///srv/offline/calico/{calico}/manifests/calico.yaml"
    images = yaml.safe_load(offline.kustomization["kustomization.yaml"])["images"]
    # What Calico 3.33's manifests/calico.yaml references: the consolidated `calico` image (install-cni,
    # upgrade-ipam, kube-controllers) and `node` (ebpf-bootstrap, calico-node); cni and kube-controllers are gone.
    assert images == [{"name": f"quay.io/calico/{name}", "newName": f"registry.local:5000/calico/{name}"}
                      for name in ("calico", "node")]


@pytest.mark.parametrize("version,names", [("v3.31.7", ("cni", "node", "kube-controllers")),
                                           ("v3.32.1", ("cni", "node", "kube-controllers")),
                                           ("v3.33.1", ("calico", "node"))])
def test_offline_moves_the_images_each_calico_line_references(version: str, names: tuple[str, ...]) -> None:
    minor = {"3.31": "1.35", "3.32": "1.35", "3.33": "1.36"}[version[1:5]]
    settings = parse_settings({**SETTINGS["offline"], "kubernetes": {"version": minor}, "calico": {"version": version}})
    kustomization = yaml.safe_load(calico_source(settings).kustomization["kustomization.yaml"])
    assert {i["name"]: i["newName"] for i in kustomization["images"]} == {
        f"quay.io/calico/{n}": f"registry.local:5000/calico/{n}" for n in names}


def _registry(image: str) -> str:
    first, _, rest = image.partition("/")
    return first if rest and ("." in first or ":" in first) else "docker.io"


def _every_image(settings: Settings) -> list[str]:
    """Every image a cluster pulls whose reference the settings decide: Calico's, the device plugin, the DNS
    probe, the smoke test's (both CUDA levels); the control-plane and pause images come from image_repository."""
    plugin = _pod_spec(settings)["containers"][0]["image"]
    smoke = [image_ref(settings, s.image) for s in versions.SMOKE_IMAGES]
    return [*calico_images(settings).values(), plugin, image_ref(settings, settings.verify.dns_probe_image), *smoke]


def test_every_image_follows_the_mirror_profile() -> None:
    # cn: every registry the images come from is mirrored by containerd (hosts.toml), so no reference changes.
    cn = parse_settings({"mirrors": {"profile": "cn"}})
    mirrored = set(resolve_sources(cn).registry_mirrors)
    assert {_registry(image) for image in _every_image(cn)} <= mirrored
    assert all(image.startswith("quay.io/calico/") for image in calico_images(cn).values())


def test_every_image_moves_to_the_offline_image_repository() -> None:
    offline = parse_settings(SETTINGS["offline"])
    assert all(image.startswith("registry.local:5000/") for image in _every_image(offline))
