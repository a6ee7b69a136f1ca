"""The smoke test's verdict, decided from what the driver observed (observation.py) and nothing else.

`judge(observation, policy)` answers PASS with the trainer's metrics, FAIL with the cause as the API
states it and what to do about it, or None while the run is worth watching longer. It reads no clock and
calls no API: the driver observes, this module decides, and tests feed it recorded observations.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from decimal import ROUND_FLOOR, Decimal
from enum import StrEnum
from typing import Any

from provision.inputs.settings import GPU_RESOURCE
from provision.kube.pods import CONFIG_REASONS, HOPELESS_IMAGE_REASONS, IMAGE_PULL_REASONS, OOM_KILLED
from provision.smoke.observation import Condition, Mode, Observation, PodObservation, epoch_reached

DEVICE_PLUGIN_HINT = ("check that the NVIDIA device plugin runs on the GPU nodes (kubectl -n kube-system get pods "
                      "-l app.kubernetes.io/name=nvidia-device-plugin), or run the smoke test with --cpu")
# How many lines of the trainer's log a verdict keeps.
LOG_TAIL_LINES = 20
# The init container that fetches CIFAR-10 into the cache (smoke/manifests.py names it).
FETCH_CONTAINER = "fetch-data"
# coreutils `timeout` exits with this when it stopped the command.
TIMEOUT_EXIT = 124
# An all-reduce's bus bandwidth under this fraction of the link speed is "far below" it.
FAR_BELOW_LINK = 0.25
# What torch and NCCL print when the ranks never meet, and when NCCL itself fails.
RENDEZVOUS_ERRORS = re.compile(
    r"RendezvousTimeoutError|RendezvousConnectionError|RendezvousClosedError|DistStoreError|DistNetworkError|"
    r"Timed out after \d+ seconds waiting for clients|rendezvous host \S+ never resolved|"
    r"The client socket has timed out|Connection refused.*(?:29500|rendezvous|TCPStore)", re.IGNORECASE)
NCCL_ERRORS = re.compile(
    r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ncclRemoteError|ncclInvalidUsage|"
    r"ncclInvalidArgument|NCCL WARN|ProcessGroupNCCL.*(?:error|timed? ?out|watchdog)|NCCL communicator was aborted|"
    r"DistBackendError")
RENDEZVOUS_HINT = ("a rank never joined: a pod could not start (run under Volcano, smoke_test.scheduler: volcano, so "
                   "the pods start together or not at all), or the pods cannot reach each other on port 29500 (a "
                   "firewall, a NetworkPolicy; with host_network, the nodes' own firewall)")
NCCL_HINT = ("NCCL could not set up or keep its communicator: run with smoke_test.env {NCCL_DEBUG: INFO} to see why, "
             "and check that NCCL_SOCKET_IFNAME / NCCL_IB_HCA name interfaces the nodes have")


class FailureKind(StrEnum):
    UNSCHEDULABLE = "unschedulable"
    IMAGE_PULL = "image-pull"
    OOM_KILLED = "oom-killed"
    DEADLINE_EXCEEDED = "deadline-exceeded"
    LOW_ACCURACY = "low-accuracy"
    TOO_SLOW = "too-slow"
    TRAINER_FAILED = "trainer-failed"
    POD_CONFIG = "pod-config"
    TIMEOUT = "timeout"
    API_ERROR = "api-error"
    # Volcano cannot place the run's pods as one gang.
    GANG_UNSCHEDULABLE = "unschedulable-gang"
    # The ranks never met (torchrun's rendezvous), or NCCL failed between them.
    RENDEZVOUS_TIMEOUT = "rendezvous-timeout"
    NCCL_ERROR = "nccl-error"
    # The init container did not fill the cache with CIFAR-10 (in its own deadline).
    DATA_FETCH = "data-fetch"
    # The workload or scheduler asked for is not installed on the cluster.
    ADDON_MISSING = "addon-missing"
    # `--serve`: the trained model's InferenceService did not answer the picture with a class and a score.
    SERVE_FAILED = "serve-failed"
    # `--pipeline`: the pipeline run did not succeed.
    PIPELINE_FAILED = "pipeline-failed"


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
    # After the first epoch (which pays for warm-up and autotuning); 0 when the trainer did not say.
    steady_images_per_s: float = 0.0
    precision: str = ""

    @property
    def per_gpu_images_per_s(self) -> float | None:
        """The steady speed of one GPU (the trainer reports the whole run's: every rank's images); None on CPU
        or when the trainer did not say."""
        if not self.gpu_count or not self.steady_images_per_s:
            return None
        return self.steady_images_per_s / self.gpu_count

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
class Bandwidth:
    """bandwidth.py's measurement of the all-reduce the multi-node run timed before training."""

    busbw_gbps: float
    algbw_gbps: float = 0.0
    backend: str = ""
    device: str = ""
    world_size: int = 0
    nodes: int = 0
    size_bytes: int = 0
    iterations: int = 0
    seconds: float = 0.0
    link_iface: str | None = None
    link_gbps: float | None = None

    @classmethod
    def parse(cls, text: str | None) -> Bandwidth | None:
        try:
            data = json.loads(text or "")
        except ValueError:
            return None
        report = data.get("allreduce") if isinstance(data, dict) else None
        if not isinstance(report, dict) or not isinstance(report.get("busbw_gbps"), (int, float)):
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in report.items() if k in known})


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
    # What ran the training (Job, TrainJob, PyTorchJob) and, for several nodes, its all-reduce bandwidth.
    workload: str = "Job"
    bandwidth: Bandwidth | None = None
    link_gbps: float | None = None
    # Said beside the verdict, never its cause: a slow link, a bandwidth far below the link.
    warnings: tuple[str, ...] = ()
    # `smoke-test --save DIR`: the files written there, or why they could not be.
    saved: tuple[str, ...] = ()
    save_error: str | None = None
    # `smoke-test --serve`: what the InferenceService answered (smoke/serve.py's Served, as a mapping).
    served: dict[str, Any] | None = None
    # Mean and peak GPU utilisation (%) of the run's GPUs while it trained, read from the DCGM exporter when the
    # cluster runs it, and the metric it was read from (smoke/gpu_metrics.py's GpuUtilisation, as a mapping); None
    # without it.
    gpu_utilisation: dict[str, Any] | None = None
    # `smoke-test --pipeline`: the run's steps in order, each {"name", "state"[, "seconds", "error"]} as Kubeflow
    # Pipelines reports it.
    pipeline_steps: tuple[dict[str, Any], ...] = ()

    @property
    def exit_code(self) -> int:
        return 0 if self.passed and not self.save_error else 1


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
    # GPU model -> the steady images/s one GPU must reach (settings.smoke_test.throughput_floors).
    throughput_floors: Mapping[str, float]
    # The speed below which the link between the nodes is too slow (Gb/s), and the slowest link as preflight read
    # it (None: unknown).
    min_link_gbps: float
    link_gbps: float | None = None
    # The fetch into the cache's own deadline (a part of timeout_s); None when the run fetches nothing.
    data_timeout_s: int | None = None
    # Polls in a row the API server may leave unanswered before the run is given up.
    api_errors_tolerated: int = 3


def throughput_floor(device: str, floors: Mapping[str, float]) -> tuple[str, float] | None:
    """The floor for a GPU model named in `device` (the longest key it contains, case-insensitively), or None
    for a model the table does not list."""
    name = device.upper()
    matching = [(model, floor) for model, floor in floors.items() if _names_model(name, model.upper())]
    return max(matching, key=lambda item: len(item[0])) if matching else None


def _names_model(device: str, model: str) -> bool:
    # "A10" must not match "A100": the model ends where the device name's word does.
    start = device.find(model)
    while start >= 0:
        end = start + len(model)
        if (start == 0 or not device[start - 1].isalnum()) and (end == len(device) or not device[end].isalnum()):
            return True
        start = device.find(model, start + 1)
    return False


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


def bandwidth_of(observation: Observation) -> Bandwidth | None:
    """The all-reduce measurement rank 0 printed, if the run got that far."""
    return next(filter(None, map(Bandwidth.parse, reversed(observation.log_lines))), None)


def bandwidth_warnings(bandwidth: Bandwidth | None, link_gbps: float | None, min_link_gbps: float) -> tuple[str, ...]:
    """What to say beside the verdict about the network between the nodes (seed 004's bottleneck)."""
    if bandwidth is None or bandwidth.nodes < 2:
        return ()
    warnings = []
    if link_gbps is not None and link_gbps < min_link_gbps:
        warnings.append(f"the nodes are linked at {link_gbps:g} Gb/s, under {min_link_gbps:g} Gb/s: multi-node "
                        f"training is throttled by its all-reduce ({bandwidth.busbw_gbps:.2f} Gb/s measured); train "
                        "on one node or on a faster network")
    if link_gbps is not None and bandwidth.busbw_gbps < FAR_BELOW_LINK * link_gbps:
        warnings.append(f"the all-reduce's bus bandwidth, {bandwidth.busbw_gbps:.2f} Gb/s, is far below the link's "
                        f"{link_gbps:g} Gb/s: NCCL may use a slower interface (smoke_test.env NCCL_SOCKET_IFNAME), "
                        "TCP instead of RDMA (NCCL_IB_HCA, smoke_test.host_network, rdma resources), or the pod "
                        "network's overlay")
    return tuple(warnings)


def _verdict(observation: Observation, passed: bool, summary: str, cause: FailureKind | None = None,
             detail: str = "", metrics: TrainerMetrics | None = None, policy: Policy | None = None) -> Verdict:
    bandwidth = bandwidth_of(observation)
    link = (policy.link_gbps if policy else None) or (bandwidth.link_gbps if bandwidth else None)
    warnings = bandwidth_warnings(bandwidth, link, policy.min_link_gbps if policy else 10.0)
    return Verdict(passed=passed, summary=summary, namespace=observation.namespace, mode=observation.mode,
                   elapsed_s=round(observation.elapsed_s, 1), cause=cause, detail=detail, metrics=metrics,
                   log_tail=observation.log_lines[-LOG_TAIL_LINES:], workload=observation.workload,
                   bandwidth=bandwidth, link_gbps=link, warnings=warnings)


def _job_condition(observation: Observation, *types: str) -> Condition | None:
    return next((c for c in observation.job_conditions if c.type in types and c.status == "True"), None)


def _past_deadline(condition: Condition) -> bool:
    # Jobs and TrainJobs say DeadlineExceeded; the Training Operator says it in the message.
    return condition.reason == "DeadlineExceeded" or "deadline" in (condition.message or "").lower()


def _deadline(policy: Policy) -> str:
    if policy.data_timeout_s:
        return (f"{policy.timeout_s}s: {policy.timeout_s - policy.data_timeout_s}s of training and "
                f"{policy.data_timeout_s}s for the data")
    return f"{policy.timeout_s}s"


def _judge_run(observation: Observation, policy: Policy) -> Verdict | None:
    workload = observation.workload
    for pod in observation.pods:
        if pod.terminated and pod.terminated.reason == OOM_KILLED:
            node = f" on node {pod.node}" if pod.node else ""
            which = "fetch of the data" if pod.terminated.container == FETCH_CONTAINER else "trainer"
            return failed(FailureKind.OOM_KILLED, f"the {which} in pod {pod.name} was OOMKilled (memory limit "
                          f"{pod.memory_limit or 'none'}){node}: the node or the limit has too little memory for the "
                          "data set", observation)
    if _job_condition(observation, "Complete", "Succeeded"):
        return _judge_metrics(observation, policy)
    job_failed = _job_condition(observation, "Failed", "FailureTarget")
    # The deadline kills the pods too: such a pod failed because of the deadline, not of the trainer.
    if job_failed and _past_deadline(job_failed):
        return failed(FailureKind.DEADLINE_EXCEEDED, f"the {workload} ran past its activeDeadlineSeconds "
                      f"({_deadline(policy)}) and was stopped; {_where_it_was(observation)}", observation)
    failed_pod = next((pod for pod in observation.pods if pod.phase == "Failed"), None)
    if failed_pod:
        return _trainer_failed(failed_pod, observation, policy)
    if job_failed:
        text = f"{job_failed.reason}: {job_failed.message}"
        kind, hint = _classify(text, observation)
        return failed(kind, f"the {workload} failed: {text}{hint}", observation)
    gang = _judge_gang(observation, policy)
    if gang:
        return gang
    for pod in observation.pods:
        verdict = _judge_not_started(pod, observation, policy)
        if verdict:
            return verdict
    return None


def _judge_gang(observation: Observation, policy: Policy) -> Verdict | None:
    group = observation.podgroup
    message = group.unschedulable if group else None
    if group is None or message is None or not _lasted(group.unschedulable_since, policy.unschedulable_grace_s,
                                                       observation):
        return None
    hint = f"; {DEVICE_PLUGIN_HINT}" if GPU_RESOURCE in message else ""
    return failed(FailureKind.GANG_UNSCHEDULABLE,
                  f"the {group.min_member} pods of the {observation.workload} cannot be placed as one gang (PodGroup "
                  f"{group.name} in queue {group.queue or 'default'}): {message}; none of them was started, so no "
                  f"rank waits on a half-formed rendezvous{hint}", observation)


def _lasted(since: float | None, grace_s: float, observation: Observation) -> bool:
    # A trouble without a first sighting is seen for the first time now.
    return observation.elapsed_s - (observation.elapsed_s if since is None else since) >= grace_s


def _judge_not_started(pod: PodObservation, observation: Observation, policy: Policy) -> Verdict | None:
    # Under Volcano the gang is judged whole (above): a pod of it waits as long as its PodGroup does.
    if pod.unschedulable and observation.podgroup is None:
        if not _lasted(pod.unschedulable_since, policy.unschedulable_grace_s, observation):
            return None
        hint = f"; {DEVICE_PLUGIN_HINT}" if GPU_RESOURCE in pod.unschedulable else ""
        return failed(FailureKind.UNSCHEDULABLE, f"pod {pod.name} cannot be scheduled: {pod.unschedulable}{hint}",
                      observation)
    waiting = pod.waiting
    if waiting is None or pod.unschedulable:
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


def classify_failure(text: str) -> FailureKind:
    """What a failed trainer's own words (its termination message, its log) say went wrong."""
    if NCCL_ERRORS.search(text):
        return FailureKind.NCCL_ERROR
    if RENDEZVOUS_ERRORS.search(text):
        return FailureKind.RENDEZVOUS_TIMEOUT
    return FailureKind.TRAINER_FAILED


def _classify(text: str, observation: Observation) -> tuple[FailureKind, str]:
    kind = classify_failure("\n".join([text, *observation.log_lines[-LOG_TAIL_LINES:]]))
    hint = {FailureKind.NCCL_ERROR: NCCL_HINT, FailureKind.RENDEZVOUS_TIMEOUT: RENDEZVOUS_HINT}.get(kind)
    return kind, f"; {hint}" if hint else ""


def _last_words(message: str, reason: str | None) -> str:
    try:
        reported = json.loads(message)
    except ValueError:
        reported = None
    if isinstance(reported, dict) and reported.get("error"):
        return str(reported["error"])
    return message.splitlines()[-1] if message else (reason or "no message")


def _trainer_failed(pod: PodObservation, observation: Observation, policy: Policy) -> Verdict:
    terminated = pod.terminated
    if terminated is None:
        return failed(FailureKind.TRAINER_FAILED, f"pod {pod.name} failed: {pod.reason or 'Failed'}: "
                      f"{pod.message or 'no message'}", observation)
    message = (terminated.message or "").strip()
    cause = _last_words(message, terminated.reason)
    if terminated.container == FETCH_CONTAINER:
        node = f" on node {pod.node}" if pod.node else ""
        if terminated.exit_code == TIMEOUT_EXIT:
            return failed(FailureKind.DATA_FETCH, f"fetching CIFAR-10 into the cache{node} did not finish within its "
                          f"{policy.data_timeout_s or '?'}s (smoke_test.data_timeout_s): a slow or unreachable source; "
                          "set mirrors.cifar10_archive to a nearer copy", observation)
        return failed(FailureKind.DATA_FETCH, f"fetching CIFAR-10 into the cache{node} failed (exit "
                      f"{terminated.exit_code}): {cause}", observation)
    kind, hint = _classify(message, observation)
    return failed(kind, f"the trainer in pod {pod.name} exited with code {terminated.exit_code}: {cause}{hint}",
                  observation)


def _mark(accuracy: float) -> str:
    """0.9 -> '0.90', 0.935 -> '0.935': as many decimals as the setting has, at least two."""
    text = f"{accuracy:.4f}".rstrip("0")
    return text + "0" * (2 - len(text.partition(".")[2]))


def accuracy_text(accuracy: float) -> str:
    """An accuracy to four places, rounded down: 0.89999 is 0.8999, never 0.9000 beside a
    threshold of 0.90."""
    return str(Decimal(repr(accuracy)).quantize(Decimal("0.0001"), rounding=ROUND_FLOOR))


def _speed_problem(metrics: TrainerMetrics, policy: Policy) -> str | None:
    """A GPU run whose steady-state speed per GPU is under its model's floor: accuracy alone passes a GPU that
    trains on a slow path (a throttled clock, a fallback kernel, PCIe-bound data)."""
    per_gpu = metrics.per_gpu_images_per_s
    floor = throughput_floor(metrics.device, policy.throughput_floors)
    if per_gpu is None or floor is None or per_gpu >= floor[1]:
        return None
    precision = metrics.precision or "precision unknown"
    return (f"{per_gpu:,.0f} images/s per GPU after warm-up on {metrics.device} ({precision}), under the floor of "
            f"{floor[1]:,.0f} for {floor[0]}: check the "
            "GPU's clocks and power (nvidia-smi -q -d CLOCK,POWER), its PCIe link, and that the driver and image match; "
            "or lower smoke_test.throughput_floors if the figure is expected")


def _judge_metrics(observation: Observation, policy: Policy) -> Verdict:
    # The termination message first (it is the trainer's own), the log's last JSON line otherwise.
    messages = [pod.terminated.message for pod in observation.pods if pod.terminated]
    metrics = next(filter(None, map(TrainerMetrics.parse, [*messages, *reversed(observation.log_lines)])), None)
    if metrics is None:
        return failed(FailureKind.TRAINER_FAILED, "the Job completed but the trainer reported no metrics "
                      "(no JSON in the termination message or the log)", observation)
    hardware = f"{metrics.gpu_count}x {metrics.device}" if metrics.gpu_count else f"CPU x{metrics.world_size}"
    if metrics.test_accuracy < policy.min_accuracy:
        detail = (f"test accuracy {accuracy_text(metrics.test_accuracy)} is under the threshold {_mark(policy.min_accuracy)} "
                  f"after {metrics.epochs} epochs on {hardware}")
        return _verdict(observation, False, f"FAIL ({FailureKind.LOW_ACCURACY.value}): {detail}",
                        FailureKind.LOW_ACCURACY, detail, metrics, policy)
    speed = _speed_problem(metrics, policy)
    if speed:
        return _verdict(observation, False, f"FAIL ({FailureKind.TOO_SLOW.value}): {speed}", FailureKind.TOO_SLOW,
                        speed, metrics, policy)
    summary = (f"PASS: test accuracy {metrics.test_accuracy:.2%} in {metrics.train_time_s:.1f}s of training "
               f"({metrics.images_per_s:,.0f} images/s, {metrics.epochs} epochs) on {hardware}")
    per_gpu = metrics.per_gpu_images_per_s
    if per_gpu is not None:
        floor = throughput_floor(metrics.device, policy.throughput_floors)
        summary += (f"; {per_gpu:,.0f} images/s per GPU after warm-up"
                    + (f" (floor for {floor[0]}: {floor[1]:,.0f})" if floor else " (no floor for this model)"))
    bandwidth = bandwidth_of(observation)
    if bandwidth and bandwidth.nodes > 1:
        link = policy.link_gbps or bandwidth.link_gbps
        summary += (f"; all-reduce {bandwidth.busbw_gbps:.2f} Gb/s bus bandwidth"
                    + (f" on a {link:g} Gb/s link" if link else ""))
    return _verdict(observation, True, summary, metrics=metrics, policy=policy)
