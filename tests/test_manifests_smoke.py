"""The smoke test's manifests render to objects that every supported Kubernetes minor accepts (strict schema: a
misspelled field fails), and say what the driver and the trainer rely on."""
from __future__ import annotations

import copy
import json
import shlex
import subprocess
import sys
from typing import Any

import kubernetes_validate
import pytest

from provision.inputs import versions
from provision.render.smoke_manifests import RUN_LABEL, TRAINER_FILES, SmokeSpec, render, to_yaml, trainer_args
from provision.resources import TRAINER_DIR

KUBE_VERSIONS = tuple(f"{release.name}.0" for release in versions.KUBERNETES_RELEASES)
IMAGE = versions.SMOKE_IMAGE_DEFAULT

SPECS = {
    "one-gpu": SmokeSpec(namespace="cb-smoke-a1", image=IMAGE, gpus=1, epochs=10),
    "one-node-four-gpus": SmokeSpec(namespace="cb-smoke-a2", image=IMAGE, gpus=4),
    "three-nodes": SmokeSpec(namespace="cb-smoke-a3", image=IMAGE, gpus=2, nodes=3, timeout_s=1200),
    "cpu": SmokeSpec(namespace="cb-smoke-a4", image=IMAGE, gpus=0),
    "cpu-two-nodes": SmokeSpec(namespace="cb-smoke-a5", image=IMAGE, gpus=0, nodes=2, dataset="cifar10"),
}


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def validate_strict(obj: dict[str, Any]) -> None:
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("case", sorted(SPECS))
def test_every_object_passes_strict_validation_for_every_supported_kubernetes(case: str) -> None:
    objects = render(SPECS[case])
    assert [o["kind"] for o in objects][:2] == ["Namespace", "ConfigMap"]
    for obj in objects:
        validate_strict(obj)


def test_strict_validation_is_not_vacuous() -> None:
    job = copy.deepcopy(by_kind(render(SPECS["one-gpu"]))["Job"])
    job["spec"]["backofLimit"] = job["spec"].pop("backoffLimit")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBE_VERSIONS[0], strict=True)


def test_the_single_gpu_job_asks_for_a_gpu_tolerates_the_taint_and_cannot_linger() -> None:
    job = by_kind(render(SPECS["one-gpu"]))["Job"]
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 900
    assert spec["ttlSecondsAfterFinished"] > 0
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    container = pod["containers"][0]
    assert container["image"] == IMAGE
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["args"][0].startswith("exec python train.py --device cuda")
    assert spec["template"]["metadata"]["labels"][RUN_LABEL] == job["metadata"]["name"]


def test_several_gpus_in_one_pod_run_under_torchrun() -> None:
    command = by_kind(render(SPECS["one-node-four-gpus"]))["Job"]["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "torchrun --standalone --nnodes 1 --nproc-per-node 4 train.py" in command


def test_the_trainer_source_ships_in_the_configmap_byte_for_byte() -> None:
    objects = by_kind(render(SPECS["one-gpu"]))
    data = objects["ConfigMap"]["data"]
    assert set(data) == set(TRAINER_FILES)
    for name in TRAINER_FILES:
        assert data[name] == (TRAINER_DIR / name).read_text()
    pod = objects["Job"]["spec"]["template"]["spec"]
    assert {"name": "trainer", "configMap": {"name": objects["ConfigMap"]["metadata"]["name"]}} in pod["volumes"]


def test_multi_node_is_an_indexed_job_behind_a_headless_service_rendezvousing_on_index_0() -> None:
    objects = by_kind(render(SPECS["three-nodes"]))
    service, job = objects["Service"], objects["Job"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in service["spec"]["selector"].items())
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 3
    assert spec["activeDeadlineSeconds"] == 1200
    pod = spec["template"]["spec"]
    # Pod index 0 is reachable as <job>-0.<subdomain>: the rendezvous endpoint.
    assert pod["subdomain"] == service["metadata"]["name"]
    script = pod["containers"][0]["args"][0]
    assert f"host={job['metadata']['name']}-0.{service['metadata']['name']}" in script
    assert '--rdzv-backend c10d --rdzv-endpoint "$host:29500"' in script
    assert "--nnodes 3 --nproc-per-node 2" in script
    assert 'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then is_host=1; else is_host=0; fi' in script
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"


@pytest.mark.parametrize("case", sorted(SPECS))
def test_the_container_scripts_are_valid_shell(case: str) -> None:
    for obj in render(SPECS[case]):
        if obj["kind"] == "Job":
            script = obj["spec"]["template"]["spec"]["containers"][0]["args"][0]
            subprocess.run(["/bin/sh", "-n", "-c", script], check=True)


def test_cpu_runs_ask_for_no_gpu_and_pin_the_thread_count() -> None:
    pod = by_kind(render(SPECS["cpu"]))["Job"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "nvidia.com/gpu" not in container["resources"]["limits"] and "tolerations" not in pod
    assert {"name": "OMP_NUM_THREADS", "value": "2"} in container["env"]
    assert "--device cpu" in container["args"][0]


def test_the_pytorchjob_variant_names_its_container_pytorch_and_its_pods_are_valid() -> None:
    objects = by_kind(render(SPECS["three-nodes"], "pytorchjob"))
    assert "Service" not in objects
    job = objects["PyTorchJob"]
    assert job["apiVersion"] == "kubeflow.org/v1"
    assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] == 1200
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 2
    for replica in replicas.values():
        template = replica["template"]
        container = template["spec"]["containers"][0]
        # The operator finds the container, and the master port, by these names.
        assert container["name"] == "pytorch"
        assert {"name": "pytorchjob-port", "containerPort": 23456} in container["ports"]
        assert '--node-rank "$RANK" --master-addr "$MASTER_ADDR"' in container["args"][0]
        # The CRD has no schema here, so its pods are checked as plain Pods.
        validate_strict({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **template["metadata"]},
                         "spec": template["spec"]})


def test_a_single_node_pytorchjob_has_no_workers() -> None:
    job = by_kind(render(SPECS["one-gpu"], "pytorchjob"))["PyTorchJob"]
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Master"}


def test_the_trainer_accepts_the_arguments_each_manifest_passes() -> None:
    pytest.importorskip("torch", reason="train.py imports torch: run in the environment that has it (.venv)")
    cases = sorted(SPECS)
    code = ("import json, shlex, sys; sys.path.insert(0, sys.argv[1]); import train\n"
            "for line in sys.stdin:\n"
            "    a = train.parse_args(shlex.split(line))\n"
            "    print(json.dumps([a.device, a.dataset_name, a.epochs]))")
    lines = "".join(shlex.join(trainer_args(SPECS[case])) + "\n" for case in cases)
    result = subprocess.run([sys.executable, "-c", code, str(TRAINER_DIR)], input=lines, capture_output=True,
                            text=True, check=True)
    for case, parsed in zip(cases, result.stdout.splitlines(), strict=True):
        spec = SPECS[case]
        assert json.loads(parsed) == ["cpu" if spec.cpu else "cuda", spec.dataset, spec.epochs or 0]
        command = by_kind(render(spec))["Job"]["spec"]["template"]["spec"]["containers"][0]["args"][0]
        assert shlex.join(trainer_args(spec)) in command


@pytest.mark.parametrize("variant", ["job", "pytorchjob"])
def test_printed_manifests_read_back_as_the_same_objects(variant: str) -> None:
    import yaml

    objects = render(SPECS["three-nodes"], variant)  # type: ignore[arg-type]
    text = to_yaml(objects)
    assert "train.py: |" in text  # the source stays readable in the printout
    assert list(yaml.safe_load_all(text)) == objects


def test_gpu_pods_opt_into_the_nvidia_runtime_class_only_when_one_is_named() -> None:
    from dataclasses import replace

    named = replace(SPECS["three-nodes"], runtime_class="nvidia")
    pod = by_kind(render(named))["Job"]["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    validate_strict(by_kind(render(named))["Job"])
    assert "runtimeClassName" not in by_kind(render(SPECS["three-nodes"]))["Job"]["spec"]["template"]["spec"]
    # CPU pods never need the NVIDIA runtime.
    cpu_pod = by_kind(render(replace(SPECS["cpu"], runtime_class="nvidia")))["Job"]["spec"]["template"]["spec"]
    assert "runtimeClassName" not in cpu_pod
