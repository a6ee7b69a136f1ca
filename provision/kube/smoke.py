"""The smoke test: train CIFAR-10 on the cluster and give a verdict read from the Kubernetes API.

`run_smoke_test` creates a namespace, applies the trainer's ConfigMap and its Job (see smoke_manifests.py),
polls the Job and its pods, follows the trainer's log, and returns a Verdict: PASS with the accuracy and
the time, or FAIL with the cause as the API states it (a pod the scheduler cannot place, an image that
cannot be pulled, a container killed for memory, the Job's deadline, an accuracy under the threshold, the
trainer's own error). The namespace is deleted afterwards unless the caller keeps it.

Library code: nothing is printed; progress goes to the `on_progress` callback.
"""
from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.inputs.settings import GPU_RESOURCE, Settings
from provision.inputs.sources import resolve_sources
from provision.kube.client import load_api_client
from provision.render.smoke_manifests import RUN_LABEL, SmokeSpec, render

# The RuntimeClass the GPU role creates when gpu.runtime is "runtimeclass".
GPU_RUNTIME_CLASS = "nvidia"
EPOCH_LINE = re.compile(r"^epoch (\d+)/(\d+)\b")
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
DEVICE_PLUGIN_HINT = ("check that the NVIDIA device plugin runs on the GPU nodes (kubectl -n kube-system get pods "
                      "-l app.kubernetes.io/name=nvidia-device-plugin), or run the smoke test with --cpu")
# Waiting reasons that a retry by the kubelet never fixes.
HOPELESS_IMAGE_REASONS = {"InvalidImageName", "ErrImageNeverPull"}
IMAGE_PULL_REASONS = {"ErrImagePull", "ImagePullBackOff"} | HOPELESS_IMAGE_REASONS
CONFIG_REASONS = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
# Consecutive failed polls of the API tolerated before the run is given up.
API_ERRORS_TOLERATED = 3

Mode = Literal["gpu", "cpu"]


class FailureKind(StrEnum):
    UNSCHEDULABLE = "unschedulable"
    IMAGE_PULL = "image-pull"
    OOM_KILLED = "oom-killed"
    DEADLINE_EXCEEDED = "deadline-exceeded"
    LOW_ACCURACY = "low-accuracy"
    TRAINER_FAILED = "trainer-failed"
    POD_CONFIG = "pod-config"
    TIMEOUT = "timeout"
    API_ERROR = "api-error"


@dataclass(frozen=True)
class Timings:
    """How patient the driver is. Tests shrink these; the defaults suit a real cluster."""

    poll_s: float = 2.0
    # Right after `up` the device plugin may still be registering its GPUs: Unschedulable is not final at once.
    unschedulable_grace_s: float = 120.0
    # ErrImagePull may be a registry hiccup; after this long (in ErrImagePull or ImagePullBackOff) it is final.
    image_pull_grace_s: float = 60.0
    # The Job's own activeDeadlineSeconds normally ends a stuck run; the driver waits this much longer.
    deadline_margin_s: float = 60.0
    request_timeout_s: float = 10.0


@dataclass(frozen=True)
class TrainerMetrics:
    """The trainer's final JSON (train.py's Metrics), as far as the verdict needs it."""

    test_accuracy: float
    inference_accuracy: float | None = None
    images_per_s: float = 0.0
    epoch_time_s: float = 0.0
    train_time_s: float = 0.0
    epochs: int = 0
    device: str = ""
    device_type: str = ""
    gpu_count: int = 0
    world_size: int = 1
    nodes: int = 1
    torch_version: str = ""
    cuda_version: str | None = None
    dataset: str = ""

    @classmethod
    def parse(cls, text: str | None) -> TrainerMetrics | None:
        """Metrics from a termination message or log line; None when it holds none."""
        try:
            data = json.loads(text or "")
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("test_accuracy"), (int, float)):
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class Verdict:
    passed: bool
    summary: str
    namespace: str
    mode: Mode
    elapsed_s: float
    cause: FailureKind | None = None
    # The cause in the API's own words, with what to do about it.
    detail: str = ""
    metrics: TrainerMetrics | None = None
    kept: bool = False
    cleanup_error: str | None = None
    log_tail: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1


@dataclass(frozen=True)
class PodView:
    name: str
    index: str
    node: str
    state: str


@dataclass
class SmokeProgress:
    """What the live view shows; updated in place between callbacks."""

    namespace: str
    job: str
    mode: Mode
    gpus: int
    nodes: int
    image: str
    started: float = field(default_factory=time.monotonic)
    stage: str = "creating"
    pods: list[PodView] = field(default_factory=list)
    epoch: int = 0
    epochs: int = 0
    log_lines: list[str] = field(default_factory=list)
    # Lines that arrived since the previous callback (the CLI prints them above the live view).
    new_lines: list[str] = field(default_factory=list)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


# ---------------------------------------------------------------------------------------------------
# Reading pods
# ---------------------------------------------------------------------------------------------------
def _statuses(pod: client.V1Pod) -> list[client.V1ContainerStatus]:
    status = pod.status
    return list((status.init_container_statuses or []) + (status.container_statuses or [])) if status else []


def _unschedulable(pod: client.V1Pod) -> str | None:
    for condition in (pod.status.conditions or []) if pod.status else []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == "Unschedulable":
            return condition.message or "Unschedulable"
    return None


def _waiting(pod: client.V1Pod) -> client.V1ContainerStateWaiting | None:
    for status in _statuses(pod):
        if status.state and status.state.waiting and status.state.waiting.reason:
            return status.state.waiting
    return None


def _terminated(pod: client.V1Pod) -> client.V1ContainerStateTerminated | None:
    for status in _statuses(pod):
        for state in (status.state, status.last_state):
            if state and state.terminated:
                return state.terminated
    return None


def _pod_index(pod: client.V1Pod) -> str:
    meta = pod.metadata
    return (meta.labels or {}).get(COMPLETION_INDEX_KEY) or (meta.annotations or {}).get(COMPLETION_INDEX_KEY) or ""


def _pod_state(pod: client.V1Pod) -> str:
    phase = pod.status.phase if pod.status else "Pending"
    terminated = _terminated(pod)
    if phase == "Pending":
        if _unschedulable(pod):
            return "Pending (Unschedulable)"
        waiting = _waiting(pod)
        return f"Pending ({waiting.reason})" if waiting else "Pending"
    if phase == "Failed" and terminated:
        return f"Failed ({terminated.reason or f'exit {terminated.exit_code}'})"
    return phase or "Unknown"


def _memory_limit(pod: client.V1Pod) -> str:
    for container in pod.spec.containers if pod.spec else []:
        limits = container.resources.limits if container.resources else None
        if limits and limits.get("memory"):
            return str(limits["memory"])
    return "none"


def _job_condition(job: client.V1Job, *types: str) -> client.V1JobCondition | None:
    for condition in (job.status.conditions or []) if job.status else []:
        if condition.type in types and condition.status == "True":
            return condition
    return None


def registry_of(image: str) -> str:
    """The registry host an image reference pulls from (docker.io when the reference names none)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def new_namespace() -> str:
    return f"cb-smoke-{secrets.token_hex(3)}"


def choose_mode(api: client.ApiClient, configured: str, cpu: bool, timeout_s: float = 10.0) -> Mode:
    """cpu when asked; gpu when asked; otherwise gpu exactly when some node offers GPU_RESOURCE."""
    if cpu or configured == "cpu":
        return "cpu"
    if configured == "gpu":
        return "gpu"
    nodes = client.CoreV1Api(api).list_node(_request_timeout=timeout_s).items
    offered = sum(int((n.status.allocatable or {}).get(GPU_RESOURCE, 0) or 0) for n in nodes if n.status)
    return "gpu" if offered > 0 else "cpu"


# ---------------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------------
class _Run:
    def __init__(self, api: client.ApiClient, spec: SmokeSpec, mode: Mode, *, min_accuracy: float,
                 mirrors: dict[str, list[str]], timings: Timings,
                 on_progress: Callable[[SmokeProgress], None] | None, sleep: Callable[[float], None]) -> None:
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.spec = spec
        self.mode = mode
        self.min_accuracy = min_accuracy
        self.mirrors = mirrors
        self.timings = timings
        self.on_progress = on_progress
        self.sleep = sleep
        self.progress = SmokeProgress(namespace=spec.namespace, job=spec.name, mode=mode, gpus=spec.gpus,
                                      nodes=spec.nodes, image=spec.image)
        # When each (pod, trouble) was first seen: some troubles only count once they have lasted a while.
        self.first_seen: dict[tuple[str, str], float] = {}
        self.log_lines_seen: dict[str, int] = {}

    # -- plumbing -----------------------------------------------------------------------------------
    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(*args, _request_timeout=self.timings.request_timeout_s, **kwargs)

    def _notify(self) -> None:
        if self.on_progress:
            self.on_progress(self.progress)
        self.progress.new_lines = []

    def _verdict(self, passed: bool, summary: str, cause: FailureKind | None = None, detail: str = "",
                 metrics: TrainerMetrics | None = None) -> Verdict:
        return Verdict(passed=passed, summary=summary, namespace=self.spec.namespace, mode=self.mode,
                       elapsed_s=round(self.progress.elapsed, 1), cause=cause, detail=detail, metrics=metrics,
                       log_tail=tuple(self.progress.log_lines[-20:]))

    def fail(self, cause: FailureKind, detail: str) -> Verdict:
        return self._verdict(False, f"FAIL ({cause.value}): {detail}", cause, detail)

    def _lasted(self, pod: str, trouble: str, grace_s: float) -> bool:
        first = self.first_seen.setdefault((pod, trouble), time.monotonic())
        return time.monotonic() - first >= grace_s

    # -- the run ------------------------------------------------------------------------------------
    def apply(self) -> None:
        creators: dict[str, Callable[[dict[str, Any]], Any]] = {
            "Namespace": lambda body: self._call(self.core.create_namespace, body),
            "ConfigMap": lambda body: self._call(self.core.create_namespaced_config_map, self.spec.namespace, body),
            "Service": lambda body: self._call(self.core.create_namespaced_service, self.spec.namespace, body),
            "Job": lambda body: self._call(self.batch.create_namespaced_job, self.spec.namespace, body),
        }
        for body in render(self.spec, "job"):
            creators[body["kind"]](body)
        self.progress.stage = "scheduling"
        self._notify()

    def watch(self) -> Verdict:
        deadline = time.monotonic() + self.spec.timeout_s + self.timings.deadline_margin_s
        api_errors = 0
        while True:
            try:
                verdict = self._poll()
                api_errors = 0
            except (ApiException, urllib3.exceptions.HTTPError) as exc:
                api_errors += 1
                if api_errors >= API_ERRORS_TOLERATED:
                    return self.fail(FailureKind.API_ERROR, f"the API server stopped answering: {_describe(exc)}")
                verdict = None
            if verdict:
                self.progress.stage = "finished"
                self._notify()
                return verdict
            self._notify()
            if time.monotonic() > deadline:
                waited = self.spec.timeout_s + self.timings.deadline_margin_s
                return self.fail(FailureKind.TIMEOUT, f"no result after {waited:.0f}s "
                                 f"(pods: {self._pods_summary()}); the Job's deadline should have ended it: "
                                 "is the job controller running?")
            self.sleep(self.timings.poll_s)

    def delete_namespace(self) -> str | None:
        """Remove everything the run created; returns why that failed, if it did."""
        try:
            self._call(self.core.delete_namespace, self.spec.namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                return f"namespace {self.spec.namespace} was not deleted: {_describe(exc)}"
        except urllib3.exceptions.HTTPError as exc:
            return f"namespace {self.spec.namespace} was not deleted: {_describe(exc)}"
        return None

    def _poll(self) -> Verdict | None:
        ns, name = self.spec.namespace, self.spec.name
        job = self._call(self.batch.read_namespaced_job_status, name, ns)
        pods = self._call(self.core.list_namespaced_pod, ns, label_selector=f"{RUN_LABEL}={name}").items
        pods.sort(key=lambda p: (_pod_index(p) or "~", p.metadata.name))
        self.progress.pods = [PodView(p.metadata.name, _pod_index(p), (p.spec.node_name if p.spec else None) or "",
                                      _pod_state(p)) for p in pods]
        self._follow_logs(pods)
        return self._judge(job, pods)

    def _leader(self, pods: list[client.V1Pod]) -> client.V1Pod | None:
        return pods[0] if pods else None

    def _follow_logs(self, pods: list[client.V1Pod]) -> None:
        leader = self._leader(pods)
        if leader is None or (leader.status and leader.status.phase == "Pending"):
            return
        try:
            response = self._call(self.core.read_namespaced_pod_log, leader.metadata.name, self.spec.namespace,
                                  _preload_content=False)
        except ApiException:
            return  # the container may not have started yet; the next poll tries again
        lines = response.data.decode(errors="replace").splitlines()
        seen = self.log_lines_seen.get(leader.metadata.name, 0)
        fresh = lines[seen:]
        self.log_lines_seen[leader.metadata.name] = len(lines)
        self.progress.log_lines += fresh
        self.progress.new_lines += fresh
        for line in fresh:
            match = EPOCH_LINE.match(line)
            if match:
                self.progress.epoch, self.progress.epochs = int(match.group(1)), int(match.group(2))
        self.progress.stage = "training"

    def _pods_summary(self) -> str:
        return ", ".join(f"{p.name} {p.state}" for p in self.progress.pods) or "none created"

    def _judge(self, job: client.V1Job, pods: list[client.V1Pod]) -> Verdict | None:
        for pod in pods:
            terminated = _terminated(pod)
            if terminated and terminated.reason == "OOMKilled":
                node = pod.spec.node_name if pod.spec else None
                return self.fail(FailureKind.OOM_KILLED, f"the trainer in pod {pod.metadata.name} was OOMKilled "
                                 f"(memory limit {_memory_limit(pod)}){f' on node {node}' if node else ''}: "
                                 "the node or the limit has too little memory for the data set")
        if _job_condition(job, "Complete"):
            return self._judge_metrics(pods)
        failed = _job_condition(job, "Failed", "FailureTarget")
        if failed and failed.reason == "DeadlineExceeded":
            return self.fail(FailureKind.DEADLINE_EXCEEDED, f"the Job ran past its activeDeadlineSeconds "
                             f"({self.spec.timeout_s}s) and was stopped; {self._where_it_was()}")
        failed_pods = [p for p in pods if p.status and p.status.phase == "Failed"]
        if failed_pods and not failed:
            # The Job's deadline kills its pods too: ask the Job again before blaming the trainer.
            job = self._call(self.batch.read_namespaced_job_status, self.spec.name, self.spec.namespace)
            failed = _job_condition(job, "Failed", "FailureTarget")
            if failed and failed.reason == "DeadlineExceeded":
                return self._judge(job, pods)
        if failed_pods:
            return self._trainer_failed(failed_pods[0])
        if failed:
            return self.fail(FailureKind.TRAINER_FAILED, f"the Job failed: {failed.reason}: {failed.message}")
        for pod in pods:
            verdict = self._judge_pending(pod)
            if verdict:
                return verdict
        return None

    def _judge_pending(self, pod: client.V1Pod) -> Verdict | None:
        name = pod.metadata.name
        unschedulable = _unschedulable(pod)
        if unschedulable:
            self.progress.stage = "scheduling"
            if self._lasted(name, "unschedulable", self.timings.unschedulable_grace_s):
                hint = f"; {DEVICE_PLUGIN_HINT}" if GPU_RESOURCE in unschedulable else ""
                return self.fail(FailureKind.UNSCHEDULABLE, f"pod {name} cannot be scheduled: {unschedulable}{hint}")
            return None
        waiting = _waiting(pod)
        if waiting is None:
            return None
        node = pod.spec.node_name if pod.spec else ""
        if waiting.reason in IMAGE_PULL_REASONS:
            self.progress.stage = "pulling"
            grace = 0.0 if waiting.reason in HOPELESS_IMAGE_REASONS else self.timings.image_pull_grace_s
            if self._lasted(name, "image", grace):
                return self.fail(FailureKind.IMAGE_PULL, f"image {self.spec.image} cannot be pulled on node {node}: "
                                 f"{waiting.reason}: {waiting.message or 'no message'}; {self._image_hint()}")
        elif waiting.reason in CONFIG_REASONS:
            return self.fail(FailureKind.POD_CONFIG, f"pod {name} cannot start its container: {waiting.reason}: "
                             f"{waiting.message or 'no message'}")
        else:
            self.progress.stage = "starting"
        return None

    def _image_hint(self) -> str:
        registry = registry_of(self.spec.image)
        mirrors = self.mirrors.get(registry)
        if mirrors:
            return f"pulls from {registry} go through the mirror(s) {', '.join(mirrors)}: check that they serve it"
        return (f"no mirror is configured for {registry}: set container_runtime.registry_mirrors, or point "
                "smoke_test.image (or --image) at an image the nodes can reach")

    def _where_it_was(self) -> str:
        if self.progress.epochs:
            return f"training had reached epoch {self.progress.epoch}/{self.progress.epochs}"
        return f"the pods never started training ({self._pods_summary()})"

    def _trainer_failed(self, pod: client.V1Pod) -> Verdict:
        terminated = _terminated(pod)
        if terminated is None:
            reason = pod.status.reason or "Failed"
            return self.fail(FailureKind.TRAINER_FAILED, f"pod {pod.metadata.name} failed: {reason}: "
                             f"{pod.status.message or 'no message'}")
        message = (terminated.message or "").strip()
        try:
            reported = json.loads(message)
        except ValueError:
            reported = None
        if isinstance(reported, dict) and reported.get("error"):
            cause = str(reported["error"])
        else:
            cause = message.splitlines()[-1] if message else (terminated.reason or "no message")
        return self.fail(FailureKind.TRAINER_FAILED, f"the trainer in pod {pod.metadata.name} exited with code "
                         f"{terminated.exit_code}: {cause}")

    def _judge_metrics(self, pods: list[client.V1Pod]) -> Verdict:
        metrics = None
        for pod in pods:
            terminated = _terminated(pod)
            metrics = TrainerMetrics.parse(terminated.message if terminated else None)
            if metrics:
                break
        if metrics is None:
            for line in reversed(self.progress.log_lines):
                metrics = TrainerMetrics.parse(line)
                if metrics:
                    break
        if metrics is None:
            return self.fail(FailureKind.TRAINER_FAILED, "the Job completed but the trainer reported no metrics "
                             "(no JSON in the termination message or the log)")
        hardware = (f"{metrics.gpu_count}x {metrics.device}" if metrics.gpu_count else f"CPU x{metrics.world_size}")
        if metrics.test_accuracy < self.min_accuracy:
            detail = (f"test accuracy {metrics.test_accuracy:.4f} is under the threshold {self.min_accuracy:.2f} "
                      f"after {metrics.epochs} epochs on {hardware}")
            return self._verdict(False, f"FAIL ({FailureKind.LOW_ACCURACY.value}): {detail}",
                                 FailureKind.LOW_ACCURACY, detail, metrics)
        summary = (f"PASS: test accuracy {metrics.test_accuracy:.2%} in {metrics.train_time_s:.1f}s of training "
                   f"({metrics.images_per_s:,.0f} images/s, {metrics.epochs} epochs) on {hardware}")
        return self._verdict(True, summary, metrics=metrics)


def _describe(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        try:
            message = json.loads(exc.body or "").get("message")
        except (ValueError, AttributeError):
            message = None
        return f"HTTP {exc.status} {exc.reason}: {message or (exc.body or '').strip()[:200]}"
    return f"{type(exc).__name__}: {exc}"


def build_spec(settings: Settings, mode: Mode, *, namespace: str, gpus: int | None = None, nodes: int | None = None,
               image: str | None = None, epochs: int | None = None, timeout_s: int | None = None) -> SmokeSpec:
    """What to run: the arguments given, else `settings.smoke_test`. On CPU the trainer's own CPU defaults
    (fewer epochs, a smaller synthetic set) apply unless epochs are given here or set in cluster.yaml."""
    smoke = settings.smoke_test
    if epochs is None and (mode == "gpu" or "epochs" in smoke.model_fields_set):
        epochs = smoke.epochs
    return SmokeSpec(namespace=namespace, image=image or smoke.image, gpus=0 if mode == "cpu" else (gpus or smoke.gpus),
                     nodes=nodes or smoke.nodes, epochs=epochs, dataset=smoke.dataset,
                     timeout_s=timeout_s or smoke.timeout_s,
                     runtime_class=GPU_RUNTIME_CLASS if settings.gpu.runtime == "runtimeclass" else None,
                     pip_index=resolve_sources(settings).pip_index)


def run_smoke_test(
    kubeconfig: Path,
    settings: Settings,
    *,
    gpus: int | None = None,
    nodes: int | None = None,
    cpu: bool = False,
    keep: bool = False,
    on_progress: Callable[[SmokeProgress], None] | None = None,
    image: str | None = None,
    epochs: int | None = None,
    timeout_s: int | None = None,
    namespace: str | None = None,
    timings: Timings = Timings(),
    sleep: Callable[[float], None] = time.sleep,
) -> Verdict:
    """Run the CIFAR-10 smoke test on the cluster behind `kubeconfig` and return its verdict.

    Arguments left None take their value from `settings.smoke_test` (see build_spec). The Verdict's
    exit_code is the command's; progress goes to `on_progress` after every poll.
    """
    smoke = settings.smoke_test
    api = load_api_client(kubeconfig)
    started = time.monotonic()
    namespace = namespace or new_namespace()
    try:
        mode = choose_mode(api, smoke.mode, cpu, timings.request_timeout_s)
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        return Verdict(passed=False, summary=f"FAIL ({FailureKind.API_ERROR.value}): cannot list the cluster's "
                       f"nodes: {_describe(exc)}", namespace=namespace, mode="cpu" if cpu else "gpu",
                       elapsed_s=round(time.monotonic() - started, 1), cause=FailureKind.API_ERROR,
                       detail=f"cannot list the cluster's nodes: {_describe(exc)}")
    spec = build_spec(settings, mode, namespace=namespace, gpus=gpus, nodes=nodes, image=image, epochs=epochs,
                      timeout_s=timeout_s)
    run = _Run(api, spec, mode, min_accuracy=smoke.min_accuracy, mirrors=resolve_sources(settings).registry_mirrors,
               timings=timings, on_progress=on_progress, sleep=sleep)
    try:
        run.apply()
        verdict = run.watch()
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        verdict = run.fail(FailureKind.API_ERROR, f"the API server refused the smoke test: {_describe(exc)}")
    finally:
        cleanup_error = None if keep else run.delete_namespace()
    return replace(verdict, kept=keep, cleanup_error=cleanup_error)
