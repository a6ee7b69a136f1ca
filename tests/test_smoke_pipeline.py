"""`smoke-test --pipeline`: the seeds' story as a Kubeflow pipeline (prepare data, train as a PyTorchJob, evaluate,
and with KServe deploy and ask once), written with the kfp SDK and compiled by its compiler, the run built with
kfp's own models and read back as the API server reads it, the PyTorchJob checked with kubeflow-training's models,
submitted through the API server, followed to the end, each step's outcome and time in the verdict. Every other
ending is a verdict too, never a traceback. Driven on recorded API answers: no cluster here."""
from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provision.inputs.settings import parse_settings
from provision.resources import TRAINER_DIR
from provision.smoke.pipeline import (
    CLAIM_PLACEHOLDER,
    RUN_NAME,
    RUNS_PATH,
    STEPS,
    pytorchjob,
    run_body,
    run_pipeline_smoke_test,
)
from provision.smoke.spec import build_spec
from tests.support.apiserver import FakeApiServer, RecordedRequest, Response, object_list, status
from tests.support.kube_objects import crd, node, pod
from tests.support.strict_models import swagger_unknown_fields

pytest.importorskip("kfp", reason="the pipeline is compiled with the kfp SDK (the pipelines extra)")
import kfp_server_api
from kfp.pipeline_spec import pipeline_spec_pb2

SPEC = replace(build_spec(parse_settings({}), "gpu", namespace="kubeflow"), name=RUN_NAME, cache="pvc")


def as_the_api_server_reads_it(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pipeline spec, platform spec) of a v2beta1 Run body, read as Kubeflow Pipelines 2.17's API server reads it.

    The body is a V2beta1Run (kfp_server_api's model of the API: a field it does not name is one the server's
    protobuf refuses, HTTP 400); its `pipeline_spec` is either the IR itself or, with platform settings, an object
    holding `pipeline_spec` and `platform_spec` (backend/src/apiserver/server/api_util.go,
    pipelineSpecStructToYamlString). Both are parsed strictly by the IR's own protobuf messages."""
    fields = set(kfp_server_api.V2beta1Run.attribute_map.values())
    assert set(body) <= fields, f"not fields of a v2beta1 Run: {sorted(set(body) - fields)}"
    spec = body["pipeline_spec"]
    pipeline, platform = (spec["pipeline_spec"], spec.get("platform_spec", {})) if "pipeline_spec" in spec \
        else (spec, {})
    json_format.ParseDict(pipeline, pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False)
    json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec(), ignore_unknown_fields=False)
    return pipeline, platform


def compiled(deploy: bool = True) -> dict[str, Any]:
    pipeline, platform = as_the_api_server_reads_it(run_body(SPEC, deploy=deploy, cifar10=False))
    return {"pipeline_spec": pipeline, "platform_spec": platform}


def test_the_run_body_is_a_v2beta1_run_the_api_server_reads_whole() -> None:
    body = run_body(SPEC, deploy=True, cifar10=False)
    # A platform spec beside the pipeline spec at the top is an unknown field of the Run: HTTP 400.
    assert "platform_spec" not in body and body["display_name"].startswith(RUN_NAME)
    _, platform = as_the_api_server_reads_it(body)
    # The Kubernetes settings (the trainer's ConfigMap, the PVC) reach the server; dropped, the steps run bare.
    assert platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    # The SDK's own round trip of the model: what the client would deserialise is what was sent.
    assert kfp_server_api.ApiClient().sanitize_for_serialization(kfp_server_api.V2beta1Run(**body)) == body


def executor_args(body: dict[str, Any], step: str) -> list[str]:
    return body["pipeline_spec"]["deploymentSpec"]["executors"][step]["container"]["args"]


def test_the_seeds_story_runs_in_order_data_train_evaluate_deploy() -> None:
    body = compiled()
    tasks = body["pipeline_spec"]["root"]["dag"]["tasks"]
    assert {t["taskInfo"]["name"] for t in tasks.values()} >= {"prepare-data", "train", "evaluate", "deploy"}
    assert "prepare-data" in tasks["train"]["dependentTasks"]
    assert "train" in tasks["evaluate"]["dependentTasks"]
    assert "evaluate" in tasks["deploy-model"]["dependentTasks"]
    # Every step is given the PVC the pipeline made (the train and deploy steps by name, for their objects).
    assert tasks["train"]["inputs"]["parameters"]["claim"]["taskOutputParameter"]["producerTask"] == "createpvc"


def test_training_is_a_pytorchjob_the_training_operator_models_accept() -> None:
    from kubeflow.training.api_client import ApiClient
    body = compiled()
    args = executor_args(body, "exec-train")
    job = json.loads(args[args.index("--job") + 1])
    assert job == pytorchjob(SPEC)
    assert swagger_unknown_fields("KubeflowOrgV1PyTorchJob", job, "PyTorchJob") == []
    built = ApiClient()._ApiClient__deserialize(job, "KubeflowOrgV1PyTorchJob")  # type: ignore[attr-defined]
    (master,) = built.spec.pytorch_replica_specs.values()
    container = master.template.spec.containers[0]
    # One GPU, the data prepare-data left on the PVC (neither generated nor fetched again), the model kept there.
    assert container.resources.limits["nvidia.com/gpu"] == "1"
    assert "--data-dir /cache/cifar10" in container.args[0] and "--synthetic" not in container.args[0]
    assert f"/cache/runs/{RUN_NAME}" in container.args[0]
    claims = [v.persistent_volume_claim.claim_name for v in master.template.spec.volumes if v.persistent_volume_claim]
    assert claims == [CLAIM_PLACEHOLDER]
    assert args[args.index("--timeout") + 1] == str(SPEC.deadline_s)


def test_every_step_mounts_the_trainer_and_the_data_steps_the_pvc() -> None:
    body = compiled()
    executors = body["pipeline_spec"]["deploymentSpec"]["executors"]
    mounted = body["platform_spec"]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for step in ("exec-prepare-data", "exec-train", "exec-evaluate", "exec-deploy-model"):
        assert mounted[step]["configMapAsVolume"][0]["configMapName"] == f"{RUN_NAME}-trainer", step
        assert executors[step]["container"]["image"] == SPEC.image
    for step in ("exec-prepare-data", "exec-evaluate"):
        assert mounted[step]["pvcMount"][0]["mountPath"] == "/cache", step
    # The launcher itself asks for no GPU: the PyTorchJob's pod does.
    assert "accelerator" not in (executors["exec-train"]["container"].get("resources") or {})
    assert {"exec-createpvc", "exec-deletepvc"} <= set(executors)


def test_without_kserve_there_is_no_deploy_step() -> None:
    tasks = compiled(deploy=False)["pipeline_spec"]["root"]["dag"]["tasks"]
    assert "deploy-model" not in tasks and "evaluate" in tasks


# --- submitted and followed --------------------------------------------------------------------------------------

TIMES = {"prepare-data": ("2026-11-28T10:00:00Z", "2026-11-28T10:00:12Z"),
         "train": ("2026-11-28T10:00:13Z", "2026-11-28T10:01:48Z"),
         "evaluate": ("2026-11-28T10:01:50Z", "2026-11-28T10:01:58Z"),
         "deploy": ("2026-11-28T10:02:00Z", "2026-11-28T10:02:41Z")}


def run_state(state: str, steps: dict[str, str], error: str | None = None) -> dict[str, Any]:
    details = []
    for name, s in steps.items():
        task: dict[str, Any] = {"display_name": name, "state": s, "start_time": TIMES[name][0]}
        if s in ("SUCCEEDED", "FAILED"):
            task["end_time"] = TIMES[name][1]
        if error and s == "FAILED":
            task["error"] = {"message": error}
        details.append(task)
    return {"run_id": "r-42", "state": state, "run_details": {"task_details": details}}


METRICS = {"test_accuracy": 0.9412, "inference_accuracy": 0.9398, "images_per_s": 98765.4, "epoch_time_s": 0.51,
           "train_time_s": 5.1, "epochs": 10, "dataset": "synthetic", "device": "NVIDIA H100 80GB HBM3",
           "device_type": "cuda", "gpu_count": 1, "world_size": 1, "nodes": 1, "torch_version": "2.13.0",
           "cuda_version": "13.0"}


def master(accuracy: float = 0.9412) -> dict[str, Any]:
    return pod(f"{RUN_NAME}-master-0", "w1", {"training.kubeflow.org/job-name": RUN_NAME,
                                               "training.kubeflow.org/replica-type": "master"},
               namespace="kubeflow", phase="Succeeded", container="pytorch",
               terminated={"exitCode": 0, "reason": "Completed", "message": json.dumps(METRICS | {
                   "test_accuracy": accuracy})})


class Pipelines:
    """Recorded answers of a cluster running Kubeflow Pipelines, the Training Operator (and KServe): the run goes
    RUNNING, then ends."""

    def __init__(self, api: FakeApiServer, *answers: Any, accuracy: float = 0.9412) -> None:
        def created(request: RecordedRequest) -> Response:
            return Response(201, request.json)
        api.add("GET", "/api/v1/namespaces/kubeflow/services/ml-pipeline", {"metadata": {"name": "ml-pipeline"}})
        api.add("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org",
                crd("pytorchjobs.kubeflow.org"))
        api.add("GET", "/api/v1/nodes", object_list("NodeList", [node("w1", gpus=1)]))
        api.add("POST", "/api/v1/namespaces/kubeflow/configmaps", created)
        api.add("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/kubeflow/roles", created)
        api.add("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/kubeflow/rolebindings", created)
        api.add("POST", RUNS_PATH, {"run_id": "r-42", "state": "PENDING"})
        api.add("GET", f"{RUNS_PATH}/r-42", *answers)
        api.add("GET", "/api/v1/namespaces/kubeflow/pods", object_list("PodList", [master(accuracy)]))
        api.add("DELETE", f"/apis/kubeflow.org/v1/namespaces/kubeflow/pytorchjobs/{RUN_NAME}",
                {"kind": "Status", "status": "Success"})
        for kind in ("configmaps", "roles", "rolebindings"):
            prefix = "/api/v1" if kind == "configmaps" else "/apis/rbac.authorization.k8s.io/v1"
            api.add("DELETE", f"{prefix}/namespaces/kubeflow/{kind}/{{name}}", {"kind": "Status", "status": "Success"})
        self.api = api

    def run(self, tmp_path: Path, deploy: bool = True) -> Any:
        return run_pipeline_smoke_test(self.api.write_kubeconfig(tmp_path / "kubeconfig"), parse_settings({}),
                                       deploy=deploy, poll_s=0.01, sleep=time.sleep)


ALL_DONE = {"prepare-data": "SUCCEEDED", "train": "SUCCEEDED", "evaluate": "SUCCEEDED", "deploy": "SUCCEEDED"}


def test_the_run_is_submitted_followed_to_the_end_and_each_steps_outcome_and_time_reported(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        verdict = Pipelines(api, run_state("RUNNING", {"prepare-data": "SUCCEEDED", "train": "RUNNING"}),
                            run_state("SUCCEEDED", ALL_DONE)).run(tmp_path)
        (submitted,) = api.requests_to("POST", RUNS_PATH)
        (config_map,) = api.requests_to("POST", "/api/v1/namespaces/kubeflow/configmaps")
        (role,) = api.requests_to("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/kubeflow/roles")
        (asked,) = api.requests_to("GET", "/api/v1/namespaces/kubeflow/pods")
        removed = {r.path.rsplit("/", 2)[-2] for r in api.requests_to("DELETE")}
    assert verdict.passed and verdict.exit_code == 0, verdict.summary
    assert verdict.summary.startswith(
        "PASS: pipeline run r-42 succeeded (prepare-data succeeded in 12s, train succeeded in 95s, evaluate "
        "succeeded in 8s, deploy succeeded in 41s); test accuracy 94.12% in the PyTorchJob")
    assert [(s["name"], s["seconds"]) for s in verdict.pipeline_steps] == [
        ("prepare-data", 12.0), ("train", 95.0), ("evaluate", 8.0), ("deploy", 41.0)]
    assert verdict.metrics is not None and verdict.metrics.test_accuracy == 0.9412
    assert submitted.json["display_name"].startswith(RUN_NAME)
    pipeline, _ = as_the_api_server_reads_it(submitted.json)
    assert "deploy-model" in pipeline["root"]["dag"]["tasks"]
    assert set(config_map.json["data"]) == {p.name for p in TRAINER_DIR.glob("*.py")} >= {"launch.py", "deploy.py"}
    assert {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["create", "get", "delete"]} in \
        role.json["rules"]
    assert {"apiGroups": ["serving.kserve.io"], "resources": ["inferenceservices"],
            "verbs": ["create", "get", "delete"]} in role.json["rules"]
    assert asked.query_value("labelSelector") == (f"training.kubeflow.org/job-name={RUN_NAME},"
                                                  "training.kubeflow.org/replica-type=master")
    # What was made for the run is gone after it, the PyTorchJob too.
    assert removed == {"configmaps", "roles", "rolebindings", "pytorchjobs"}


def test_a_failed_step_fails_the_verdict_naming_the_step_and_its_error(tmp_path: Path) -> None:
    failed_run = run_state("FAILED", {"prepare-data": "SUCCEEDED", "train": "FAILED"},
                           error="container exited with 1: CUDA error: no kernel image is available")
    with FakeApiServer() as api:
        verdict = Pipelines(api, failed_run).run(tmp_path, deploy=False)
        assert api.requests_to("DELETE", "/api/v1/namespaces/kubeflow/configmaps/")
        (role,) = api.requests_to("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/kubeflow/roles")
    assert not verdict.passed and verdict.cause is not None and verdict.cause.value == "pipeline-failed"
    assert "pipeline run r-42: step train failed: container exited with 1: CUDA error" in verdict.summary
    assert verdict.pipeline_steps[1] == {"name": "train", "state": "FAILED", "seconds": 95.0,
                                         "error": "container exited with 1: CUDA error: no kernel image is available"}
    # Without KServe the steps' account gets nothing of it.
    assert "serving.kserve.io" not in json.dumps(role.json["rules"])


def test_a_pytorchjob_under_the_accuracy_floor_fails_the_pipeline(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        verdict = Pipelines(api, run_state("SUCCEEDED", ALL_DONE), accuracy=0.89999).run(tmp_path)
    assert not verdict.passed and verdict.cause is not None and verdict.cause.value == "low-accuracy"
    assert "the PyTorchJob's test accuracy 0.8999 is under the threshold 0.9" in verdict.summary


def test_a_cluster_without_pipelines_is_told_how_to_install_them(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        api.add("GET", "/api/v1/namespaces/kubeflow/services/ml-pipeline", status(404, "NotFound", "not found"))
        verdict = run_pipeline_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), parse_settings({}))
        assert not api.requests_to("POST")
    assert not verdict.passed and verdict.summary.endswith("`bootstrap addons install pipelines`")


def test_a_cluster_without_the_training_operator_is_told_how_to_install_it(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        api.add("GET", "/api/v1/namespaces/kubeflow/services/ml-pipeline", {"metadata": {"name": "ml-pipeline"}})
        verdict = run_pipeline_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), parse_settings({}))
        assert not api.requests_to("POST")
    assert verdict.cause is not None and verdict.cause.value == "addon-missing"
    assert verdict.summary.endswith("`bootstrap addons install training_operator`")


def test_an_api_server_that_does_not_answer_is_an_api_error_verdict(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    # The server is gone: every connection is refused.
    verdict = run_pipeline_smoke_test(kubeconfig, parse_settings({}))
    assert not verdict.passed and verdict.summary.startswith("FAIL (api-error): cannot ask the cluster what it offers")


# Whatever the Pipelines API answers, the command ends in a verdict: PASS only for a run that succeeded, else a FAIL
# with a cause, never a Python exception. (Answers: HTTP errors, non-JSON, JSON of any shape, runs with odd fields.)
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
RUNS = st.fixed_dictionaries({"run_id": st.just("r-42") | JSON, "state": st.sampled_from(["SUCCEEDED", "FAILED", "RUNNING"])
                              | JSON},
                             optional={"run_details": st.fixed_dictionaries({}, optional={"task_details": st.lists(
                                 st.fixed_dictionaries({}, optional={"display_name": st.sampled_from(STEPS)
                                                                     | JSON, "state": JSON, "start_time": JSON,
                                                                     "end_time": JSON, "error": JSON}), max_size=4)
                                 | JSON}) | JSON})
ANSWERS = st.one_of(RUNS, JSON, st.builds(lambda code: Response(code, {"code": code, "message": "refused"}),
                                          st.sampled_from([400, 403, 404, 500, 502, 503])),
                    st.builds(lambda text: Response(200, text), st.text(max_size=20)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(created=ANSWERS, followed=ANSWERS)
def test_any_answer_of_the_pipelines_api_ends_in_a_verdict(tmp_path: Path, created: Any, followed: Any) -> None:
    # Time is the test's: each poll's sleep moves its clock, so a run that stays RUNNING meets the limit at once.
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with FakeApiServer() as api:
        Pipelines(api, followed)
        api.add("POST", RUNS_PATH, created)
        verdict = run_pipeline_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), parse_settings({}),
                                          deploy=True, timeout_s=60, poll_s=5, sleep=sleep, clock=lambda: now[0])
        # Whatever happened, what the run made was removed.
        assert api.requests_to("DELETE", "/api/v1/namespaces/kubeflow/configmaps/")
    assert verdict.summary.startswith("PASS: " if verdict.passed else "FAIL (")
    assert (verdict.cause is None) == verdict.passed
    if verdict.passed:
        assert isinstance(created, dict) and created.get("run_id") == "r-42"
        assert isinstance(followed, dict) and followed.get("state") == "SUCCEEDED"
