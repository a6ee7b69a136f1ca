"""`smoke-test --serve`: the trained model served by a KServe InferenceService (Standard mode, the custom
predictor trainer/serve.py on the `kserve` package), one picture sent over HTTP through the API server, its class
and score in the verdict, the service removed afterwards. The InferenceService is checked against the `kserve`
package's own models; the driving is tested on recorded API answers (no cluster, no GPU here); the predictor
itself is tested in test_trainer_serve.py."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provision.kube.client import load_api_client
from provision.smoke.serve import (
    CIFAR10_CLASSES,
    inference_service,
    picture,
    predict_path,
    serve_and_ask,
    service_name,
)
from tests.support.apiserver import FakeApiServer, RecordedRequest, Response, object_list, status
from tests.support.kube_objects import pod
from tests.support.smoke_specs import spec
from tests.support.upstream_models import problems

SPEC = spec("cb-smoke-x7k2p", cache="hostpath", keep_results=True)
ISVC = f"/apis/serving.kserve.io/v1beta1/namespaces/{SPEC.namespace}/inferenceservices"
NAME = service_name(SPEC)


@pytest.mark.parametrize("cache", ["hostpath", "pvc"])
def test_the_inference_service_is_one_kserves_models_accept(cache: str) -> None:
    body = inference_service(spec("ns", image="x:1", cache=cache, keep_results=True), "w1",
                             "https://pypi.tuna.tsinghua.edu.cn/simple")
    assert problems(body, "V1beta1InferenceService") == []
    assert body["metadata"]["annotations"] == {"serving.kserve.io/deploymentMode": "Standard"}
    predictor = body["spec"]["predictor"]
    (container,) = predictor["containers"]
    assert "pip install --quiet --disable-pip-version-check kserve==0.21.0 && exec python /opt/trainer/serve.py " \
        "--model /cache/runs/cifar10-smoke/model.pt" in container["command"][2]
    assert {"name": "PIP_INDEX_URL", "value": "https://pypi.tuna.tsinghua.edu.cn/simple"} in container["env"]
    # A hostPath cache holds the model on the node rank 0 ran on; the PVC anywhere.
    assert predictor.get("nodeSelector") == ({"kubernetes.io/hostname": "w1"} if cache == "hostpath" else None)


def test_a_misspelt_field_would_be_caught_by_kserves_models() -> None:
    body = inference_service(SPEC, "w1", None)
    body["spec"]["predictor"]["minReplica"] = 1
    assert problems(body, "V1beta1InferenceService") == [
        ".spec.predictor.minReplica: not a field of V1beta1PredictorSpec"]


class Cluster:
    """Recorded answers of a cluster with KServe: the InferenceService created, Ready on the second look."""

    def __init__(self, api: FakeApiServer, *, ready: list[bool] | None = None,
                 answer: Any = None, pods: list[dict[str, Any]] | None = None) -> None:
        def created(request: RecordedRequest) -> Response:
            return Response(201, request.json)
        states = [{"conditions": [{"type": "Ready", "status": "True" if r else "False",
                                   "reason": "" if r else "PredictorNotReady"}]} for r in (ready or [False, True])]
        api.add("POST", ISVC, created)
        api.add("GET", f"{ISVC}/{NAME}", *[{"metadata": {"name": NAME}, "status": s} for s in states])
        api.add("GET", f"/api/v1/namespaces/{SPEC.namespace}/pods", object_list("PodList", pods or []))
        api.add("POST", "/api/v1/namespaces/{ns}/services/{svc}/proxy/v1/models/cifar10:predict",
                answer if answer is not None else {"predictions": [{"class": "cat", "score": 0.91, "next": []}]})
        api.add("DELETE", f"{ISVC}/{NAME}", {"kind": "Status", "status": "Success"})
        self.api = api

    def serve(self, tmp_path: Path, timeout_s: float = 5.0) -> Any:
        api = load_api_client(self.api.write_kubeconfig(tmp_path / "kubeconfig"))
        return serve_and_ask(api, SPEC, node="w1", pip_index=None, classes=CIFAR10_CLASSES, timeout_s=timeout_s,
                             poll_s=0.01, sleep=time.sleep)


def test_the_model_is_served_asked_about_one_picture_and_the_service_removed(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        served = Cluster(api).serve(tmp_path)
        (created,) = api.requests_to("POST", ISVC)
        (asked,) = api.requests_to("POST", predict_path(SPEC))
        deleted = api.requests_to("DELETE", f"{ISVC}/{NAME}")
    assert served.ok and (served.predicted, served.score) == ("cat", 0.91)
    assert served.line().startswith("served: cat (score 0.91) in ")
    assert created.json["spec"]["predictor"]["nodeSelector"] == {"kubernetes.io/hostname": "w1"}
    assert predict_path(SPEC) == (f"/api/v1/namespaces/{SPEC.namespace}/services/{NAME}-predictor:80/proxy"
                                  "/v1/models/cifar10:predict")
    assert asked.json == {"instances": [picture()]}
    assert len(asked.json["instances"][0]) == 32 and len(asked.json["instances"][0][0]) == 32
    assert len(deleted) == 1


def test_a_predictor_that_cannot_start_is_named_and_the_service_still_removed(tmp_path: Path) -> None:
    crashing = pod(f"{NAME}-predictor-6d9f-abcde", "w1", {"serving.kserve.io/inferenceservice": NAME},
                   namespace=SPEC.namespace, waiting="CrashLoopBackOff", restarts=4)
    with FakeApiServer() as api:
        served = Cluster(api, ready=[False], pods=[crashing]).serve(tmp_path)
        assert api.requests_to("DELETE", f"{ISVC}/{NAME}")
        assert not api.requests_to("POST", predict_path(SPEC))
    assert not served.ok
    assert served.detail.startswith(f"the predictor of {NAME} cannot start: ")
    assert "CrashLoopBackOff" in served.detail and f"-n {SPEC.namespace} " in served.detail


def test_a_service_never_ready_ends_at_the_deadline(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        served = Cluster(api, ready=[False]).serve(tmp_path, timeout_s=0.2)
    assert not served.ok and f"{NAME} was not Ready in 0s (PredictorNotReady)" in served.detail


@pytest.mark.parametrize("answer", [{"predictions": []}, {"predictions": [{"class": "spaceship", "score": 0.5}]},
                                    {"predictions": [{"class": "cat"}]}, ["cat"]])
def test_an_answer_without_a_class_of_the_model_and_a_score_fails(tmp_path: Path, answer: Any) -> None:
    with FakeApiServer() as api:
        served = Cluster(api, answer=answer).serve(tmp_path)
    assert not served.ok and "answered without a class of the model and a score" in served.detail


def test_a_cluster_without_kserve_is_told_how_to_install_it(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        Cluster(api)
        api.add("POST", ISVC, status(404, "NotFound", "the server could not find the requested resource"))
        served = Cluster.serve(type("C", (), {"api": api})(), tmp_path)  # type: ignore[arg-type]
    assert not served.ok and served.detail.endswith("`bootstrap addons install kserve`")


# Whatever KServe and the predictor answer (JSON of any shape, an HTTP error, text), --serve ends in its verdict line:
# served, or why not; never a Python exception.
JSON = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
STATUSES = st.one_of(JSON, st.fixed_dictionaries({"status": st.fixed_dictionaries({"conditions": st.lists(
    st.fixed_dictionaries({"type": st.just("Ready"), "status": st.sampled_from(["True", "False"])}) | JSON,
    max_size=2)}) | JSON}))
ANSWERS = st.one_of(JSON, st.builds(lambda code: Response(code, {"error": "no"}), st.sampled_from([400, 500, 503])),
                    st.builds(lambda text: Response(200, text), st.text(max_size=20)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(states=st.lists(STATUSES, min_size=1, max_size=3), answer=ANSWERS)
def test_any_answer_of_kserve_or_the_predictor_ends_in_the_verdicts_line(tmp_path: Path, states: list[Any],
                                                                          answer: Any) -> None:
    with FakeApiServer() as api:
        cluster = Cluster(api, answer=answer)
        api.add("GET", f"{ISVC}/{NAME}", *states)
        served = cluster.serve(tmp_path, timeout_s=0.05)
        assert api.requests_to("DELETE", f"{ISVC}/{NAME}")
    assert served.line().startswith("served: ")
    assert served.ok == (served.detail == "")
