"""`smoke-test --pipeline`: the smoke test as a Kubeflow pipeline (prepare data, train, evaluate, and with KServe
deploy), written with the kfp SDK and compiled by its compiler, checked against the pipeline spec's own protobuf
model, submitted to the Pipelines API through the API server, followed to the end, each step reported. Driven on
recorded API answers: no cluster here."""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from provision.inputs.settings import parse_settings
from provision.resources import TRAINER_DIR
from provision.smoke.driver import build_spec
from provision.smoke.pipeline import RUN_NAME, RUNS_PATH, run_body, run_pipeline_smoke_test
from tests.support.apiserver import FakeApiServer, RecordedRequest, Response, object_list, status
from tests.support.kube_objects import node

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


def test_the_compiled_pipeline_is_one_kubeflow_pipelines_reads() -> None:
    body = compiled()
    tasks = body["pipeline_spec"]["root"]["dag"]["tasks"]
    assert {t["taskInfo"]["name"] for t in tasks.values()} >= {"prepare-data", "train", "evaluate", "deploy"}
    # The data and the model go between the steps as artifacts.
    assert tasks["train"]["inputs"]["artifacts"]["dataset"]["taskOutputArtifact"]["producerTask"] == "prepare-data"
    assert tasks["evaluate"]["inputs"]["artifacts"]["model"]["taskOutputArtifact"]["producerTask"] == "train"


def test_training_asks_for_a_gpu_and_every_step_mounts_the_trainer() -> None:
    body = compiled()
    executors = body["pipeline_spec"]["deploymentSpec"]["executors"]
    assert executors["exec-train"]["container"]["resources"]["accelerator"]["resourceType"] == "nvidia.com/gpu"
    assert executors["exec-train"]["container"]["image"] == SPEC.image
    mounted = body["platform_spec"]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for step in ("exec-prepare-data", "exec-train", "exec-evaluate", "exec-deploy-model"):
        assert mounted[step]["configMapAsVolume"][0]["configMapName"] == f"{RUN_NAME}-trainer", step
    # The model goes on the run's PVC for the predictor, which is removed at the end.
    assert mounted["exec-train"]["pvcMount"][0]["mountPath"] == "/cache"
    assert {"exec-createpvc", "exec-deletepvc"} <= set(executors)


def test_without_kserve_there_is_no_deploy_step() -> None:
    tasks = compiled(deploy=False)["pipeline_spec"]["root"]["dag"]["tasks"]
    assert "deploy-model" not in tasks and "evaluate" in tasks


# --- submitted and followed --------------------------------------------------------------------------------------

def run_state(state: str, steps: dict[str, str], error: str | None = None) -> dict[str, Any]:
    details = [{"display_name": name, "state": s} | ({"error": {"message": error}} if error and s == "FAILED"
                                                       else {}) for name, s in steps.items()]
    return {"run_id": "r-42", "state": state, "run_details": {"task_details": details}}


class Pipelines:
    """Recorded answers of a cluster running Kubeflow Pipelines (and KServe): the run goes RUNNING, then ends."""

    def __init__(self, api: FakeApiServer, *answers: dict[str, Any]) -> None:
        def created(request: RecordedRequest) -> Response:
            return Response(201, request.json)
        api.add("GET", "/api/v1/namespaces/kubeflow/services/ml-pipeline", {"metadata": {"name": "ml-pipeline"}})
        api.add("GET", "/api/v1/nodes", object_list("NodeList", [node("w1", gpus=1)]))
        api.add("POST", "/api/v1/namespaces/kubeflow/configmaps", created)
        api.add("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/kubeflow/roles", created)
        api.add("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/kubeflow/rolebindings", created)
        api.add("POST", RUNS_PATH, {"run_id": "r-42", "state": "PENDING"})
        api.add("GET", f"{RUNS_PATH}/r-42", *answers)
        for kind in ("configmaps", "roles", "rolebindings"):
            prefix = "/api/v1" if kind == "configmaps" else "/apis/rbac.authorization.k8s.io/v1"
            api.add("DELETE", f"{prefix}/namespaces/kubeflow/{kind}/{{name}}", {"kind": "Status", "status": "Success"})
        self.api = api

    def run(self, tmp_path: Path, deploy: bool = True) -> Any:
        return run_pipeline_smoke_test(self.api.write_kubeconfig(tmp_path / "kubeconfig"), parse_settings({}),
                                       deploy=deploy, poll_s=0.01, sleep=time.sleep)


ALL_DONE = {"prepare-data": "SUCCEEDED", "train": "SUCCEEDED", "evaluate": "SUCCEEDED", "deploy": "SUCCEEDED"}


def test_the_run_is_submitted_followed_to_the_end_and_its_steps_reported(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        verdict = Pipelines(api, run_state("RUNNING", {"prepare-data": "SUCCEEDED", "train": "RUNNING"}),
                            run_state("SUCCEEDED", ALL_DONE)).run(tmp_path)
        (submitted,) = api.requests_to("POST", RUNS_PATH)
        (config_map,) = api.requests_to("POST", "/api/v1/namespaces/kubeflow/configmaps")
        (role,) = api.requests_to("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/kubeflow/roles")
        removed = {r.path.rsplit("/", 2)[-2] for r in api.requests_to("DELETE")}
    assert verdict.passed and verdict.exit_code == 0, verdict.summary
    assert verdict.summary.startswith("PASS: pipeline run r-42 succeeded (prepare-data succeeded, train succeeded, "
                                      "evaluate succeeded, deploy succeeded)")
    assert [s["name"] for s in verdict.pipeline_steps] == ["prepare-data", "train", "evaluate", "deploy"]
    assert submitted.json["display_name"].startswith(RUN_NAME)
    pipeline, _ = as_the_api_server_reads_it(submitted.json)
    assert "deploy-model" in pipeline["root"]["dag"]["tasks"]
    assert set(config_map.json["data"]) == {p.name for p in TRAINER_DIR.glob("*.py")} >= {"deploy.py", "train.py"}
    assert role.json["rules"] == [{"apiGroups": ["serving.kserve.io"], "resources": ["inferenceservices"],
                                   "verbs": ["create", "get", "delete"]}]
    # What was made for the run is gone after it.
    assert removed == {"configmaps", "roles", "rolebindings"}


def test_a_failed_step_fails_the_verdict_naming_the_step_and_its_error(tmp_path: Path) -> None:
    failed_run = run_state("FAILED", {"prepare-data": "SUCCEEDED", "train": "FAILED"},
                           error="container exited with 1: CUDA error: no kernel image is available")
    with FakeApiServer() as api:
        verdict = Pipelines(api, failed_run).run(tmp_path, deploy=False)
        assert api.requests_to("DELETE", "/api/v1/namespaces/kubeflow/configmaps/")
    assert not verdict.passed and verdict.cause is not None and verdict.cause.value == "pipeline-failed"
    assert "pipeline run r-42: step train failed: container exited with 1: CUDA error" in verdict.summary
    assert verdict.pipeline_steps[1] == {"name": "train", "state": "FAILED",
                                         "error": "container exited with 1: CUDA error: no kernel image is available"}


def test_a_cluster_without_pipelines_is_told_how_to_install_them(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        api.add("GET", "/api/v1/namespaces/kubeflow/services/ml-pipeline", status(404, "NotFound", "not found"))
        verdict = run_pipeline_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), parse_settings({}))
        assert not api.requests_to("POST")
    assert not verdict.passed and verdict.summary.endswith("`bootstrap addons install pipelines`")
