"""`gpu.runtime: runtimeclass`: the NVIDIA runtime is not containerd's default, so a pod reaches its GPUs (and NVML)
only by naming the `nvidia` RuntimeClass. Every pod template the tool renders or patches is walked: each that
asks for a GPU or reads NVML (the device plugin, its MPS daemon, GPU Feature Discovery, the DCGM exporter) names
it, every other pod does not (CPU pods stay on runc). The pipeline's GPU step is the PyTorchJob its train step
starts, rendered by the same templates."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import yaml

from provision.inputs.settings import NVIDIA_RUNTIME_CLASS, Settings, parse_settings
from provision.render.addons import addon_plan
from provision.render.manifests import device_plugin_manifest, runtimeclass_manifest
from provision.smoke.manifests import render
from provision.smoke.pipeline import pytorchjob
from provision.smoke.serve import inference_service
from provision.smoke.spec import build_spec

# The agents that read the GPUs through NVML without asking for one (upstream's images set
# NVIDIA_VISIBLE_DEVICES=all: the NVIDIA runtime then hands them every GPU of the node).
NVML_AGENTS = {"nvidia-device-plugin", "nvidia-device-plugin-mps-control-daemon", "gpu-feature-discovery",
               "dcgm-exporter"}
RUNTIMECLASS = {"gpu": {"runtime": "runtimeclass"}}


def pod_specs(obj: Any, owner: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(the object that holds it, the pod spec) for every pod spec in `obj`: a Pod's, and every `template.spec`
    (Deployments, DaemonSets, Jobs, the replica specs of a PyTorchJob, a JobSet's jobs inside a runtime, a
    strategic-merge patch of a DaemonSet), and an InferenceService's predictor."""
    if isinstance(obj, dict):
        owner = (obj.get("metadata") or {}).get("name", owner) if isinstance(obj.get("metadata"), dict) else owner
        if obj.get("kind") == "Pod":
            yield owner, obj["spec"]
        for key, value in obj.items():
            if key == "template" and isinstance(value, dict) and isinstance(value.get("spec"), dict) and (
                    "containers" in value["spec"] or "nodeSelector" in value["spec"]):
                yield owner, value["spec"]
            elif key == "predictor" and isinstance(value, dict):
                yield owner, value
            yield from pod_specs(value, owner)
    elif isinstance(obj, list):
        for item in obj:
            yield from pod_specs(item, owner)


def uses_gpu(owner: str, spec: dict[str, Any]) -> bool:
    asked = [name for c in spec.get("containers", []) + spec.get("initContainers", [])
             for name in ((c.get("resources") or {}).get("limits") or {}) if name.startswith("nvidia.com/")]
    return bool(asked) or owner in NVML_AGENTS


def rendered(settings: Settings) -> list[dict[str, Any]]:
    """Every object the tool renders with pods in it, for these settings."""
    objects = [doc for doc in yaml.safe_load_all(device_plugin_manifest(settings)) if doc]
    for name in ("dcgm_exporter", "gpu_feature_discovery"):
        for part in addon_plan(settings, name).parts:
            objects += [yaml.safe_load(p["patch"]) for p in yaml.safe_load(part.kustomization).get("patches", [])]
    for mode in ("gpu", "cpu"):
        for workload in ("job", "pytorchjob", "trainjob"):
            for nodes in (1, 2):
                spec = build_spec(settings, mode, namespace="cb-smoke-x7k2p", nodes=nodes)  # type: ignore[arg-type]
                objects += render(replace(spec, workload=workload))
        served = build_spec(settings, mode, namespace="cb-smoke-x7k2p")  # type: ignore[arg-type]
        objects.append(inference_service(served, "w1", None))
        # `smoke-test --pipeline`'s GPU step: the PyTorchJob its train step starts.
        objects.append(pytorchjob(replace(served, name="cifar10-smoke", namespace="kubeflow")))
    return objects


@pytest.mark.parametrize("gpu", [RUNTIMECLASS["gpu"], {**RUNTIMECLASS["gpu"], "sharing": "mps", "replicas": 2},
                                 {**RUNTIMECLASS["gpu"], "mig": {"strategy": "mixed", "profile": "1g.10gb"}}])
def test_every_pod_that_uses_a_gpu_or_nvml_names_the_nvidia_runtime_class(gpu: dict[str, Any]) -> None:
    walked = [(owner, spec) for obj in rendered(parse_settings({"gpu": gpu})) for owner, spec in pod_specs(obj)]
    gpu_pods = [(owner, spec) for owner, spec in walked if uses_gpu(owner, spec)]
    # The walk found the GPU pods of every kind: the plugin, the agents, the smoke test's workloads.
    assert {owner for owner, _ in gpu_pods} >= {"nvidia-device-plugin", "dcgm-exporter", "gpu-feature-discovery",
                                                "cifar10-smoke"}
    missing = sorted({owner for owner, spec in gpu_pods if spec.get("runtimeClassName") != NVIDIA_RUNTIME_CLASS})
    assert missing == []
    assert not [owner for owner, spec in walked if not uses_gpu(owner, spec) and "runtimeClassName" in spec]


def test_with_the_default_runtime_no_pod_names_a_runtime_class() -> None:
    walked = [spec for obj in rendered(Settings()) for _, spec in pod_specs(obj)]
    assert walked and not [spec for spec in walked if "runtimeClassName" in spec]


def test_the_runtime_class_the_pods_name_is_the_one_the_gpu_phase_creates() -> None:
    created = yaml.safe_load(runtimeclass_manifest())
    assert (created["kind"], created["metadata"]["name"]) == ("RuntimeClass", NVIDIA_RUNTIME_CLASS)
    assert parse_settings(RUNTIMECLASS).gpu.runtime_class == created["metadata"]["name"]
