"""A smoke-test run as a cluster would show it: the trainer's pods and Job, a scripted cluster the stand-in
API server serves poll by poll, and observations recorded from such runs (tests/data/smoke/)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provision.inputs.versions import SMOKE_IMAGE_DEFAULT
from provision.smoke.manifests import CUSTOM_KINDS, RUN_LABEL
from provision.smoke.observation import (
    Condition,
    Observation,
    PodGroupObservation,
    PodObservation,
    Terminated,
    Waiting,
)
from tests.support.apiserver import FakeApiServer, RecordedRequest, Response, object_list, status
from tests.support.kube_objects import STARTED, crd, node, pod
from tests.support.paths import REPO_ROOT

NS = "cb-smoke-test01"
JOB = "cifar10-smoke"
# The image a default run uses (the recordings under tests/data/smoke/ were made with an older default).
IMAGE = SMOKE_IMAGE_DEFAULT
RECORDED = REPO_ROOT / "tests" / "data" / "smoke"

METRICS = {"test_accuracy": 0.9412, "inference_accuracy": 0.9398, "images_per_s": 98765.4, "epoch_time_s": 0.51,
           "train_time_s": 5.1, "wall_time_s": 19.0, "epochs": 10, "steps": 480, "batch_size": 1024,
           "train_images": 50000, "test_images": 10000, "parameters": 1972792, "dataset": "synthetic",
           "device": "NVIDIA H100 80GB HBM3", "device_type": "cuda", "gpu_count": 1, "world_size": 1, "nodes": 1,
           "torch_version": "2.5.1", "cuda_version": "12.4", "hostname": "cifar10-smoke-x", "model_path": "/work/out/model.pt"}
EPOCH_LOG = "device NVIDIA H100 80GB HBM3; ranks 1\n" + "".join(
    f"epoch {e}/10  loss 1.0  train_acc 0.9  time 0.50s  images/s 100000\n" for e in range(1, 11))


def trainer_pod(phase: str, *, name: str = f"{JOB}-abcde", node_name: str | None = "gpu-1",
                unschedulable: str | None = None, waiting: tuple[str, str] | None = None,
                terminated: dict[str, Any] | None = None) -> dict[str, Any]:
    """A pod of the smoke-test Job, as its template makes it (the trainer container, 12Gi, one GPU)."""
    return pod(name, node_name, {RUN_LABEL: JOB, "job-name": JOB}, namespace=NS, phase=phase, container="trainer",
               image=IMAGE, limits={"memory": "12Gi", "nvidia.com/gpu": "1"},
               waiting=waiting[0] if waiting else None, waiting_message=waiting[1] if waiting else None,
               terminated=terminated, unschedulable=unschedulable)


def succeeded(metrics: dict[str, Any]) -> dict[str, Any]:
    return trainer_pod("Succeeded", terminated={"exitCode": 0, "reason": "Completed", "message": json.dumps(metrics)})


def job(*conditions: tuple[str, str, str]) -> dict[str, Any]:
    """The smoke-test Job with these (type, reason, message) conditions, all True."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": JOB, "namespace": NS},
            "status": {"conditions": [{"type": t, "status": "True", "reason": r, "message": m}
                                      for t, r, m in conditions]}}


def workload(kind: str, *conditions: tuple[str, str, str], name: str = JOB) -> dict[str, Any]:
    """A TrainJob or PyTorchJob (as the custom objects API returns it) with these conditions, all True."""
    group, version, _ = CUSTOM_KINDS[kind]
    return {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": {"name": name, "namespace": NS},
            "spec": {}, "status": {"conditions": [{"type": t, "status": "True", "reason": r, "message": m,
                                                   "lastTransitionTime": STARTED} for t, r, m in conditions]}}


def podgroup(phase: str, unschedulable: str | None = None, *, min_member: int = 2,
             queue: str = "cluster-bootstrap", name: str = JOB) -> dict[str, Any]:
    """Volcano's PodGroup of the run; `unschedulable`: the scheduler's message while the gang cannot be placed."""
    conditions = [{"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                   "message": unschedulable, "transitionID": "1", "lastTransitionTime": STARTED}] if unschedulable else []
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": name, "namespace": NS},
            "spec": {"minMember": min_member, "queue": queue}, "status": {"phase": phase, "conditions": conditions}}


@dataclass
class Cluster:
    """A scripted cluster: each poll of the driver sees the next (workload, pods, log) step; the last one stays.

    The driver reads the pods, then the log, then the workload (a Job, or the TrainJob / PyTorchJob named by
    `kind`): reading the workload ends a poll. `crds` are the add-ons' CRDs it serves (none: a plain cluster),
    `queues` Volcano's queues, `default_storage_class` its default StorageClass; `podgroups` are served in turn
    for the run's PodGroup."""

    nodes: list[dict[str, Any]] = field(default_factory=lambda: [node("gpu-1", gpus=1)])
    steps: list[tuple[dict[str, Any], list[dict[str, Any]], str]] = field(default_factory=list)
    step: int = 0
    kind: str = "Job"
    crds: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    default_storage_class: str | None = None
    podgroups: list[Any] = field(default_factory=list)

    def current(self) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
        return self.steps[min(self.step, len(self.steps) - 1)]

    def serve(self, api: FakeApiServer) -> None:
        def echo(request: RecordedRequest) -> Response:
            return Response(201, request.json)

        def read_job(_: RecordedRequest) -> dict[str, Any]:
            answer = self.current()[0]
            self.step += 1
            return answer

        api.add("GET", "/api/v1/nodes", object_list("NodeList", self.nodes))
        api.add("POST", "/api/v1/namespaces", echo)
        api.add("POST", "/api/v1/namespaces/{ns}/configmaps", echo)
        api.add("POST", "/api/v1/namespaces/{ns}/services", echo)
        api.add("POST", "/api/v1/namespaces/{ns}/persistentvolumeclaims", echo)
        api.add("POST", "/apis/batch/v1/namespaces/{ns}/jobs", echo)
        api.add("GET", "/api/v1/namespaces/{ns}/pods", lambda _: object_list("PodList", self.current()[1]))
        api.add("GET", "/api/v1/namespaces/{ns}/pods/{pod}/log", lambda _: self.current()[2])
        api.add("DELETE", "/api/v1/namespaces/{ns}", status(200, "", "deleted"))
        for crd_name in self.crds:
            api.add("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}", crd(crd_name))
        for queue in self.queues:
            api.add("GET", f"/apis/scheduling.volcano.sh/v1beta1/queues/{queue}",
                    {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": queue}})
        classes = [{"metadata": {"name": self.default_storage_class,
                                 "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                    "provisioner": "example.com/nfs"}] if self.default_storage_class else []
        api.add("GET", "/apis/storage.k8s.io/v1/storageclasses", object_list("StorageClassList", classes))
        for group, version, plural in CUSTOM_KINDS.values():
            api.add("POST", f"/apis/{group}/{version}/namespaces/{{ns}}/{plural}", echo)
            api.add("DELETE", f"/apis/{group}/{version}/namespaces/{{ns}}/{plural}/{{name}}", status(200, "", "deleted"))
        if self.kind == "Job":
            api.add("GET", "/apis/batch/v1/namespaces/{ns}/jobs/{name}/status", read_job)
        else:
            group, version, plural = CUSTOM_KINDS[self.kind]
            api.add("GET", f"/apis/{group}/{version}/namespaces/{{ns}}/{plural}/{{name}}/status", read_job)
        if self.podgroups:
            api.add("GET", "/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups/{name}/status",
                    *self.podgroups)


def load_observation(path: Path) -> Observation:
    """An observation recorded as JSON (dataclasses.asdict of one, as the driver built it)."""
    data = json.loads(path.read_text())

    def pod_seen(fields: dict[str, Any]) -> PodObservation:
        waiting, terminated = fields.get("waiting"), fields.get("terminated")
        return PodObservation(**fields | {"waiting": Waiting(**waiting) if waiting else None,
                                          "terminated": Terminated(**terminated) if terminated else None})

    group = data.get("podgroup")
    podgroup = PodGroupObservation(**group | {"conditions": tuple(Condition(**c) for c in group.get("conditions", ()))}) \
        if group else None
    return Observation(**data | {"job_conditions": tuple(Condition(**c) for c in data.get("job_conditions", ())),
                                 "pods": tuple(pod_seen(p) for p in data.get("pods", ())),
                                 "log_lines": tuple(data.get("log_lines", ())), "podgroup": podgroup})


def timeless(observation: Observation) -> dict[str, Any]:
    """An observation without its clock readings, which differ from run to run."""
    seen = asdict(observation) | {"elapsed_s": None}
    for seen_pod in seen["pods"]:
        for key in ("unschedulable_since", "image_pull_since"):
            seen_pod[key] = seen_pod[key] is not None
    return seen
