"""What upstream will read, held to what upstream publishes (docs/conformance.md lists every artifact and its check).

- TrainJob and TrainingRuntime: built into the models of kubeflow-trainer-api, the release of the pinned Trainer
  (v2.3.0), strictly: a field the models do not declare is an error (the API server would prune it silently).
- PyTorchJob: built into kubeflow-training's models (the release of the pinned Training Operator, v1.9.4), with
  the kubernetes client's core models inside, strictly.
- Volcano's objects (our PodGroup and Queue): no package publishes Volcano's models, so their fields are held to
  the v1beta1 Go types of volcano.sh/apis as Volcano's release-1.15 ships them (field names and types, written
  below as our own table), and every field the controllers read is checked for what they do with it.

The core objects are validated with kubernetes-validate for every supported minor in test_manifests_*.py; the
kubeadm configuration against its v1beta4 fields in test_kubeadm_config.py.
"""
from __future__ import annotations

import importlib.metadata
from typing import Any

import pytest

from provision.inputs.addons import ADDONS
from provision.inputs.settings import Settings
from provision.render.addons import volcano_queue
from provision.smoke.manifests import GROUP_NAME_ANNOTATION, QUEUE_NAME_ANNOTATION, render
from tests.support.smoke_specs import SPECS, spec
from tests.support.strict_models import pydantic_problems, swagger_unknown_fields

trainer_models = pytest.importorskip("kubeflow_trainer_api.models")
training_models = pytest.importorskip("kubeflow.training.models")

WORKLOAD_SPECS = dict(SPECS) | {
    "volcano-one-gpu-hostpath": spec("cb-smoke-b1", gpus=1, scheduler="volcano", queue="research", dataset="cifar10",
                                     cache="hostpath")}


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def test_the_model_packages_are_the_pinned_releases() -> None:
    # The models are the CRDs' of the release `up` installs: another release could accept other fields.
    assert importlib.metadata.version("kubeflow-trainer-api") == ADDONS["trainer"].version.lstrip("v")
    assert importlib.metadata.version("kubeflow-training") == ADDONS["training_operator"].version.lstrip("v")


# --- Kubeflow Trainer v2 -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(WORKLOAD_SPECS))
def test_trainjob_and_its_runtime_are_what_the_trainer_api_models_accept(case: str) -> None:
    objects = by_kind(render(WORKLOAD_SPECS[case], "trainjob"))
    problems = pydantic_problems(trainer_models.TrainerV1alpha1TrainingRuntime, objects["TrainingRuntime"],
                                 "TrainingRuntime")
    problems += pydantic_problems(trainer_models.TrainerV1alpha1TrainJob, objects["TrainJob"], "TrainJob")
    assert problems == []


def test_the_trainer_models_refuse_a_misplaced_field() -> None:
    # The check above would be worthless if it let through what the Trainer never reads: the queue annotation
    # on the TrainJob's spec (where an old doc put it) is not a field of TrainJobSpec.
    trainjob = by_kind(render(WORKLOAD_SPECS["volcano-two-nodes-pvc"], "trainjob"))["TrainJob"]
    trainjob["spec"]["annotations"] = {QUEUE_NAME_ANNOTATION: "research"}
    assert pydantic_problems(trainer_models.TrainerV1alpha1TrainJob, trainjob, "TrainJob") == [
        "TrainJob.spec.annotations: not a field of TrainerV1alpha1TrainJobSpec"]
    runtime = by_kind(render(WORKLOAD_SPECS["one-gpu"], "trainjob"))["TrainingRuntime"]
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "imagePullPolicyy"] = "Always"
    assert len(pydantic_problems(trainer_models.TrainerV1alpha1TrainingRuntime, runtime, "TrainingRuntime")) == 1


@pytest.mark.parametrize("case", ["volcano-two-nodes-pvc", "volcano-one-gpu-hostpath"])
def test_under_volcano_the_trainer_finds_the_queue_and_the_policy_where_it_reads_them(case: str) -> None:
    # Trainer v2.3's Volcano plugin (pkg/runtime/framework/plugins/volcano): the PodGroup's queue from the
    # runtime's JobSet template annotations (or a TrainJob's runtimePatches), gang size from the trainer's nodes.
    spec = WORKLOAD_SPECS[case]
    objects = by_kind(render(spec, "trainjob"))
    runtime = trainer_models.TrainerV1alpha1TrainingRuntime.from_dict(objects["TrainingRuntime"])
    assert runtime.spec.pod_group_policy.volcano is not None
    assert runtime.spec.template.metadata.annotations == {QUEUE_NAME_ANNOTATION: spec.queue}
    assert runtime.spec.ml_policy.num_nodes == spec.nodes
    trainjob = trainer_models.TrainerV1alpha1TrainJob.from_dict(objects["TrainJob"])
    assert not trainjob.spec.runtime_patches and not (trainjob.metadata.annotations or {})


# --- Kubeflow Training Operator v1 -------------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(WORKLOAD_SPECS))
def test_the_pytorchjob_is_what_the_training_operator_models_accept(case: str) -> None:
    from kubeflow.training.api_client import ApiClient
    job = by_kind(render(WORKLOAD_SPECS[case], "pytorchjob"))["PyTorchJob"]
    assert swagger_unknown_fields("KubeflowOrgV1PyTorchJob", job, "PyTorchJob") == []
    # The generated client's own deserialisation: types and required fields (replicas' templates, the specs).
    built = ApiClient()._ApiClient__deserialize(job, "KubeflowOrgV1PyTorchJob")  # type: ignore[attr-defined]
    replicas = built.spec.pytorch_replica_specs
    assert replicas["Master"].replicas == 1
    assert sum(r.replicas for r in replicas.values()) == WORKLOAD_SPECS[case].nodes
    assert all(c.name == "pytorch" for r in replicas.values() for c in r.template.spec.containers)


def test_the_training_operator_models_refuse_an_unknown_field() -> None:
    job = by_kind(render(WORKLOAD_SPECS["three-nodes"], "pytorchjob"))["PyTorchJob"]
    job["spec"]["runPolicy"]["backofLimit"] = 0
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    assert swagger_unknown_fields("KubeflowOrgV1PyTorchJob", job, "PyTorchJob") == [
        "PyTorchJob.spec.runPolicy.backofLimit: not a field of KubeflowOrgV1RunPolicy",
        "PyTorchJob.spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].imagePullPolicyy: not a field of "
        "V1Container"]


# --- Volcano -------------------------------------------------------------------------------------------------------
# scheduling.volcano.sh/v1beta1, from volcano.sh/apis pkg/apis/scheduling/v1beta1/types.go (Volcano release-1.15):
# each field's JSON name and kind. A field not listed is unknown to Volcano's CRD.
INT, STR, BOOL, RESOURCES, OBJECT, LIST = "int32", "string", "bool", "ResourceList", "object", "list"
VOLCANO_FIELDS: dict[str, dict[str, str]] = {
    "PodGroup": {"minMember": INT, "minTaskMember": OBJECT, "queue": STR, "priorityClassName": STR,
                 "minResources": RESOURCES, "networkTopology": OBJECT, "subGroupPolicy": LIST},
    "Queue": {"weight": INT, "capability": RESOURCES, "reclaimable": BOOL, "extendClusters": LIST,
              "guarantee": OBJECT, "affinity": OBJECT, "type": STR, "parent": STR, "deserved": RESOURCES,
              "priority": INT, "dequeueStrategy": STR},
}
PYTHON_TYPE = {INT: int, STR: str, BOOL: bool, RESOURCES: dict, OBJECT: dict, LIST: list}


def volcano_problems(obj: dict[str, Any]) -> list[str]:
    kind = obj["kind"]
    problems = [] if obj["apiVersion"] == "scheduling.volcano.sh/v1beta1" else [f"{kind}: apiVersion {obj['apiVersion']}"]
    for key, value in obj["spec"].items():
        wanted = VOLCANO_FIELDS[kind].get(key)
        if wanted is None:
            problems.append(f"{kind}.spec.{key}: not a field of {kind}Spec")
        elif not isinstance(value, PYTHON_TYPE[wanted]) or (wanted == INT and isinstance(value, bool)):
            problems.append(f"{kind}.spec.{key}: expected {wanted}, got {value!r}")
    return problems


@pytest.mark.parametrize("workload", ["job", "pytorchjob"])
@pytest.mark.parametrize("case", ["volcano-two-nodes-pvc", "volcano-one-gpu-hostpath"])
def test_our_podgroup_has_only_volcano_fields_and_every_one_it_reads_is_right(case: str, workload: str) -> None:
    spec = WORKLOAD_SPECS[case]
    objects = render(spec, workload)
    group = by_kind(objects)["PodGroup"]
    assert volcano_problems(group) == []
    # What the scheduler reads: the gang's size (every pod of the run), the queue (the one the add-on creates or
    # the one the smoke test was told), and each pod's tie to the group (its annotation) and to Volcano.
    assert group["spec"]["minMember"] == spec.nodes
    assert group["spec"]["queue"] == spec.queue
    workload_object = objects[-1]
    templates = ([workload_object["spec"]["template"]] if workload == "job" else
                 [r["template"] for r in workload_object["spec"]["pytorchReplicaSpecs"].values()])
    for template in templates:
        assert template["metadata"]["annotations"][GROUP_NAME_ANNOTATION] == group["metadata"]["name"]
        assert template["spec"]["schedulerName"] == "volcano"


def test_the_queue_the_addon_creates_is_a_volcano_queue_the_smoke_test_names() -> None:
    settings = Settings()
    queue = volcano_queue(settings)
    assert volcano_problems(queue) == []
    # The smoke test's default queue is the one the add-on creates.
    assert queue["metadata"]["name"] == settings.addons.volcano_queue == spec("n").queue


def test_the_volcano_field_table_catches_a_misspelt_or_mistyped_field() -> None:
    group = by_kind(render(WORKLOAD_SPECS["volcano-two-nodes-pvc"], "job"))["PodGroup"]
    group["spec"]["minMembers"] = 2
    group["spec"]["queue"] = 7
    assert volcano_problems(group) == ["PodGroup.spec.queue: expected string, got 7",
                                       "PodGroup.spec.minMembers: not a field of PodGroupSpec"]
