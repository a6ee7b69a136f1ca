"""The smoke test's driver: train CIFAR-10 on the cluster and observe the run through the Kubernetes API.

`run_smoke_test` creates a namespace, applies the trainer's ConfigMap and its Job (see smoke_manifests.py),
then polls the Job and its pods and follows the trainer's log. After every poll it writes down what it saw
as an Observation (smoke_observation.py) and asks the pure verdict (smoke_verdict.py) whether the run is
over: PASS with the accuracy and the time, or FAIL with the cause as the API states it. The namespace is
deleted afterwards unless the caller keeps it.

Library code: nothing is printed; progress goes to the `on_progress` callback.
"""
from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.inputs import versions
from provision.inputs.settings import GPU_RESOURCE, Settings
from provision.inputs.sources import resolve_sources
from provision.kube.client import load_api_client
from provision.kube.pods import (
    CONFIG_REASONS,
    IMAGE_PULL_REASONS,
    completion_index,
    memory_limit,
    node_name,
    pod_name,
    pod_phase,
    restart_count,
    terminated_state,
    unschedulable,
    waiting_state,
)
from provision.kube.smoke_observation import (
    Condition,
    Mode,
    Observation,
    PodObservation,
    Terminated,
    Waiting,
    epoch_reached,
)
from provision.kube.smoke_verdict import FailureKind, Policy, Verdict, failed, judge
from provision.render.smoke_manifests import RUN_LABEL, SmokeSpec, render

# The RuntimeClass the GPU role creates when gpu.runtime is "runtimeclass".
GPU_RUNTIME_CLASS = "nvidia"
T = TypeVar("T")


@dataclass(frozen=True)
class Timings:
    """How patient the driver is. Tests shrink these; the defaults suit a real cluster."""

    poll_s: float = 2.0
    # How long a pod may stay Unschedulable, and wait for its image, before that is final (see Policy).
    unschedulable_grace_s: float = 120.0
    image_pull_grace_s: float = 60.0
    # The Job's own activeDeadlineSeconds normally ends a stuck run; the driver waits this much longer.
    deadline_margin_s: float = 60.0
    request_timeout_s: float = 10.0


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


def _stage(pods: tuple[PodObservation, ...], stage: str) -> str:
    """What the run is doing, for the live view: the last pod that is not yet running says why."""
    for pod in pods:
        if pod.unschedulable:
            stage = "scheduling"
        elif pod.waiting and pod.waiting.reason in IMAGE_PULL_REASONS:
            stage = "pulling"
        elif pod.waiting and pod.waiting.reason not in CONFIG_REASONS:
            stage = "starting"
    return stage


# ---------------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------------
class _Run:
    def __init__(self, api: client.ApiClient, spec: SmokeSpec, mode: Mode, policy: Policy, timings: Timings,
                 on_progress: Callable[[SmokeProgress], None] | None, sleep: Callable[[float], None]) -> None:
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.spec = spec
        self.policy = policy
        self.timings = timings
        self.on_progress = on_progress
        self.sleep = sleep
        self.progress = SmokeProgress(namespace=spec.namespace, job=spec.name, mode=mode, gpus=spec.gpus,
                                      nodes=spec.nodes, image=spec.image)
        self.observation = Observation(namespace=spec.namespace, mode=mode, elapsed_s=0.0)
        # When each (pod, trouble) was first seen: some troubles only count once they have lasted a while.
        self.first_seen: dict[tuple[str, str], float] = {}
        self.log_lines_seen: dict[str, int] = {}

    # -- plumbing -----------------------------------------------------------------------------------
    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return fn(*args, _request_timeout=self.timings.request_timeout_s, **kwargs)

    def _notify(self) -> None:
        if self.on_progress:
            self.on_progress(self.progress)
        self.progress.new_lines = []

    def fail(self, cause: FailureKind, detail: str) -> Verdict:
        return failed(cause, detail, replace(self.observation, elapsed_s=self.progress.elapsed))

    def _since(self, pod: str, trouble: str, now: float) -> float:
        return self.first_seen.setdefault((pod, trouble), now)

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
        api_errors = 0
        while True:
            try:
                self.observation = self._observe()
                api_errors = 0
            except (ApiException, urllib3.exceptions.HTTPError) as exc:
                api_errors += 1
                self.observation = replace(self.observation, elapsed_s=self.progress.elapsed, api_errors=api_errors,
                                           api_error=_describe(exc))
            verdict = judge(self.observation, self.policy)
            if verdict:
                self.progress.stage = "finished"
                self._notify()
                return verdict
            self._notify()
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

    def _observe(self) -> Observation:
        ns, name = self.spec.namespace, self.spec.name
        pods = self._call(self.core.list_namespaced_pod, ns, label_selector=f"{RUN_LABEL}={name}").items
        pods.sort(key=lambda p: (completion_index(p) or "~", pod_name(p)))
        self._follow_logs(pods[0] if pods else None)
        # The Job is read after its pods: a pod that its deadline killed is then seen beside the Job's
        # DeadlineExceeded condition, and is not blamed on the trainer.
        job = self._call(self.batch.read_namespaced_job_status, name, ns)
        now = self.progress.elapsed
        seen = tuple(self._observe_pod(pod, now) for pod in pods)
        self.progress.pods = [PodView(p.name, p.index, p.node or "", p.state) for p in seen]
        self.progress.stage = _stage(seen, self.progress.stage)
        conditions = (job.status.conditions if job.status else None) or []
        return Observation(namespace=ns, mode=self.progress.mode, elapsed_s=now,
                           job_conditions=tuple(Condition(c.type, c.status, c.reason, c.message) for c in conditions),
                           pods=seen, log_lines=tuple(self.progress.log_lines))

    def _observe_pod(self, pod: client.V1Pod, now: float) -> PodObservation:
        name = pod_name(pod)
        scheduler_says = unschedulable(pod)
        waiting = waiting_state(pod)
        terminated = terminated_state(pod)
        image_pull = waiting is not None and waiting.reason in IMAGE_PULL_REASONS
        return PodObservation(
            name=name, phase=pod_phase(pod), index=completion_index(pod), node=node_name(pod),
            reason=pod.status.reason if pod.status else None, message=pod.status.message if pod.status else None,
            unschedulable=scheduler_says,
            waiting=Waiting(waiting.reason, waiting.message) if waiting and waiting.reason else None,
            terminated=Terminated(terminated.exit_code, terminated.reason, terminated.message) if terminated else None,
            memory_limit=memory_limit(pod), restarts=restart_count(pod),
            unschedulable_since=self._since(name, "unschedulable", now) if scheduler_says else None,
            image_pull_since=self._since(name, "image-pull", now) if image_pull else None,
        )

    def _follow_logs(self, leader: client.V1Pod | None) -> None:
        if leader is None or pod_phase(leader) == "Pending":
            return
        name = pod_name(leader)
        try:
            # Without preloading the client returns the HTTP response itself (whatever its annotation says):
            # the log is taken as the bytes the kubelet sent.
            response: Any = self._call(self.core.read_namespaced_pod_log, name, self.spec.namespace,
                                       _preload_content=False)
        except ApiException:
            return  # the container may not have started yet; the next poll tries again
        lines = response.data.decode(errors="replace").splitlines()
        fresh = lines[self.log_lines_seen.get(name, 0):]
        self.log_lines_seen[name] = len(lines)
        self.progress.log_lines += fresh
        self.progress.new_lines += fresh
        reached = epoch_reached(fresh)
        if reached:
            self.progress.epoch, self.progress.epochs = reached
        self.progress.stage = "training"


def _describe(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        try:
            message = json.loads(exc.body or "").get("message")
        except (ValueError, AttributeError):
            message = None
        return f"HTTP {exc.status} {exc.reason}: {message or (exc.body or '').strip()[:200]}"
    return f"{type(exc).__name__}: {exc}"


def smoke_image(settings: Settings, generations: list[str]) -> str:
    """smoke_test.image when cluster.yaml sets it; else the image the versions table gives the oldest of the
    GPU generations the cluster's nodes are labelled with (CUDA 13 from Turing on, CUDA 12.6 before)."""
    smoke = settings.smoke_test
    if "image" in smoke.model_fields_set:
        return smoke.image
    return versions.smoke_image_for(generations) or smoke.image


def cluster_gpu_generations(api: client.ApiClient, timeout_s: float = 10.0) -> list[str]:
    """The GPU generations the gpu phase labelled the nodes with (none on a cluster it never labelled)."""
    nodes = client.CoreV1Api(api).list_node(_request_timeout=timeout_s).items
    found = {(n.metadata.labels or {}).get(versions.GPU_GENERATION_LABEL) for n in nodes if n.metadata}
    return sorted(name for name in found if name in {g.name for g in versions.GPU_GENERATIONS})


def build_spec(settings: Settings, mode: Mode, *, namespace: str, gpus: int | None = None, nodes: int | None = None,
               image: str | None = None, epochs: int | None = None, timeout_s: int | None = None,
               generations: list[str] | None = None) -> SmokeSpec:
    """What to run: the arguments given, else `settings.smoke_test` (the image for the GPU generations given,
    see smoke_image). On CPU the trainer's own CPU defaults (fewer epochs, a smaller synthetic set) apply unless
    epochs are given here or set in cluster.yaml."""
    smoke = settings.smoke_test
    if epochs is None and (mode == "gpu" or "epochs" in smoke.model_fields_set):
        epochs = smoke.epochs
    image = image or smoke_image(settings, generations or [])
    return SmokeSpec(namespace=namespace, image=image, gpus=0 if mode == "cpu" else (gpus or smoke.gpus),
                     nodes=nodes or smoke.nodes, epochs=epochs, dataset=smoke.dataset,
                     timeout_s=timeout_s or smoke.timeout_s,
                     runtime_class=GPU_RUNTIME_CLASS if settings.gpu.runtime == "runtimeclass" else None,
                     pip_index=resolve_sources(settings).pip_index)


def smoke_policy(settings: Settings, spec: SmokeSpec, timings: Timings) -> Policy:
    """What the verdict holds a run to: the image and deadline it runs with, the accuracy the settings ask
    for, the mirrors its image may come through, and the driver's patience."""
    return Policy(image=spec.image, timeout_s=spec.timeout_s, min_accuracy=settings.smoke_test.min_accuracy,
                  mirrors=resolve_sources(settings).registry_mirrors,
                  unschedulable_grace_s=timings.unschedulable_grace_s, image_pull_grace_s=timings.image_pull_grace_s,
                  deadline_margin_s=timings.deadline_margin_s)


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
    api = load_api_client(kubeconfig)
    started = time.monotonic()
    namespace = namespace or new_namespace()
    try:
        mode = choose_mode(api, settings.smoke_test.mode, cpu, timings.request_timeout_s)
        generations = cluster_gpu_generations(api, timings.request_timeout_s) if mode == "gpu" else []
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        nothing_yet = Observation(namespace=namespace, mode="cpu" if cpu else "gpu",
                                  elapsed_s=time.monotonic() - started)
        return failed(FailureKind.API_ERROR, f"cannot list the cluster's nodes: {_describe(exc)}", nothing_yet)
    spec = build_spec(settings, mode, namespace=namespace, gpus=gpus, nodes=nodes, image=image, epochs=epochs,
                      timeout_s=timeout_s, generations=generations)
    run = _Run(api, spec, mode, smoke_policy(settings, spec, timings), timings, on_progress=on_progress, sleep=sleep)
    try:
        run.apply()
        verdict = run.watch()
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        verdict = run.fail(FailureKind.API_ERROR, f"the API server refused the smoke test: {_describe(exc)}")
    finally:
        cleanup_error = None if keep else run.delete_namespace()
    return replace(verdict, kept=keep, cleanup_error=cleanup_error)
