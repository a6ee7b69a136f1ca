"""The smoke test's verdict, decided from what the driver observed (smoke_observation.py) and nothing else.

`judge(observation, policy)` answers PASS with the trainer's metrics, FAIL with the cause as the API
states it and what to do about it, or None while the run is worth watching longer. It reads no clock and
calls no API: the driver observes, this module decides, and tests feed it recorded observations.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum

from provision.inputs.settings import GPU_RESOURCE
from provision.kube.pods import CONFIG_REASONS, HOPELESS_IMAGE_REASONS, IMAGE_PULL_REASONS, OOM_KILLED
from provision.kube.smoke_observation import Condition, Mode, Observation, PodObservation, epoch_reached

DEVICE_PLUGIN_HINT = ("check that the NVIDIA device plugin runs on the GPU nodes (kubectl -n kube-system get pods "
                      "-l app.kubernetes.io/name=nvidia-device-plugin), or run the smoke test with --cpu")
# How many lines of the trainer's log a verdict keeps.
LOG_TAIL_LINES = 20


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
class Policy:
    """What a run is held to: what it asked the cluster for, the accuracy it must reach, how long troubles
    may last before they are final."""

    image: str
    # The Job's activeDeadlineSeconds.
    timeout_s: int
    min_accuracy: float
    # Registry host -> the mirrors containerd pulls it through.
    mirrors: Mapping[str, Sequence[str]]
    # Right after `up` the device plugin may still be registering its GPUs: Unschedulable is not final at once.
    unschedulable_grace_s: float
    # ErrImagePull may be a registry hiccup; after this long (in ErrImagePull or ImagePullBackOff) it is final.
    image_pull_grace_s: float
    # The Job's own deadline normally ends a stuck run; the driver gives up this much later.
    deadline_margin_s: float
    # Polls in a row the API server may leave unanswered before the run is given up.
    api_errors_tolerated: int = 3


def registry_of(image: str) -> str:
    """The registry host an image reference pulls from (docker.io when the reference names none)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def failed(cause: FailureKind, detail: str, observation: Observation) -> Verdict:
    return _verdict(observation, False, f"FAIL ({cause.value}): {detail}", cause, detail)


def judge(observation: Observation, policy: Policy) -> Verdict | None:
    """PASS or FAIL once the run has ended or cannot succeed; None while it may still."""
    if observation.api_errors >= policy.api_errors_tolerated:
        return failed(FailureKind.API_ERROR, f"the API server stopped answering: {observation.api_error}", observation)
    # A poll the API server did not answer says nothing new about the run; only the clock moved on.
    verdict = None if observation.api_errors else _judge_run(observation, policy)
    waited = policy.timeout_s + policy.deadline_margin_s
    if verdict is None and observation.elapsed_s > waited:
        return failed(FailureKind.TIMEOUT, f"no result after {waited:.0f}s (pods: {observation.pods_summary()}); "
                      "the Job's deadline should have ended it: is the job controller running?", observation)
    return verdict


def _verdict(observation: Observation, passed: bool, summary: str, cause: FailureKind | None = None,
             detail: str = "", metrics: TrainerMetrics | None = None) -> Verdict:
    return Verdict(passed=passed, summary=summary, namespace=observation.namespace, mode=observation.mode,
                   elapsed_s=round(observation.elapsed_s, 1), cause=cause, detail=detail, metrics=metrics,
                   log_tail=observation.log_lines[-LOG_TAIL_LINES:])


def _job_condition(observation: Observation, *types: str) -> Condition | None:
    return next((c for c in observation.job_conditions if c.type in types and c.status == "True"), None)


def _judge_run(observation: Observation, policy: Policy) -> Verdict | None:
    for pod in observation.pods:
        if pod.terminated and pod.terminated.reason == OOM_KILLED:
            node = f" on node {pod.node}" if pod.node else ""
            return failed(FailureKind.OOM_KILLED, f"the trainer in pod {pod.name} was OOMKilled (memory limit "
                          f"{pod.memory_limit or 'none'}){node}: the node or the limit has too little memory for the "
                          "data set", observation)
    if _job_condition(observation, "Complete"):
        return _judge_metrics(observation, policy)
    job_failed = _job_condition(observation, "Failed", "FailureTarget")
    # The Job's deadline kills its pods too: such a pod failed because of the deadline, not of the trainer.
    if job_failed and job_failed.reason == "DeadlineExceeded":
        return failed(FailureKind.DEADLINE_EXCEEDED, f"the Job ran past its activeDeadlineSeconds "
                      f"({policy.timeout_s}s) and was stopped; {_where_it_was(observation)}", observation)
    failed_pod = next((pod for pod in observation.pods if pod.phase == "Failed"), None)
    if failed_pod:
        return _trainer_failed(failed_pod, observation)
    if job_failed:
        return failed(FailureKind.TRAINER_FAILED, f"the Job failed: {job_failed.reason}: {job_failed.message}",
                      observation)
    for pod in observation.pods:
        verdict = _judge_not_started(pod, observation, policy)
        if verdict:
            return verdict
    return None


def _lasted(since: float | None, grace_s: float, observation: Observation) -> bool:
    # A trouble without a first sighting is seen for the first time now.
    return observation.elapsed_s - (observation.elapsed_s if since is None else since) >= grace_s


def _judge_not_started(pod: PodObservation, observation: Observation, policy: Policy) -> Verdict | None:
    if pod.unschedulable:
        if not _lasted(pod.unschedulable_since, policy.unschedulable_grace_s, observation):
            return None
        hint = f"; {DEVICE_PLUGIN_HINT}" if GPU_RESOURCE in pod.unschedulable else ""
        return failed(FailureKind.UNSCHEDULABLE, f"pod {pod.name} cannot be scheduled: {pod.unschedulable}{hint}",
                      observation)
    waiting = pod.waiting
    if waiting is None:
        return None
    if waiting.reason in IMAGE_PULL_REASONS:
        grace = 0.0 if waiting.reason in HOPELESS_IMAGE_REASONS else policy.image_pull_grace_s
        if not _lasted(pod.image_pull_since, grace, observation):
            return None
        return failed(FailureKind.IMAGE_PULL, f"image {policy.image} cannot be pulled on node {pod.node}: "
                      f"{waiting.reason}: {waiting.message or 'no message'}; {_image_hint(policy)}", observation)
    if waiting.reason in CONFIG_REASONS:
        return failed(FailureKind.POD_CONFIG, f"pod {pod.name} cannot start its container: {waiting.reason}: "
                      f"{waiting.message or 'no message'}", observation)
    return None


def _image_hint(policy: Policy) -> str:
    registry = registry_of(policy.image)
    mirrors = policy.mirrors.get(registry)
    if mirrors:
        return f"pulls from {registry} go through the mirror(s) {', '.join(mirrors)}: check that they serve it"
    return (f"no mirror is configured for {registry}: set container_runtime.registry_mirrors, or point "
            "smoke_test.image (or --image) at an image the nodes can reach")


def _where_it_was(observation: Observation) -> str:
    reached = epoch_reached(observation.log_lines)
    if reached:
        return f"training had reached epoch {reached[0]}/{reached[1]}"
    return f"the pods never started training ({observation.pods_summary()})"


def _trainer_failed(pod: PodObservation, observation: Observation) -> Verdict:
    terminated = pod.terminated
    if terminated is None:
        return failed(FailureKind.TRAINER_FAILED, f"pod {pod.name} failed: {pod.reason or 'Failed'}: "
                      f"{pod.message or 'no message'}", observation)
    message = (terminated.message or "").strip()
    try:
        reported = json.loads(message)
    except ValueError:
        reported = None
    if isinstance(reported, dict) and reported.get("error"):
        cause = str(reported["error"])
    else:
        cause = message.splitlines()[-1] if message else (terminated.reason or "no message")
    return failed(FailureKind.TRAINER_FAILED, f"the trainer in pod {pod.name} exited with code "
                  f"{terminated.exit_code}: {cause}", observation)


def _judge_metrics(observation: Observation, policy: Policy) -> Verdict:
    # The termination message first (it is the trainer's own), the log's last JSON line otherwise.
    messages = [pod.terminated.message for pod in observation.pods if pod.terminated]
    metrics = next(filter(None, map(TrainerMetrics.parse, [*messages, *reversed(observation.log_lines)])), None)
    if metrics is None:
        return failed(FailureKind.TRAINER_FAILED, "the Job completed but the trainer reported no metrics "
                      "(no JSON in the termination message or the log)", observation)
    hardware = f"{metrics.gpu_count}x {metrics.device}" if metrics.gpu_count else f"CPU x{metrics.world_size}"
    if metrics.test_accuracy < policy.min_accuracy:
        detail = (f"test accuracy {metrics.test_accuracy:.4f} is under the threshold {policy.min_accuracy:.2f} "
                  f"after {metrics.epochs} epochs on {hardware}")
        return _verdict(observation, False, f"FAIL ({FailureKind.LOW_ACCURACY.value}): {detail}",
                        FailureKind.LOW_ACCURACY, detail, metrics)
    summary = (f"PASS: test accuracy {metrics.test_accuracy:.2%} in {metrics.train_time_s:.1f}s of training "
               f"({metrics.images_per_s:,.0f} images/s, {metrics.epochs} epochs) on {hardware}")
    return _verdict(observation, True, summary, metrics=metrics)
