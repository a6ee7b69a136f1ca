"""A smoke-test run as a cluster would show it: the trainer's pods and Job, a scripted cluster the stand-in
API server serves poll by poll, and observations recorded from such runs (tests/data/smoke/)."""
from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from provision.inputs.settings import Settings
from provision.inputs.versions import SMOKE_IMAGE_DEFAULT
from provision.smoke.manifests import CUSTOM_KINDS, RUN_LABEL, SmokeSpec
from provision.smoke.observation import (
    Condition,
    Observation,
    PodGroupObservation,
    PodObservation,
    Terminated,
    Waiting,
)
from provision.smoke.spec import build_spec
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


def spec(**changes: Any) -> SmokeSpec:
    """The spec of a default GPU run in NS (build_spec from the default settings), with these changes."""
    return replace(build_spec(Settings(), "gpu", namespace=NS, image=IMAGE), **changes)


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

    It answers only for what the driver created, as a real API server does: the workload's status under the
    name and in the namespace it was created with (404 otherwise), the run's pods only to a selector that picks
    them, a pod's log only for a pod it lists, the run's PodGroup only under the run's name; creating what
    exists is refused (409). The pods of a step are the run's: they carry the run's label and namespace, whatever
    name the run chose. `existing` are the objects there before the run, by (namespace, kind, name) (a namespace
    by ("", "Namespace", name)): an earlier run's workload is served with its own status; `others` are the pods
    of such a run.

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
    others: list[dict[str, Any]] = field(default_factory=list)
    existing: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    # What the driver created: (namespace or "" for the namespace itself, kind, name).
    created: list[tuple[str, str, str]] = field(default_factory=list)

    def current(self) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
        return self.steps[min(self.step, len(self.steps) - 1)]

    @property
    def run_name(self) -> str | None:
        """The name the driver gave its workload (None before it created one)."""
        return next((name for _, kind, name in self.created if kind == self.kind), None)

    def _created(self, namespace: str, kind: str, name: str) -> bool:
        return (namespace, kind, name) in self.created

    def _exists(self, namespace: str, kind: str, name: str) -> bool:
        return self._created(namespace, kind, name) or (namespace, kind, name) in self.existing

    def run_pods(self, namespace: str) -> list[dict[str, Any]]:
        """The pods in `namespace`: the run's (once its workload exists there), then the others'."""
        name = self.run_name
        ours = []
        if name is not None and self._created(namespace, self.kind, name):
            for template in self.current()[1]:
                pod_json = copy.deepcopy(template)
                pod_json["metadata"]["namespace"] = namespace
                pod_json["metadata"]["labels"] = pod_json["metadata"].get("labels", {}) | {RUN_LABEL: name,
                                                                                          "job-name": name}
                ours.append(pod_json)
        return ours + [p for p in self.others if p["metadata"].get("namespace") == namespace]

    def serve(self, api: FakeApiServer) -> None:
        def create(kind: str) -> Callable[[RecordedRequest], Response]:
            def echo(request: RecordedRequest) -> Response:
                namespace = request.params.get("ns", "")
                name = request.json["metadata"]["name"]
                if kind != "Namespace" and not self._exists("", "Namespace", namespace):
                    return status(404, "NotFound", f'namespaces "{namespace}" not found')
                if self._exists(namespace, kind, name):
                    return status(409, "AlreadyExists", f'{kind.lower()}s "{name}" already exists')
                if request.query_value("dryRun") != "All":
                    self.created.append((namespace, kind, name))
                return Response(201, request.json)
            return echo

        def read_workload(request: RecordedRequest) -> Response | dict[str, Any]:
            namespace, name = request.params["ns"], request.params["name"]
            if (namespace, self.kind, name) in self.existing:
                return self.existing[(namespace, self.kind, name)]
            if not self._created(namespace, self.kind, name):
                return status(404, "NotFound", f'{self.kind} "{name}" not found')
            answer = copy.deepcopy(self.current()[0])
            answer["metadata"] |= {"name": name, "namespace": namespace}
            self.step += 1
            return answer

        def read_log(request: RecordedRequest) -> Response | str:
            listed = {p["metadata"]["name"] for p in self.run_pods(request.params["ns"])}
            if request.params["pod"] not in listed:
                return status(404, "NotFound", f'pods "{request.params["pod"]}" not found')
            return self.current()[2] if request.params["pod"] not in {
                p["metadata"]["name"] for p in self.others} else "another run's log\n"

        def read_podgroup(answers: list[Any]) -> Callable[[RecordedRequest], Any]:
            served = 0

            def answer(request: RecordedRequest) -> Any:
                nonlocal served
                if request.params["name"] != self.run_name:
                    return status(404, "NotFound", f'podgroups "{request.params["name"]}" not found')
                found = answers[min(served, len(answers) - 1)]
                served += 1
                return found
            return answer

        api.add("GET", "/api/v1/nodes", object_list("NodeList", self.nodes))
        api.add("POST", "/api/v1/namespaces", create("Namespace"))
        api.add("POST", "/api/v1/namespaces/{ns}/configmaps", create("ConfigMap"))
        api.add("POST", "/api/v1/namespaces/{ns}/services", create("Service"))
        api.add("POST", "/api/v1/namespaces/{ns}/persistentvolumeclaims", create("PersistentVolumeClaim"))
        api.add("POST", "/apis/batch/v1/namespaces/{ns}/jobs", create("Job"))
        api.add("GET", "/api/v1/namespaces/{ns}/pods",
                lambda request: object_list("PodList", self.run_pods(request.params["ns"])))
        api.add("GET", "/api/v1/namespaces/{ns}/pods/{pod}/log", read_log)
        def delete_namespace(request: RecordedRequest) -> Response:
            namespace = request.params["ns"]
            self.created = [c for c in self.created if c[0] != namespace and c != ("", "Namespace", namespace)]
            return status(200, "", "deleted")

        api.add("DELETE", "/api/v1/namespaces/{ns}", delete_namespace)
        for crd_name in self.crds:
            api.add("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}", crd(crd_name))
        for queue in self.queues:
            api.add("GET", f"/apis/scheduling.volcano.sh/v1beta1/queues/{queue}",
                    {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": queue}})
        classes = [{"metadata": {"name": self.default_storage_class,
                                 "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                    "provisioner": "example.com/nfs"}] if self.default_storage_class else []
        api.add("GET", "/apis/storage.k8s.io/v1/storageclasses", object_list("StorageClassList", classes))
        for kind, (group, version, plural) in CUSTOM_KINDS.items():
            api.add("POST", f"/apis/{group}/{version}/namespaces/{{ns}}/{plural}", create(kind))
            api.add("DELETE", f"/apis/{group}/{version}/namespaces/{{ns}}/{plural}/{{name}}", status(200, "", "deleted"))
        if self.kind == "Job":
            api.add("GET", "/apis/batch/v1/namespaces/{ns}/jobs/{name}/status", read_workload)
        else:
            group, version, plural = CUSTOM_KINDS[self.kind]
            api.add("GET", f"/apis/{group}/{version}/namespaces/{{ns}}/{plural}/{{name}}/status", read_workload)
        if self.podgroups:
            api.add("GET", "/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups/{name}/status",
                    read_podgroup(self.podgroups))


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
