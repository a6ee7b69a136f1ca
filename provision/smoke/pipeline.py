"""`smoke-test --pipeline`: the smoke test as a Kubeflow pipeline, the seeds' DAG from data to a served model.

Four steps, written with the kfp SDK and compiled here: prepare-data (the synthetic set, or the CIFAR-10 archive
from the configured mirror), train (trainer/train.py, on one GPU unless the cluster has none), evaluate
(trainer/infer.py on the held-out set), and with KServe deploy (trainer/deploy.py: an InferenceService on the
model, one picture sent, the answer printed, the service removed). The steps run the smoke image with the
trainer's source mounted from a ConfigMap (kfp-kubernetes), pass the data and the model as KFP artifacts, and
put the model on a PVC of the default StorageClass for the predictor to read (removed at the end).

The run is submitted to the Pipelines API (v2beta1, the pipeline inline) through the API server's proxy to the
`ml-pipeline` Service, followed until it ends, and its steps reported in the verdict. The ConfigMap, and for the
deploy step a Role letting the pipeline's service account manage InferenceServices, are created for the run
and removed after it.
"""
# No `from __future__ import annotations`: kfp reads the components' annotations as types at run time.

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.errors import BootstrapError
from provision.inputs.addons import ADDONS
from provision.inputs.settings import Settings
from provision.inputs.sources import resolve_sources
from provision.kube.client import load_api_client
from provision.smoke.manifests import CACHE_MOUNT, TRAINER_MOUNT, SmokeSpec, read_trainer_files
from provision.smoke.observation import Mode, Observation
from provision.smoke.serve import inference_service
from provision.smoke.verdict import FailureKind, Verdict, failed

NAMESPACE = ADDONS["pipelines"].namespace
API_SERVICE = "ml-pipeline:8888"
RUNS_PATH = f"/api/v1/namespaces/{NAMESPACE}/services/{API_SERVICE}/proxy/apis/v2beta1/runs"
# The service account standalone Pipelines runs steps as (its manifests' pipeline-runner).
RUNNER_ACCOUNT = "pipeline-runner"
RUN_NAME = "cifar10-smoke-pipeline"
STEPS = ("prepare-data", "train", "evaluate", "deploy")
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELED", "SKIPPED"}
REQUEST_TIMEOUT_S = 30


def pipeline_spec(spec: SmokeSpec, *, deploy: bool, cifar10: bool) -> Callable[..., Any]:
    """The pipeline function (kfp's @dsl.pipeline) for this run's image, epochs, data and device."""
    from kfp import dsl, kubernetes

    image, config_map = spec.image, f"{spec.name}-trainer"
    model_dir = spec.results_dir

    @dsl.container_component
    def prepare_data(dataset: dsl.Output[dsl.Dataset]) -> dsl.ContainerSpec:
        fetch = (f"cifar_data.locate(root, download_missing=True, url={spec.cifar10_url!r}, md5={spec.cifar10_md5!r})"
                 if cifar10 else "cifar_data.write_synthetic(root, train_size=10000, test_size=2000)")
        script = (f"import pathlib, sys; sys.path.insert(0, {TRAINER_MOUNT!r}); import cifar_data; "
                  f"root = pathlib.Path(sys.argv[1]); root.mkdir(parents=True, exist_ok=True); "
                  f"print('data in', {fetch}, flush=True)")
        return dsl.ContainerSpec(image=image, command=["python", "-c", script], args=[dataset.path])

    @dsl.container_component
    def train(dataset: dsl.Input[dsl.Dataset], model: dsl.Output[dsl.Model]) -> dsl.ContainerSpec:
        args = ["--data-dir", dataset.path, "--output-dir", model.path, "--device", "cpu" if spec.cpu else "cuda"]
        if spec.epochs is not None:
            args += ["--epochs", str(spec.epochs)]
        # The model also goes to the run's PVC, where the deploy step's predictor reads it.
        script = (f'python {TRAINER_MOUNT}/train.py "$@" && mkdir -p {model_dir} && cp "$4"/model.pt {model_dir}/')
        return dsl.ContainerSpec(image=image, command=["sh", "-c", script, "train"], args=args)

    @dsl.container_component
    def evaluate(dataset: dsl.Input[dsl.Dataset], model: dsl.Input[dsl.Model],
                 metrics: dsl.Output[dsl.Artifact]) -> dsl.ContainerSpec:
        script = f'python {TRAINER_MOUNT}/infer.py --model "$1/model.pt" --data-dir "$2" | tee "$3"'
        return dsl.ContainerSpec(image=image, command=["sh", "-c", script, "evaluate"],
                                 args=[model.path, dataset.path, metrics.path])

    @dsl.container_component
    def deploy_model(service: str, claim: str) -> dsl.ContainerSpec:
        return dsl.ContainerSpec(image=image, command=["python", f"{TRAINER_MOUNT}/deploy.py"],
                                 args=["--service", service, "--claim", claim])

    @dsl.pipeline(name=RUN_NAME, description="cluster-bootstrap's smoke test: prepare data, train, evaluate, "
                                             "deploy with KServe")
    def smoke_pipeline() -> None:
        volume = kubernetes.CreatePVC(pvc_name_suffix="-model", access_modes=["ReadWriteOnce"], size="1Gi")
        data = prepare_data().set_display_name("prepare-data")
        trained = train(dataset=data.outputs["dataset"]).set_display_name("train")
        if not spec.cpu:
            trained.set_accelerator_type(spec.gpu_resource).set_accelerator_limit(1)
        kubernetes.mount_pvc(trained, pvc_name=volume.outputs["name"], mount_path=CACHE_MOUNT)
        checked = evaluate(dataset=data.outputs["dataset"], model=trained.outputs["model"])
        checked.set_display_name("evaluate")
        tasks = [data, trained, checked]
        last = checked
        if deploy:
            service = json.dumps(inference_service(spec, None, spec.pip_index))
            served = deploy_model(service=service, claim=volume.outputs["name"]).set_display_name("deploy")
            served.after(checked)
            tasks.append(served)
            last = served
        for task in tasks:
            kubernetes.use_config_map_as_volume(task, config_map_name=config_map, mount_path=TRAINER_MOUNT)
            task.set_caching_options(False)
        kubernetes.DeletePVC(pvc_name=volume.outputs["name"]).after(last)

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


def runner_role(spec: SmokeSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """What lets the deploy step manage its InferenceService (and read its pods' state), in this namespace only."""
    name = f"{spec.name}-deploy"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": spec.namespace, "labels": dict(spec.labels)},
            "rules": [{"apiGroups": ["serving.kserve.io"], "resources": ["inferenceservices"],
                       "verbs": ["create", "get", "delete"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": name, "namespace": spec.namespace, "labels": dict(spec.labels)},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": RUNNER_ACCOUNT, "namespace": spec.namespace}]}
    return role, binding


def trainer_config_map(spec: SmokeSpec) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{spec.name}-trainer", "namespace": spec.namespace, "labels": dict(spec.labels)},
            "data": dict(spec.trainer_files or read_trainer_files())}


def _pipelines_api(api: client.ApiClient, method: str, path: str, body: Any = None) -> dict[str, Any]:
    response = api.call_api(path, method, header_params={"Content-Type": "application/json",
                                                         "Accept": "application/json"},
                            body=body, auth_settings=["BearerToken"], _preload_content=False,
                            _request_timeout=REQUEST_TIMEOUT_S)
    raw = response[0].data if isinstance(response, tuple) else response.data
    return dict(json.loads(raw or b"{}"))


def steps_of(run: dict[str, Any]) -> tuple[dict[str, str], ...]:
    """The run's steps as Kubeflow Pipelines reports them, in the pipeline's order: {"name", "state"[, "error"]}."""
    found: dict[str, dict[str, str]] = {}
    for task in (run.get("run_details") or {}).get("task_details") or []:
        name = str(task.get("display_name") or "")
        if name in STEPS:
            step = {"name": name, "state": str(task.get("state") or "PENDING")}
            message = (task.get("error") or {}).get("message")
            if message:
                step["error"] = str(message)
            found[name] = step
    return tuple(found[name] for name in STEPS if name in found)


def run_pipeline(api: client.ApiClient, spec: SmokeSpec, *, deploy: bool, cifar10: bool, timeout_s: float,
                 on_steps: Callable[[str, tuple[dict[str, str], ...]], None] | None = None, poll_s: float = 5.0,
                 sleep: Callable[[float], None] = time.sleep) -> tuple[str, str, tuple[dict[str, str], ...]]:
    """Submit the compiled pipeline and follow the run: (its id, its final state, its steps)."""
    run = _pipelines_api(api, "POST", RUNS_PATH, run_body(spec, deploy=deploy, cifar10=cifar10))
    run_id = str(run.get("run_id") or "")
    if not run_id:
        raise BootstrapError(f"the Pipelines API accepted the run without an id: {str(run)[:200]}")
    started = time.monotonic()
    while True:
        run = _pipelines_api(api, "GET", f"{RUNS_PATH}/{run_id}")
        state, steps = str(run.get("state") or "PENDING"), steps_of(run)
        if on_steps:
            on_steps(state, steps)
        if state in TERMINAL:
            return run_id, state, steps
        if time.monotonic() - started >= timeout_s:
            return run_id, "TIMEOUT", steps
        sleep(poll_s)


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


def _delete(api: client.ApiClient, objects: list[dict[str, Any]]) -> None:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    for obj in reversed(objects):
        delete = {"ConfigMap": core.delete_namespaced_config_map, "Role": rbac.delete_namespaced_role,
                  "RoleBinding": rbac.delete_namespaced_role_binding}[obj["kind"]]
        try:
            delete(obj["metadata"]["name"], obj["metadata"]["namespace"], _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _served(steps: tuple[dict[str, str], ...]) -> str:
    return "" if not any(s["name"] == "deploy" and s["state"] == "SUCCEEDED" for s in steps) else \
        "; the deploy step served the model and asked it about one picture (its log has the answer)"


def run_pipeline_smoke_test(kubeconfig: Path, settings: Settings, *, cpu: bool = False, image: str | None = None,
                            epochs: int | None = None, deploy: bool = False,
                            on_progress: Callable[[Any], None] | None = None, poll_s: float = 5.0,
                            sleep: Callable[[float], None] = time.sleep) -> Verdict:
    """Run the pipeline on the cluster behind `kubeconfig` and judge it: PASS when every step succeeded."""
    from provision.smoke.driver import build_spec, choose_mode, cluster_gpu_generations

    api = load_api_client(kubeconfig)
    started = time.monotonic()
    mode: Mode = "cpu" if cpu else "gpu"

    def verdict_failed(cause: FailureKind, detail: str, steps: tuple[dict[str, str], ...] = ()) -> Verdict:
        nothing = Observation(namespace=NAMESPACE, mode=mode, elapsed_s=time.monotonic() - started)
        return replace(failed(cause, detail, nothing), workload="Kubeflow pipeline", pipeline_steps=steps)

    try:
        client.CoreV1Api(api).read_namespaced_service(API_SERVICE.split(":")[0], NAMESPACE,
                                                      _request_timeout=REQUEST_TIMEOUT_S)
    except ApiException as exc:
        if exc.status == 404:
            return verdict_failed(FailureKind.ADDON_MISSING, "Kubeflow Pipelines is not installed (no Service "
                                  f"{NAMESPACE}/ml-pipeline): `bootstrap addons install pipelines`")
        return verdict_failed(FailureKind.API_ERROR, f"cannot ask for the Pipelines API: HTTP {exc.status}")
    try:
        mode = choose_mode(api, settings.smoke_test.mode, cpu, REQUEST_TIMEOUT_S, settings.smoke_gpu_resource)
        generations = cluster_gpu_generations(api, REQUEST_TIMEOUT_S) if mode == "gpu" else []
    except ApiException as exc:
        return verdict_failed(FailureKind.API_ERROR, f"cannot ask the cluster what it offers: HTTP {exc.status}")
    spec = build_spec(settings, mode, namespace=NAMESPACE, image=image, epochs=epochs, generations=generations)
    spec = replace(spec, name=RUN_NAME, cache="pvc", pip_index=resolve_sources(settings).pip_index)
    objects = [trainer_config_map(spec), *(runner_role(spec) if deploy else ())]
    timeout_s = spec.deadline_s + (settings.addons.timeout_s if deploy else 0)
    try:
        _create(api, objects)
        run_id, state, steps = run_pipeline(api, spec, deploy=deploy, cifar10=spec.dataset == "cifar10",
                                            timeout_s=timeout_s, poll_s=poll_s, sleep=sleep)
    except ApiException as exc:
        return verdict_failed(FailureKind.API_ERROR, f"the API server refused the pipeline: HTTP {exc.status} "
                              f"{exc.reason}")
    finally:
        try:
            _delete(api, objects)
        except ApiException:
            pass
    names = ", ".join(f"{s['name']} {s['state'].lower()}" for s in steps) or "no step reported"
    if state != "SUCCEEDED":
        broken = next((s for s in steps if s["state"] == "FAILED"), None)
        why = f"step {broken['name']} failed: {broken.get('error', 'see its log in the Pipelines UI')}" if broken \
            else f"the run is {state.lower()}"
        return verdict_failed(FailureKind.PIPELINE_FAILED, f"pipeline run {run_id}: {why} ({names})", steps)
    return Verdict(passed=True, summary=f"PASS: pipeline run {run_id} succeeded ({names}){_served(steps)}",
                   namespace=NAMESPACE, mode=mode, elapsed_s=time.monotonic() - started,
                   workload="Kubeflow pipeline", pipeline_steps=steps)
