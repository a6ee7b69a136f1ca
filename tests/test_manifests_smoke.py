"""The smoke test's manifests render to objects that every Kubernetes minor the versions table supports accepts
(strict schema: a misspelled field fails), and say what the driver and the trainer rely on.

The custom workloads (TrainJob, TrainingRuntime, PyTorchJob, PodGroup) have no schema here: their CRDs come
from the add-ons' releases, which this repository never holds. What the built-in schemas cover is validated
strictly: the Jobs and Pods inside them. The rest is dry-run by the API server (dryRun=All) before each run
creates them (tests/test_smoke_workloads.py)."""
from __future__ import annotations

import copy
import json
import shlex
import subprocess
import sys
from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest

from provision.inputs import versions
from provision.resources import TRAINER_DIR
from provision.smoke.manifests import RUN_LABEL, render, to_yaml, trainer_args
from tests.support.smoke_specs import SPECS

KUBE_VERSIONS = tuple(f"{release.name}.0" for release in versions.KUBERNETES_RELEASES)
# The minors the add-ons' workloads are checked against: the supported ones.
SUPPORTED_VERSIONS = KUBE_VERSIONS
IMAGE = versions.SMOKE_IMAGE_DEFAULT



def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def validate_strict(obj: dict[str, Any], versions: tuple[str, ...] = KUBE_VERSIONS) -> None:
    for version in versions:
        kubernetes_validate.validate(obj, version, strict=True)


def embedded(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The objects of built-in kinds inside a custom one, as the controllers will create them: a TrainingRuntime's
    Jobs, a PyTorchJob's Pods; a built-in object is itself."""
    if obj["kind"] == "TrainingRuntime":
        return [{"apiVersion": "batch/v1", "kind": "Job",
                 "metadata": {"name": replicated["name"], **replicated["template"].get("metadata", {})},
                 "spec": replicated["template"]["spec"]}
                for replicated in obj["spec"]["template"]["spec"]["replicatedJobs"]]
    if obj["kind"] == "PyTorchJob":
        return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{role.lower()}", **replica["template"]["metadata"]},
                 "spec": replica["template"]["spec"]} for role, replica in obj["spec"]["pytorchReplicaSpecs"].items()]
    if obj["kind"] in ("TrainJob", "PodGroup"):
        return []
    return [obj]


@pytest.mark.parametrize("workload", ["job", "pytorchjob", "trainjob"])
@pytest.mark.parametrize("case", sorted(SPECS))
def test_every_object_passes_strict_validation_for_every_supported_kubernetes(case: str, workload: str) -> None:
    objects = render(SPECS[case], workload)  # type: ignore[arg-type]
    assert [o["kind"] for o in objects][:2] == ["Namespace", "ConfigMap"]
    for obj in objects:
        for built_in in embedded(obj):
            validate_strict(built_in, KUBE_VERSIONS if workload == "job" else SUPPORTED_VERSIONS)


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
    modules = {path.name for path in TRAINER_DIR.glob("*.py")}
    assert set(data) == modules and {"train.py", "cifar_data.py", "infer.py", "bandwidth.py"} <= modules
    for name in modules:
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
    # Before training, an all-reduce is timed at a rendezvous of its own.
    assert script.index("--rdzv-id cifar10-smoke-bandwidth bandwidth.py --device cuda") < script.index("train.py")
    assert "--nnodes 3 --nproc-per-node 2" in script
    assert 'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then is_host=1; else is_host=0; fi' in script
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"


@pytest.mark.parametrize("workload", ["job", "pytorchjob", "trainjob"])
@pytest.mark.parametrize("case", sorted(SPECS))
def test_the_container_scripts_are_valid_shell(case: str, workload: str) -> None:
    for obj in render(SPECS[case], workload):  # type: ignore[arg-type]
        for built_in in embedded(obj):
            if built_in["kind"] not in ("Job", "Pod"):
                continue
            pod = built_in["spec"]["template"]["spec"] if built_in["kind"] == "Job" else built_in["spec"]
            for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
                if container.get("args"):
                    subprocess.run(["/bin/sh", "-n", "-c", container["args"][0]], check=True)


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


@pytest.mark.parametrize("variant", ["job", "pytorchjob", "trainjob"])
def test_printed_manifests_read_back_as_the_same_objects(variant: str) -> None:
    import yaml

    objects = render(SPECS["three-nodes"], variant)  # type: ignore[arg-type]
    text = to_yaml(objects)
    assert "train.py: |" in text  # the source stays readable in the printout
    assert list(yaml.safe_load_all(text)) == objects


def test_gpu_pods_opt_into_the_nvidia_runtime_class_only_when_one_is_named() -> None:

    named = replace(SPECS["three-nodes"], runtime_class="nvidia")
    pod = by_kind(render(named))["Job"]["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    validate_strict(by_kind(render(named))["Job"])
    assert "runtimeClassName" not in by_kind(render(SPECS["three-nodes"]))["Job"]["spec"]["template"]["spec"]
    # CPU pods never need the NVIDIA runtime.
    cpu_pod = by_kind(render(replace(SPECS["cpu"], runtime_class="nvidia")))["Job"]["spec"]["template"]["spec"]
    assert "runtimeClassName" not in cpu_pod


def test_the_seeds_network_knobs_reach_every_training_container() -> None:
    spec = SPECS["rdma-two-nodes-cached"]
    for workload in ("job", "pytorchjob", "trainjob"):
        for obj in render(spec, workload):  # type: ignore[arg-type]
            for built_in in embedded(obj):
                if built_in["kind"] not in ("Job", "Pod"):
                    continue
                pod = built_in["spec"]["template"]["spec"] if built_in["kind"] == "Job" else built_in["spec"]
                assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet", workload
                container = pod["containers"][0]
                env = {e["name"]: e["value"] for e in container["env"]}
                assert env | {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "ens1f0", "NCCL_IB_HCA": "mlx5_0"} == env
                assert container["resources"]["limits"]["rdma/hca"] == "1"
                assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
                assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
                shm = next(v for v in pod["volumes"] if v["name"] == "shm")
                assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}


def test_a_vendor_gpu_resource_is_requested_and_tolerated_by_its_own_name() -> None:

    pod = by_kind(render(replace(SPECS["one-gpu"], gpu_resource="amd.com/gpu")))["Job"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["amd.com/gpu"] == "1"
    assert pod["tolerations"] == [{"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "nvidia.com/gpu" not in json.dumps(pod)


def test_the_trainjob_runs_its_own_runtime_with_the_torch_policy_and_a_deadline_covering_the_fetch() -> None:
    spec = SPECS["rdma-two-nodes-cached"]
    objects = by_kind(render(spec, "trainjob"))
    runtime, trainjob = objects["TrainingRuntime"], objects["TrainJob"]
    assert (runtime["apiVersion"], trainjob["apiVersion"]) == ("trainer.kubeflow.org/v1alpha1",) * 2
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 2, "torch": {}}
    assert "podGroupPolicy" not in runtime["spec"]
    replicated = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert [r["name"] for r in replicated] == ["node"]
    assert replicated[0]["template"]["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    pod = replicated[0]["template"]["spec"]["template"]
    assert pod["metadata"]["labels"][RUN_LABEL] == spec.name
    container = pod["spec"]["containers"][0]
    assert container["name"] == "node"
    script = container["args"][0]
    # torchrun reads the node count, rank and master from the Trainer's PET_* variables.
    assert script.startswith("torchrun --max-restarts 0 bandwidth.py --device cuda || exit $?\n")
    assert "torchrun --max-restarts 0 train.py --device cuda --data-dir /cache/cifar10" in script
    assert trainjob["spec"] == {"runtimeRef": {"name": spec.name, "apiGroup": "trainer.kubeflow.org",
                                               "kind": "TrainingRuntime"},
                                "activeDeadlineSeconds": spec.timeout_s + spec.data_timeout_s,
                                "trainer": {"numNodes": 2, "numProcPerNode": 8}}


def test_without_a_cache_every_pod_downloads_from_the_configured_source_itself() -> None:

    spec = replace(SPECS["cpu-two-nodes"], cifar10_url="https://dataset.bj.bcebos.com/cifar/cifar-10-python.tar.gz")
    pod = by_kind(render(spec))["Job"]["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    assert "--download --download-url https://dataset.bj.bcebos.com/cifar/cifar-10-python.tar.gz --md5 " \
           "c58f30108f718f92721af3b95e74349a" in pod["containers"][0]["args"][0]
    assert by_kind(render(spec))["Job"]["spec"]["activeDeadlineSeconds"] == spec.timeout_s


def test_an_offline_archive_on_the_nodes_is_mounted_into_the_fetch() -> None:

    spec = replace(SPECS["volcano-two-nodes-pvc"], cifar10_url="file:///srv/cb/cifar10/cifar-10-python.tar.gz")
    pod = by_kind(render(spec))["Job"]["spec"]["template"]["spec"]
    assert {"name": "source", "hostPath": {"path": "/srv/cb/cifar10", "type": "Directory"}} in pod["volumes"]
    assert {"name": "source", "mountPath": "/srv/cb/cifar10", "readOnly": True} in pod["initContainers"][0]["volumeMounts"]
    claim = by_kind(render(spec))["PersistentVolumeClaim"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # the pods of two nodes share it


def test_the_collector_pod_is_a_valid_pod_on_rank_0s_node() -> None:
    from provision.smoke.manifests import collector_pod

    pod = collector_pod(SPECS["rdma-two-nodes-cached"], "gpu-7")
    validate_strict(pod, SUPPORTED_VERSIONS)
    assert pod["spec"]["nodeName"] == "gpu-7"
    assert pod["spec"]["volumes"] == [{"name": "cache", "hostPath": {"path": "/var/lib/cluster-bootstrap/cache",
                                                                     "type": "Directory"}}]


def test_strict_validation_of_an_embedded_job_is_not_vacuous() -> None:
    runtime = copy.deepcopy(by_kind(render(SPECS["three-nodes"], "trainjob"))["TrainingRuntime"])
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["volumeMount"] = pod["containers"][0].pop("volumeMounts")
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_strict(embedded(runtime)[0], SUPPORTED_VERSIONS)
