"""`smoke-test --serve`: the model the run just trained, served by a KServe InferenceService and asked about one
picture over HTTP; its class and score go into the verdict, and the service is removed afterwards.

The predictor is trainer/serve.py, a custom predictor on the `kserve` package, run in the smoke test's own image
(already on the node: nothing to build or push) with the package installed from the pip index the settings name.
It reads model.pt where the training run left it for `--save` (the run's directory in the cache: a hostPath on
the node rank 0 ran on, or the PVC), so no storage initializer and no object store are involved. KServe's
Standard mode (the former RawDeployment) makes it a Deployment and a Service `<name>-predictor`: the picture is
sent through the API server's service proxy, so the operator's machine needs no route into the cluster.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.kube.verify import Expectations, pod_problem
from provision.smoke.manifests import CACHE_MOUNT, TRAINER_MOUNT, SmokeSpec

GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
MODEL_NAME = "cifar10"
PREDICTOR_PORT = 8080
# The kserve package the predictor imports: the release the kserve add-on pins (its SDK on PyPI).
KSERVE_PACKAGE = "kserve==0.21.0"
DEPLOYMENT_MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
ISVC_LABEL = "serving.kserve.io/inferenceservice"
REQUEST_TIMEOUT_S = 30
# The classes a model trained by trainer/train.py names (trainer/cifar_data.py's CLASSES; a test holds them equal).
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


@dataclass(frozen=True)
class Served:
    """What the InferenceService answered about one picture."""

    ok: bool
    # The predicted class and the model's score for it (softmax), and how long the answer took.
    predicted: str = ""
    score: float = 0.0
    latency_s: float = 0.0
    # Seconds from creating the InferenceService to its Ready condition.
    ready_s: float = 0.0
    # Why it did not answer, with what to do (empty when ok).
    detail: str = ""
    url: str = ""

    def line(self) -> str:
        if not self.ok:
            return f"served: no answer: {self.detail}"
        return (f"served: {self.predicted} (score {self.score:.2f}) in {self.latency_s * 1000:.0f} ms, "
                f"Ready after {self.ready_s:.0f}s")


def service_name(spec: SmokeSpec) -> str:
    return f"{spec.name}-serve"


def inference_service(spec: SmokeSpec, node: str | None, pip_index: str | None) -> dict[str, Any]:
    """The InferenceService of the trained model: Standard mode, one replica, the predictor on the CPU of the
    node whose cache holds the model (a hostPath cache) or anywhere (the PVC)."""
    name = service_name(spec)
    install = f"pip install --quiet --disable-pip-version-check {KSERVE_PACKAGE}"
    serve = (f"exec python {TRAINER_MOUNT}/serve.py --model {spec.results_dir}/model.pt --name {MODEL_NAME} "
             f"--http-port {PREDICTOR_PORT}")
    env = [{"name": "PIP_INDEX_URL", "value": pip_index}] if pip_index else []
    volumes: list[dict[str, Any]] = [{"name": "trainer", "configMap": {"name": f"{spec.name}-trainer"}}]
    if spec.cache == "pvc":
        volumes.append({"name": "cache", "persistentVolumeClaim": {"claimName": spec.cache_claim}})
    else:
        volumes.append({"name": "cache", "hostPath": {"path": spec.cache_path, "type": "Directory"}})
    predictor: dict[str, Any] = {
        "minReplicas": 1, "maxReplicas": 1,
        "tolerations": [{"operator": "Exists"}],
        "containers": [{
            "name": "kserve-container", "image": spec.image, "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", f"{install} && {serve}"], "env": env,
            "ports": [{"containerPort": PREDICTOR_PORT, "protocol": "TCP"}],
            "readinessProbe": {"httpGet": {"path": f"/v1/models/{MODEL_NAME}", "port": PREDICTOR_PORT},
                               "periodSeconds": 2, "failureThreshold": 300},
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
            "volumeMounts": [{"name": "trainer", "mountPath": TRAINER_MOUNT, "readOnly": True},
                             {"name": "cache", "mountPath": CACHE_MOUNT, "readOnly": True}],
        }],
        "volumes": volumes,
    }
    if node and spec.cache != "pvc":
        predictor["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": spec.namespace, "labels": dict(spec.labels),
                         "annotations": {DEPLOYMENT_MODE_ANNOTATION: "Standard"}},
            "spec": {"predictor": predictor}}


def picture() -> list[list[list[int]]]:
    """One 32 x 32 RGB picture (rows, columns, channels): a smooth gradient, the same on every run. It is not a
    CIFAR-10 image: the check is that the service answers with one of the model's classes and a score."""
    return [[[(8 * x) % 256, (8 * y) % 256, (4 * (x + y)) % 256] for x in range(32)] for y in range(32)]


def _ready(status: object) -> tuple[bool, str]:
    """(Ready, why not) from an InferenceService's status, whatever shape the answer has."""
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition.get("status") == "True", str(condition.get("message") or condition.get("reason") or "")
    return False, ""


def _predictor_problem(api: client.ApiClient, spec: SmokeSpec) -> str | None:
    pods = client.CoreV1Api(api).list_namespaced_pod(spec.namespace, label_selector=f"{ISVC_LABEL}="
                                                     f"{service_name(spec)}", _request_timeout=REQUEST_TIMEOUT_S)
    for pod in pods.items:
        problem = pod_problem(pod, Expectations(nodes=()))
        if problem and problem.settled:
            return f"{problem.what}: {problem.cause}".replace(" -n kube-system ", f" -n {spec.namespace} ")
    return None


def predict_path(spec: SmokeSpec) -> str:
    """The v1 protocol's predict URL of the predictor's Service, through the API server's service proxy."""
    return (f"/api/v1/namespaces/{spec.namespace}/services/{service_name(spec)}-predictor:80/proxy"
            f"/v1/models/{MODEL_NAME}:predict")


def ask(api: client.ApiClient, spec: SmokeSpec) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    response = api.call_api(predict_path(spec), "POST", header_params={"Content-Type": "application/json",
                                                                       "Accept": "application/json"},
                            body={"instances": [picture()]}, auth_settings=["BearerToken"],
                            _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)
    body = response[0].data if isinstance(response, tuple) else response.data
    return json.loads(body), time.monotonic() - started


def serve_and_ask(api: client.ApiClient, spec: SmokeSpec, *, node: str | None, pip_index: str | None,
                  classes: tuple[str, ...] | None, timeout_s: float, poll_s: float = 2.0,
                  sleep: Callable[[float], None] = time.sleep) -> Served:
    """Create the InferenceService, wait for it to be Ready, send it one picture, remove it."""
    objects = client.CustomObjectsApi(api)
    body = inference_service(spec, node, pip_index)
    name = body["metadata"]["name"]
    started = time.monotonic()
    try:
        objects.create_namespaced_custom_object(GROUP, VERSION, spec.namespace, PLURAL, body,
                                                _request_timeout=REQUEST_TIMEOUT_S)
    except ApiException as exc:
        if exc.status == 404:
            return Served(False, detail="the cluster does not serve InferenceServices: `bootstrap addons install "
                                        "kserve`")
        return Served(False, detail=f"the API server refused the InferenceService: HTTP {exc.status} {exc.reason}")
    try:
        while True:
            current = objects.get_namespaced_custom_object(GROUP, VERSION, spec.namespace, PLURAL, name,
                                                           _request_timeout=REQUEST_TIMEOUT_S)
            status = current.get("status") if isinstance(current, dict) else None
            ready, message = _ready(status)
            if ready:
                break
            problem = _predictor_problem(api, spec)
            if problem:
                return Served(False, detail=f"the predictor of {name} cannot start: {problem}")
            if time.monotonic() - started >= timeout_s:
                return Served(False, detail=f"{name} was not Ready in {timeout_s:.0f}s ({message or 'no reason given'}"
                                            f"): see `kubectl -n {spec.namespace} describe inferenceservice {name}`")
            sleep(poll_s)
        ready_s = time.monotonic() - started
        url = str(status.get("url") or "") if isinstance(status, dict) else ""
        try:
            answer, latency = ask(api, spec)
        except (ApiException, ValueError) as exc:
            reason = f"HTTP {exc.status} {exc.reason}" if isinstance(exc, ApiException) else f"not JSON ({exc})"
            return Served(False, ready_s=ready_s, url=url, detail=f"{name} answered the picture with {reason}")
        predictions = answer.get("predictions") if isinstance(answer, dict) else None
        first = predictions[0] if isinstance(predictions, list) and predictions else None
        if not isinstance(first, dict) or not isinstance(first.get("score"), (int, float)) or \
                not isinstance(first.get("class"), str) or (classes and first["class"] not in classes):
            return Served(False, ready_s=ready_s, url=url,
                          detail=f"{name} answered without a class of the model and a score: {str(answer)[:200]}")
        return Served(True, predicted=first["class"], score=float(first["score"]), latency_s=latency,
                      ready_s=ready_s, url=url)
    finally:
        try:
            objects.delete_namespaced_custom_object(GROUP, VERSION, spec.namespace, PLURAL, name,
                                                    _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if exc.status != 404:
                raise
