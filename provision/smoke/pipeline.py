"""`smoke-test --pipeline`: the seeds' ML story as one Kubeflow pipeline, from data to a prediction.

Four steps, written with the kfp SDK and compiled here, around one PVC the pipeline makes (default StorageClass,
removed by its last step):

- prepare-data: the data set into the PVC (the synthetic set, or the CIFAR-10 archive from the configured mirror);
- train: a Kubeflow PyTorchJob (the Training Operator: the seeds' shape), the very manifest `smoke-test --workload
  pytorchjob` renders (its GPU request and RuntimeClass included), started and followed by trainer/launch.py; the
  model goes to the PVC;
- evaluate: trainer/infer.py on the held-out set and the model;
- with KServe, deploy: trainer/deploy.py serves the model (an InferenceService on the PVC), asks it about one
  picture, prints the answer and removes the service.

The steps run the smoke image with the trainer's source mounted from a ConfigMap (kfp-kubernetes). The run is built
with kfp's own models (kfp_server_api.V2beta1Run), submitted to the Pipelines API (v2beta1, inline) through the API
server's proxy to the `ml-pipeline` Service, followed until it ends, and each step's outcome and time go into the
verdict; the PyTorchJob's master report (the trainer's metrics) is read for it and held to the accuracy floor. The
ConfigMap and a Role letting the pipeline's service account run the PyTorchJob (and the InferenceService) are made
for the run and removed after it, with the PyTorchJob.

Every way it can end is a verdict: the API or the Pipelines API not answering, or answering what is not a run, is
`FAIL (api-error)`; an add-on missing, `FAIL (addon-missing)`; a step that failed, `FAIL (pipeline-failed)`.
"""
# No `from __future__ import annotations`: kfp reads the components' annotations as types at run time.

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.errors import BootstrapError
from provision.inputs.addons import ADDONS
from provision.inputs.settings import Settings
from provision.inputs.sources import resolve_sources
from provision.kube.client import load_api_client
from provision.smoke.choices import NEEDS
from provision.smoke.manifests import (
    CACHE_MOUNT,
    CUSTOM_KINDS,
    DATA_DIR,
    TRAINER_MOUNT,
    SmokeSpec,
    read_trainer_files,
    render,
)
from provision.smoke.observation import Mode, Observation
from provision.smoke.serve import inference_service
from provision.smoke.verdict import FailureKind, TrainerMetrics, Verdict, accuracy_text, failed

NAMESPACE = ADDONS["pipelines"].namespace
API_SERVICE = "ml-pipeline:8888"
RUNS_PATH = f"/api/v1/namespaces/{NAMESPACE}/services/{API_SERVICE}/proxy/apis/v2beta1/runs"
# The service account standalone Pipelines runs steps as (its manifests' pipeline-runner).
RUNNER_ACCOUNT = "pipeline-runner"
RUN_NAME = "cifar10-smoke-pipeline"
STEPS = ("prepare-data", "train", "evaluate", "deploy")
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELED", "SKIPPED"}
REQUEST_TIMEOUT_S = 30
# The claim the rendered PyTorchJob names until the train step puts the run's PVC there.
CLAIM_PLACEHOLDER = "the-runs-pvc"
PYTORCHJOB_CRD, TRAINING_OPERATOR = NEEDS["pytorchjob"]
# The Training Operator's labels on a job's pods (kubeflow/trainer release-1.9).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"


def pytorchjob(spec: SmokeSpec) -> dict[str, Any]:
    """The train step's PyTorchJob: the smoke test's own manifest for one node, reading the data prepare-data left
    in the PVC and leaving the model there (results_dir) for evaluate and deploy."""
    one = replace(spec, workload="pytorchjob", scheduler="default", nodes=1, cache="pvc",
                  cache_claim=CLAIM_PLACEHOLDER, keep_results=True, data_prepared=True)
    return next(obj for obj in render(one) if obj["kind"] == "PyTorchJob")


def pipeline_spec(spec: SmokeSpec, *, deploy: bool, cifar10: bool) -> Callable[..., Any]:
    """The pipeline function (kfp's @dsl.pipeline) for this run's image, epochs, data and device."""
    from kfp import dsl, kubernetes

    image, config_map = spec.image, f"{spec.name}-trainer"
    job = json.dumps(pytorchjob(spec))
    model = f"{spec.results_dir}/model.pt"

    @dsl.container_component
    def prepare_data() -> dsl.ContainerSpec:
        fetch = (f"cifar_data.locate(root, download_missing=True, url={spec.cifar10_url!r}, md5={spec.cifar10_md5!r})"
                 if cifar10 else "cifar_data.write_synthetic(root, train_size=10000, test_size=2000)")
        script = (f"import pathlib, sys; sys.path.insert(0, {TRAINER_MOUNT!r}); import cifar_data; "
                  f"root = pathlib.Path(sys.argv[1]); root.mkdir(parents=True, exist_ok=True); "
                  f"print('data in', {fetch}, flush=True)")
        return dsl.ContainerSpec(image=image, command=["python", "-c", script], args=[DATA_DIR])

    @dsl.container_component
    def train(claim: str) -> dsl.ContainerSpec:
        return dsl.ContainerSpec(image=image, command=["python", f"{TRAINER_MOUNT}/launch.py"],
                                 args=["--job", job, "--claim", claim, "--timeout", str(spec.deadline_s)])

    @dsl.container_component
    def evaluate() -> dsl.ContainerSpec:
        return dsl.ContainerSpec(image=image, command=["python", f"{TRAINER_MOUNT}/infer.py"],
                                 args=["--model", model, "--data-dir", DATA_DIR])

    @dsl.container_component
    def deploy_model(service: str, claim: str) -> dsl.ContainerSpec:
        return dsl.ContainerSpec(image=image, command=["python", f"{TRAINER_MOUNT}/deploy.py"],
                                 args=["--service", service, "--claim", claim])

    @dsl.pipeline(name=RUN_NAME, description="cluster-bootstrap's smoke test: prepare data, train as a PyTorchJob, "
                                             "evaluate, deploy with KServe")
    def smoke_pipeline() -> None:
        volume = kubernetes.CreatePVC(pvc_name_suffix="-model", access_modes=["ReadWriteOnce"], size="1Gi")
        claim = volume.outputs["name"]
        data = prepare_data().set_display_name("prepare-data")
        trained = train(claim=claim).set_display_name("train").after(data)
        checked = evaluate().set_display_name("evaluate").after(trained)
        on_pvc = [data, checked]
        tasks = [data, trained, checked]
        last = checked
        if deploy:
            service = json.dumps(inference_service(spec, None, spec.pip_index))
            served = deploy_model(service=service, claim=claim).set_display_name("deploy").after(checked)
            tasks.append(served)
            last = served
        for task in on_pvc:
            kubernetes.mount_pvc(task, pvc_name=claim, mount_path=CACHE_MOUNT)
        for task in tasks:
            kubernetes.use_config_map_as_volume(task, config_map_name=config_map, mount_path=TRAINER_MOUNT)
            task.set_caching_options(False)
        kubernetes.DeletePVC(pvc_name=claim).after(last)

    return smoke_pipeline


def compile_pipeline(spec: SmokeSpec, *, deploy: bool, cifar10: bool) -> dict[str, Any]:
    """The pipeline as the Pipelines API takes it inline: the kfp compiler's IR read back by the SDK's own reader
    of a pipeline package (kfp.Client submits exactly this), the pipeline spec and, with kfp-kubernetes, the platform
    spec nested beside it (the API server's pipelineSpecStructToYamlString reads that shape)."""
    try:
        from kfp import compiler
        from kfp.client.client import _extract_pipeline_yaml
    except ImportError:
        raise BootstrapError("smoke-test --pipeline compiles its pipeline with the Kubeflow Pipelines SDK: "
                             "pip install 'cluster-bootstrap[pipelines]' (kfp 2.17)") from None
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "pipeline.yaml"
        compiler.Compiler().compile(pipeline_spec(spec, deploy=deploy, cifar10=cifar10), str(path))
        return dict(_extract_pipeline_yaml(str(path)).to_dict())


def run_body(spec: SmokeSpec, *, deploy: bool, cifar10: bool) -> dict[str, Any]:
    """The v2beta1 Run to create, built with the Pipelines API's own model (kfp_server_api.V2beta1Run) and
    serialised by its client, as kfp.Client.run_pipeline does."""
    import kfp_server_api

    run = kfp_server_api.V2beta1Run(display_name=f"{RUN_NAME}-{spec.name.rsplit('-', 1)[-1]}",
                                    pipeline_spec=compile_pipeline(spec, deploy=deploy, cifar10=cifar10))
    return dict(kfp_server_api.ApiClient().sanitize_for_serialization(run))


def runner_role(spec: SmokeSpec, *, deploy: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """What lets the pipeline's steps run the PyTorchJob (and read its pods' reports) and, to deploy, manage the
    InferenceService, in this namespace only."""
    name = f"{spec.name}-steps"
    group, _, plural = CUSTOM_KINDS["PyTorchJob"]
    rules = [{"apiGroups": [group], "resources": [plural], "verbs": ["create", "get", "delete"]},
             {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    if deploy:
        rules.append({"apiGroups": ["serving.kserve.io"], "resources": ["inferenceservices"],
                      "verbs": ["create", "get", "delete"]})
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": spec.namespace, "labels": dict(spec.labels)}, "rules": rules}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": name, "namespace": spec.namespace, "labels": dict(spec.labels)},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": RUNNER_ACCOUNT, "namespace": spec.namespace}]}
    return role, binding


def trainer_config_map(spec: SmokeSpec) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{spec.name}-trainer", "namespace": spec.namespace, "labels": dict(spec.labels)},
            "data": dict(spec.trainer_files or read_trainer_files())}


class NotARun(Exception):
    """The Pipelines API answered with something that is not a v2beta1 Run."""


def _pipelines_api(api: client.ApiClient, method: str, path: str, body: Any = None) -> dict[str, Any]:
    response = api.call_api(path, method, header_params={"Content-Type": "application/json",
                                                         "Accept": "application/json"},
                            body=body, auth_settings=["BearerToken"], _preload_content=False,
                            _request_timeout=REQUEST_TIMEOUT_S)
    raw = response[0].data if isinstance(response, tuple) else response.data
    try:
        answer = json.loads(raw or b"{}")
    except ValueError:
        raise NotARun(f"not JSON: {bytes(raw)[:120]!r}") from None
    if not isinstance(answer, dict):
        raise NotARun(f"a JSON {type(answer).__name__}, not a run")
    return answer


def _seconds(task: dict[str, Any]) -> float | None:
    """How long a step ran, from the times Kubeflow Pipelines reports (RFC 3339); None while they are missing."""
    try:
        start = datetime.fromisoformat(str(task.get("start_time") or task.get("create_time")))
        end = datetime.fromisoformat(str(task["end_time"]))
    except (KeyError, TypeError, ValueError):
        return None
    seconds = (end - start).total_seconds()
    return round(seconds, 1) if seconds >= 0 else None


def steps_of(run: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The run's steps as Kubeflow Pipelines reports them, in the pipeline's order: {"name", "state"[, "seconds",
    "error"]}. Anything the answer holds that is not a step of ours is passed over."""
    details = run.get("run_details")
    tasks = details.get("task_details") if isinstance(details, dict) else None
    found: dict[str, dict[str, Any]] = {}
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict) or str(task.get("display_name") or "") not in STEPS:
            continue
        step: dict[str, Any] = {"name": str(task["display_name"]), "state": str(task.get("state") or "PENDING")}
        seconds = _seconds(task)
        if seconds is not None and step["state"] in TERMINAL:
            step["seconds"] = seconds
        error = task.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        if message:
            step["error"] = str(message)
        found[step["name"]] = step
    return tuple(found[name] for name in STEPS if name in found)


def run_pipeline(api: client.ApiClient, body: dict[str, Any], *, timeout_s: float,
                 on_steps: Callable[[str, tuple[dict[str, Any], ...]], None] | None = None, poll_s: float = 5.0,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> tuple[str, str, tuple[dict[str, Any], ...]]:
    """Submit the run and follow it: (its id, its final state, its steps). NotARun when an answer is not a run."""
    run = _pipelines_api(api, "POST", RUNS_PATH, body)
    run_id = run.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise NotARun(f"the run was accepted without an id: {str(run)[:200]}")
    started = clock()
    while True:
        run = _pipelines_api(api, "GET", f"{RUNS_PATH}/{run_id}")
        state, steps = str(run.get("state") or "PENDING"), steps_of(run)
        if on_steps:
            on_steps(state, steps)
        if state in TERMINAL:
            return run_id, state, steps
        if clock() - started >= timeout_s:
            return run_id, "TIMEOUT", steps
        sleep(poll_s)


def training_report(api: client.ApiClient, spec: SmokeSpec) -> TrainerMetrics | None:
    """The trainer's metrics from the PyTorchJob's master (its termination message), or None."""
    selector = f"{JOB_NAME_LABEL}={spec.name},{REPLICA_TYPE_LABEL}=master"
    pods = client.CoreV1Api(api).list_namespaced_pod(spec.namespace, label_selector=selector,
                                                     _request_timeout=REQUEST_TIMEOUT_S).items
    for pod in pods:
        for status in (pod.status.container_statuses if pod.status else None) or []:
            terminated = status.state.terminated if status.state else None
            metrics = TrainerMetrics.parse(terminated.message if terminated else None)
            if metrics:
                return metrics
    return None


def _create(api: client.ApiClient, objects: list[dict[str, Any]]) -> None:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    for obj in objects:
        create = {"ConfigMap": core.create_namespaced_config_map, "Role": rbac.create_namespaced_role,
                  "RoleBinding": rbac.create_namespaced_role_binding}[obj["kind"]]
        try:
            create(obj["metadata"]["namespace"], obj, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if exc.status != 409:  # left by an earlier run that was stopped: it holds the same
                raise


def _delete(api: client.ApiClient, spec: SmokeSpec, objects: list[dict[str, Any]]) -> str | None:
    """Remove what the run made (the PyTorchJob included); why not, when something is left."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    group, version, plural = CUSTOM_KINDS["PyTorchJob"]
    # (the function, its arguments): the PyTorchJob first (its pods go with it), then ours, the last made first.
    calls: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = [
        (client.CustomObjectsApi(api).delete_namespaced_custom_object,
         (group, version, spec.namespace, plural, spec.name), {"propagation_policy": "Background"})]
    for obj in reversed(objects):
        delete = {"ConfigMap": core.delete_namespaced_config_map, "Role": rbac.delete_namespaced_role,
                  "RoleBinding": rbac.delete_namespaced_role_binding}[obj["kind"]]
        calls.append((delete, (obj["metadata"]["name"], obj["metadata"]["namespace"]), {}))
    left = []
    for function, arguments, options in calls:
        try:
            function(*arguments, **options, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if exc.status != 404:
                left.append(f"HTTP {exc.status}")
        except urllib3.exceptions.HTTPError as exc:
            left.append(type(exc).__name__)
    return f"the run's objects could not all be removed ({', '.join(left)}): kubectl -n {spec.namespace} delete " \
           f"pytorchjobs,configmaps,roles,rolebindings -l cluster-bootstrap.io/smoke-run={spec.name}" if left else None


def _step_text(step: dict[str, Any]) -> str:
    took = f" in {step['seconds']:.0f}s" if "seconds" in step else ""
    return f"{step['name']} {step['state'].lower()}{took}"


def _served(steps: tuple[dict[str, Any], ...]) -> str:
    return "" if not any(s["name"] == "deploy" and s["state"] == "SUCCEEDED" for s in steps) else \
        "; the deploy step served the model and asked it about one picture (its log has the answer)"


def _api_problem(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    if isinstance(exc, NotARun):
        return f"the Pipelines API answered {exc}"
    return f"the API server did not answer ({type(exc).__name__})"


def run_pipeline_smoke_test(kubeconfig: Path, settings: Settings, *, cpu: bool = False, image: str | None = None,
                            epochs: int | None = None, timeout_s: int | None = None, deploy: bool = False,
                            on_progress: Callable[[Any], None] | None = None, poll_s: float = 5.0,
                            sleep: Callable[[float], None] = time.sleep,
                            clock: Callable[[], float] = time.monotonic) -> Verdict:
    """Run the pipeline on the cluster behind `kubeconfig` and judge it: PASS when every step succeeded and the
    training reached the accuracy floor; every other ending a FAIL verdict naming its cause."""
    from provision.smoke.spec import build_spec, choose_mode, cluster_gpu_generations

    api = load_api_client(kubeconfig)
    started = clock()
    mode: Mode = "cpu" if cpu else "gpu"

    def verdict_failed(cause: FailureKind, detail: str, steps: tuple[dict[str, Any], ...] = ()) -> Verdict:
        nothing = Observation(namespace=NAMESPACE, mode=mode, elapsed_s=clock() - started)
        return replace(failed(cause, detail, nothing), workload="Kubeflow pipeline", pipeline_steps=steps)

    core = client.CoreV1Api(api)
    try:
        # Only whether they are there: read without building the client's models from the answers.
        core.read_namespaced_service(API_SERVICE.split(":")[0], NAMESPACE, _request_timeout=REQUEST_TIMEOUT_S,
                                     _preload_content=False)
        try:
            client.ApiextensionsV1Api(api).read_custom_resource_definition(
                PYTORCHJOB_CRD, _request_timeout=REQUEST_TIMEOUT_S, _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return verdict_failed(FailureKind.ADDON_MISSING, f"the pipeline trains as a PyTorchJob and the cluster "
                                  f"serves no {PYTORCHJOB_CRD}: `bootstrap addons install {TRAINING_OPERATOR}`")
        mode = choose_mode(api, settings.smoke_test.mode, cpu, REQUEST_TIMEOUT_S, settings.smoke_gpu_resource)
        generations = cluster_gpu_generations(api, REQUEST_TIMEOUT_S) if mode == "gpu" else []
    except ApiException as exc:
        if exc.status == 404:
            return verdict_failed(FailureKind.ADDON_MISSING, "Kubeflow Pipelines is not installed (no Service "
                                  f"{NAMESPACE}/ml-pipeline): `bootstrap addons install pipelines`")
        return verdict_failed(FailureKind.API_ERROR, f"cannot ask the cluster what it offers: {_api_problem(exc)}")
    except urllib3.exceptions.HTTPError as exc:
        return verdict_failed(FailureKind.API_ERROR, f"cannot ask the cluster what it offers: {_api_problem(exc)}")
    spec = build_spec(settings, mode, namespace=NAMESPACE, image=image, epochs=epochs, timeout_s=timeout_s,
                      generations=generations)
    spec = replace(spec, name=RUN_NAME, cache="pvc", pip_index=resolve_sources(settings).pip_index)
    # Compiled before anything is made: a controller without the SDK is told so with nothing to clean up.
    body = run_body(spec, deploy=deploy, cifar10=spec.dataset == "cifar10")
    objects = [trainer_config_map(spec), *runner_role(spec, deploy=deploy)]
    limit_s = spec.deadline_s + (settings.addons.timeout_s if deploy else 0)
    metrics = None
    try:
        _create(api, objects)
        run_id, state, steps = run_pipeline(api, body, timeout_s=limit_s, poll_s=poll_s, sleep=sleep, clock=clock)
        metrics = training_report(api, spec)
    except (ApiException, urllib3.exceptions.HTTPError, NotARun) as exc:
        unrun = verdict_failed(FailureKind.API_ERROR, f"the pipeline could not be run: {_api_problem(exc)}")
        return replace(unrun, cleanup_error=_delete(api, spec, objects))
    left = _delete(api, spec, objects)
    names = ", ".join(map(_step_text, steps)) or "no step reported"
    if state != "SUCCEEDED":
        broken = next((s for s in steps if s["state"] == "FAILED"), None)
        why = f"step {broken['name']} failed: {broken.get('error', 'see its log in the Pipelines UI')}" if broken \
            else f"the run is {state.lower()}"
        return replace(verdict_failed(FailureKind.PIPELINE_FAILED, f"pipeline run {run_id}: {why} ({names})", steps),
                       metrics=metrics, cleanup_error=left)
    accuracy = ""
    if metrics is not None:
        if metrics.test_accuracy < spec.min_accuracy:
            detail = (f"pipeline run {run_id}: the PyTorchJob's test accuracy {accuracy_text(metrics.test_accuracy)} "
                      f"is under the threshold {spec.min_accuracy} ({names})")
            return replace(verdict_failed(FailureKind.LOW_ACCURACY, detail, steps), metrics=metrics,
                           cleanup_error=left)
        accuracy = f"; test accuracy {metrics.test_accuracy:.2%} in the PyTorchJob"
    return Verdict(passed=True, summary=f"PASS: pipeline run {run_id} succeeded ({names}){accuracy}{_served(steps)}",
                   namespace=NAMESPACE, mode=mode, elapsed_s=clock() - started, metrics=metrics,
                   workload="Kubeflow pipeline", pipeline_steps=steps, cleanup_error=left)
