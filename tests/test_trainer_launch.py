"""The pipeline's train step (trainer/launch.py): it creates the PyTorchJob it was handed with the run's PVC named
in it, follows the Training Operator's conditions to the end, prints the master's report, and exits 0 only when
the job Succeeded. Driven against the stand-in API server, as the step's pod would reach the real one."""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

import pytest

from provision.inputs.settings import parse_settings
from provision.resources import TRAINER_DIR
from provision.smoke.pipeline import CLAIM_PLACEHOLDER, RUN_NAME, pytorchjob
from provision.smoke.spec import build_spec
from tests.support.apiserver import FakeApiServer, RecordedRequest, Response, object_list, status
from tests.support.kube_objects import pod

sys.path.insert(0, str(TRAINER_DIR))
import launch  # the trainer's own modules, as the step's pod imports them
from kube_api import Api

JOB = pytorchjob(replace(build_spec(parse_settings({}), "gpu", namespace="kubeflow"), name=RUN_NAME))
JOBS = "/apis/kubeflow.org/v1/namespaces/kubeflow/pytorchjobs"
REPORT = json.dumps({"test_accuracy": 0.9412, "epochs": 10})


def job_with(condition: str | None, message: str = "") -> dict[str, Any]:
    conditions = [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]
    if condition:
        conditions.append({"type": condition, "status": "True", "message": message})
    return JOB | {"status": {"conditions": conditions}}


def serve(api: FakeApiServer, *states: dict[str, Any], created: Any = None) -> None:
    def accept(request: RecordedRequest) -> Response:
        return Response(201, request.json)
    api.add("POST", JOBS, created or accept)
    api.add("GET", f"{JOBS}/{RUN_NAME}", *states)
    api.add("GET", "/api/v1/namespaces/kubeflow/pods", object_list("PodList", [pod(
        f"{RUN_NAME}-master-0", "w1", {"training.kubeflow.org/job-name": RUN_NAME,
                                        "training.kubeflow.org/replica-type": "master"}, namespace="kubeflow",
        phase="Succeeded", terminated={"exitCode": 0, "message": REPORT})]))


def test_the_job_is_created_on_the_runs_pvc_followed_and_its_report_printed(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeApiServer() as api:
        serve(api, job_with(None), job_with("Succeeded"))
        code = launch.run(Api(api.url), launch.with_claim(json.loads(json.dumps(JOB)), "pvc-7f3a"), timeout_s=60,
                          poll_s=0)
        (created,) = api.requests_to("POST", JOBS)
    assert code == 0
    volumes = created.json["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v]
    assert claims == ["pvc-7f3a"] and CLAIM_PLACEHOLDER not in json.dumps(created.json)
    out = capsys.readouterr().out
    assert REPORT in out and out.rstrip().endswith(f"PyTorchJob {RUN_NAME} succeeded")


def test_a_failed_job_fails_the_step_with_the_operators_message(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeApiServer() as api:
        serve(api, job_with("Failed", "PyTorchJob cifar10-smoke-pipeline is failed because 1 Master replica(s) failed."))
        code = launch.run(Api(api.url), json.loads(json.dumps(JOB)), timeout_s=60, poll_s=0)
    assert code == 1
    assert "1 Master replica(s) failed" in capsys.readouterr().err


def test_a_refused_job_and_a_job_that_never_ends_fail_the_step(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeApiServer() as api:
        serve(api, job_with(None), created=status(422, "Invalid", "spec.pytorchReplicaSpecs: Required value"))
        assert launch.run(Api(api.url), json.loads(json.dumps(JOB)), timeout_s=60, poll_s=0) == 1
        assert "HTTP 422" in capsys.readouterr().err
    with FakeApiServer() as api:
        serve(api, job_with(None))
        assert launch.run(Api(api.url), json.loads(json.dumps(JOB)), timeout_s=0, poll_s=0) == 1
        assert "did not finish in 0s" in capsys.readouterr().err
