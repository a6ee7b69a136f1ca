"""The smoke test's driver: train CIFAR-10 on the cluster and observe the run through the Kubernetes API.

`run_smoke_test` asks what the cluster offers (choices.py: the TrainJob and PyTorchJob APIs, Volcano, a
default StorageClass) and makes the run's spec from that (spec.py), creates a namespace, applies the trainer's
ConfigMap and its workload (a Job, a PyTorchJob or a TrainJob; under Volcano with its PodGroup; see
manifests.py), custom objects dry-run server-side first (dryRun=All), then polls the workload, the PodGroup
and the pods and follows the trainer's log. After every poll it writes down what it saw as an Observation
(observation.py) and asks the pure verdict (verdict.py) whether the run is over: PASS with the accuracy and
the time, or FAIL with the cause as the API states it. With a save directory it copies the model and metrics
back (save.py). What it created is deleted afterwards unless the caller keeps it: the namespace, or (when
the cache is a PVC, which lives in a namespace kept for it) the run's own objects.

Library code: nothing is printed; progress goes to the `on_progress` callback.
"""
from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.inputs.settings import Settings
from provision.kube.client import load_api_client
from provision.kube.pods import (
    CONFIG_REASONS,
    IMAGE_PULL_REASONS,
    memory_limit,
    node_name,
    node_rank,
    pod_name,
    pod_phase,
    restart_count,
    terminated_container,
    terminated_state,
    unschedulable,
    waiting_state,
)
from provision.smoke.choices import Choices, NotOffered, choose, survey
from provision.smoke.gpu_metrics import GpuSampler
from provision.smoke.manifests import CUSTOM_KINDS, RUN_LABEL, SmokeSpec, render
from provision.smoke.observation import (
    Condition,
    Mode,
    Observation,
    PodGroupObservation,
    PodObservation,
    Terminated,
    Waiting,
    epoch_reached,
)
from provision.smoke.save import save_results, write_verdict
from provision.smoke.serve import CIFAR10_CLASSES, Served, serve_and_ask
from provision.smoke.spec import CACHE_NAMESPACE, build_spec, choose_mode, cluster_gpu_generations, new_namespace
from provision.smoke.verdict import FailureKind, Policy, Verdict, failed, judge

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
    # How long `--save` waits for its collector pod to serve the results.
    collect_timeout_s: float = 120.0


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


def _stage(pods: tuple[PodObservation, ...], stage: str, podgroup: PodGroupObservation | None = None) -> str:
    """What the run is doing, for the live view: the last pod that is not yet running says why."""
    if podgroup is not None and podgroup.unschedulable:
        stage = "scheduling (gang)"
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
                 on_progress: Callable[[SmokeProgress], None] | None, sleep: Callable[[float], None],
                 gpu_metrics: bool = False) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.spec = spec
        self.policy = policy
        self.timings = timings
        self.on_progress = on_progress
        self.sleep = sleep
        self.progress = SmokeProgress(namespace=spec.namespace, job=spec.name, mode=mode, gpus=spec.gpus,
                                      nodes=spec.nodes, image=spec.image)
        self.observation = Observation(namespace=spec.namespace, mode=mode, elapsed_s=0.0, workload=spec.kind)
        # What this run created, in order (deleted in reverse when the namespace is shared with the cache).
        self.created: list[dict[str, Any]] = []
        self.shared_namespace = spec.namespace == CACHE_NAMESPACE
        # When each (pod, trouble) was first seen: some troubles only count once they have lasted a while.
        self.first_seen: dict[tuple[str, str], float] = {}
        self.log_lines_seen: dict[str, int] = {}
        # GPU utilisation from the DCGM exporter, where the settings installed it (addons.enabled).
        self.gpus = GpuSampler(api, spec.namespace, timings.request_timeout_s) if mode == "gpu" and gpu_metrics \
            else None

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
    def _create_custom(self, body: dict[str, Any], dry_run: str | None = None) -> Any:
        group, version, plural = CUSTOM_KINDS[body["kind"]]
        extra = {"dry_run": dry_run} if dry_run else {}
        return self._call(self.custom.create_namespaced_custom_object, group, version, self.spec.namespace, plural,
                          body, **extra)

    def apply(self) -> None:
        ns = self.spec.namespace
        creators: dict[str, Callable[[dict[str, Any]], Any]] = {
            "Namespace": lambda body: self._call(self.core.create_namespace, body),
            "ConfigMap": lambda body: self._call(self.core.create_namespaced_config_map, ns, body),
            "PersistentVolumeClaim": lambda body: self._call(self.core.create_namespaced_persistent_volume_claim,
                                                             ns, body),
            "Service": lambda body: self._call(self.core.create_namespaced_service, ns, body),
            "Job": lambda body: self._call(self.batch.create_namespaced_job, ns, body),
        }
        for body in render(self.spec):
            if body["kind"] in CUSTOM_KINDS:
                # The add-ons' schemas are not known here: the API server checks each custom object (and its
                # admission webhooks do, the Trainer's against the runtime created just before) first.
                self._create_custom(body, dry_run="All")
                self._create_custom(body)
            else:
                try:
                    creators[body["kind"]](body)
                except ApiException as exc:
                    # The cache's namespace and claim outlive runs: an earlier run made them.
                    if not (exc.status == 409 and body["kind"] in ("Namespace", "PersistentVolumeClaim")
                            and self.shared_namespace):
                        raise
                    continue
            self.created.append(body)
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
            if self.gpus is not None:
                self.gpus.sample(self.progress.elapsed, {pod.name: pod.node for pod in self.observation.pods
                                                         if pod.phase == "Running" and pod.node})
            verdict = judge(self.observation, self.policy)
            if verdict:
                self.progress.stage = "finished"
                self._notify()
                used = self.gpus.summary() if self.gpus else None
                return replace(verdict, gpu_utilisation=asdict(used) if used else None)
            self._notify()
            self.sleep(self.timings.poll_s)

    def _delete(self, body: dict[str, Any]) -> None:
        ns, name, kind = self.spec.namespace, body["metadata"]["name"], body["kind"]
        if kind in CUSTOM_KINDS:
            group, version, plural = CUSTOM_KINDS[kind]
            self._call(self.custom.delete_namespaced_custom_object, group, version, ns, plural, name,
                       propagation_policy="Background")
        elif kind == "Job":
            self._call(self.batch.delete_namespaced_job, name, ns, propagation_policy="Background")
        elif kind == "Service":
            self._call(self.core.delete_namespaced_service, name, ns)
        elif kind == "ConfigMap":
            self._call(self.core.delete_namespaced_config_map, name, ns)

    def clean_up(self) -> str | None:
        """Remove everything the run created (the namespace, or the run's objects in the cache's namespace);
        returns why that failed, if it did."""
        what = f"namespace {self.spec.namespace}"
        try:
            if not self.shared_namespace:
                self._call(self.core.delete_namespace, self.spec.namespace, propagation_policy="Background")
                return None
            what = f"the objects of run {self.spec.name} in namespace {self.spec.namespace}"
            for body in reversed(self.created):
                try:
                    self._delete(body)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
        except ApiException as exc:
            if exc.status != 404:
                return f"{what} were not deleted: {_describe(exc)}" if self.shared_namespace else \
                    f"{what} was not deleted: {_describe(exc)}"
        except urllib3.exceptions.HTTPError as exc:
            return f"{what} was not deleted: {_describe(exc)}"
        return None

    def _workload_conditions(self) -> tuple[Condition, ...]:
        ns, name = self.spec.namespace, self.spec.name
        if self.spec.workload == "job":
            job = self._call(self.batch.read_namespaced_job_status, name, ns)
            conditions = (job.status.conditions if job.status else None) or []
            return tuple(Condition(c.type, c.status, c.reason, c.message) for c in conditions)
        group, version, plural = CUSTOM_KINDS[self.spec.kind]
        found: Any = self._call(self.custom.get_namespaced_custom_object_status, group, version, ns, plural, name)
        return _conditions((found.get("status") if isinstance(found, dict) else None) or {})

    def _podgroup(self, now: float) -> PodGroupObservation | None:
        if self.spec.scheduler != "volcano":
            return None
        group, version, plural = CUSTOM_KINDS["PodGroup"]
        try:
            # Ours for a Job or PyTorchJob; the Trainer names the TrainJob's after it.
            found: Any = self._call(self.custom.get_namespaced_custom_object_status, group, version,
                                    self.spec.namespace, plural, self.spec.name)
        except ApiException as exc:
            if exc.status == 404:
                return None  # the Trainer has not made it yet
            raise
        spec, status = found.get("spec") or {}, found.get("status") or {}
        seen = PodGroupObservation(name=self.spec.name, phase=status.get("phase"),
                                   min_member=int(spec.get("minMember") or 0), queue=spec.get("queue"),
                                   conditions=_conditions(status))
        if seen.unschedulable:
            seen = replace(seen, unschedulable_since=self._since(f"podgroup/{seen.name}", "unschedulable", now))
        return seen

    def _observe(self) -> Observation:
        ns, name = self.spec.namespace, self.spec.name
        pods = self._call(self.core.list_namespaced_pod, ns, label_selector=f"{RUN_LABEL}={name}").items
        pods.sort(key=lambda p: (int(node_rank(p)) if node_rank(p).isdigit() else 1 << 30, pod_name(p)))
        self._follow_logs(pods[0] if pods else None)
        # The workload is read after its pods: a pod that its deadline killed is then seen beside the workload's
        # DeadlineExceeded condition, and is not blamed on the trainer.
        conditions = self._workload_conditions()
        now = self.progress.elapsed
        podgroup = self._podgroup(now)
        seen = tuple(self._observe_pod(pod, now) for pod in pods)
        self.progress.pods = [PodView(p.name, p.index, p.node or "", p.state) for p in seen]
        self.progress.stage = _stage(seen, self.progress.stage, podgroup)
        return Observation(namespace=ns, mode=self.progress.mode, elapsed_s=now, job_conditions=conditions,
                           workload=self.spec.kind, podgroup=podgroup, pods=seen,
                           log_lines=tuple(self.progress.log_lines))

    def _observe_pod(self, pod: client.V1Pod, now: float) -> PodObservation:
        name = pod_name(pod)
        scheduler_says = unschedulable(pod)
        waiting = waiting_state(pod)
        terminated = terminated_state(pod)
        image_pull = waiting is not None and waiting.reason in IMAGE_PULL_REASONS
        return PodObservation(
            name=name, phase=pod_phase(pod), index=node_rank(pod), node=node_name(pod),
            reason=pod.status.reason if pod.status else None, message=pod.status.message if pod.status else None,
            unschedulable=scheduler_says,
            waiting=Waiting(waiting.reason, waiting.message) if waiting and waiting.reason else None,
            terminated=Terminated(terminated.exit_code, terminated.reason, terminated.message,
                                  terminated_container(pod)) if terminated else None,
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


def _conditions(status: dict[str, Any]) -> tuple[Condition, ...]:
    """A custom object's status.conditions (plain dicts) as Conditions."""
    return tuple(Condition(str(c.get("type", "")), str(c.get("status", "")), c.get("reason"), c.get("message"))
                 for c in status.get("conditions") or [] if isinstance(c, dict))


def _describe(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        try:
            message = json.loads(exc.body or "").get("message")
        except (ValueError, AttributeError):
            message = None
        return f"HTTP {exc.status} {exc.reason}: {message or (exc.body or '').strip()[:200]}"
    return f"{type(exc).__name__}: {exc}"


def smoke_policy(spec: SmokeSpec, timings: Timings, link_gbps: float | None = None) -> Policy:
    """What the verdict holds a run to: its spec (the image and deadline it runs with, the accuracy and speed
    asked for, the mirrors its image may come through), the link between its nodes, and the driver's patience."""
    return Policy(image=spec.image, timeout_s=spec.deadline_s, min_accuracy=spec.min_accuracy,
                  throughput_floors=spec.throughput_floors, mirrors=spec.registry_mirrors,
                  unschedulable_grace_s=timings.unschedulable_grace_s, image_pull_grace_s=timings.image_pull_grace_s,
                  deadline_margin_s=timings.deadline_margin_s,
                  data_timeout_s=spec.data_timeout_s if spec.fetches_data else None, link_gbps=link_gbps,
                  min_link_gbps=spec.min_link_gbps)


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
    workload: str | None = None,
    scheduler: str | None = None,
    save_dir: Path | None = None,
    link_gbps: float | None = None,
    serve: bool = False,
    timings: Timings = Timings(),
    sleep: Callable[[float], None] = time.sleep,
) -> Verdict:
    """Run the CIFAR-10 smoke test on the cluster behind `kubeconfig` and return its verdict.

    Arguments left None take their value from `settings.smoke_test` (see spec.build_spec); `workload` and `scheduler`
    override the settings' (auto: what the cluster offers). `save_dir`: copy the model and metrics there.
    `link_gbps`: the slowest link between the nodes, as preflight read it. The Verdict's exit_code is the
    command's; progress goes to `on_progress` after every poll.
    """
    api = load_api_client(kubeconfig)
    started = time.monotonic()
    run_namespace = namespace or new_namespace()
    # --serve reads the model where --save would: the run keeps it in the cache.
    keep_results = save_dir is not None or serve

    def before_run(cause: FailureKind, detail: str, mode: Mode) -> Verdict:
        nothing_yet = Observation(namespace=run_namespace, mode=mode, elapsed_s=time.monotonic() - started)
        return failed(cause, detail, nothing_yet)

    try:
        mode, generations, choices = _ask_cluster(api, settings, cpu=cpu, nodes=nodes or settings.smoke_test.nodes,
                                                  keep_results=keep_results, workload=workload, scheduler=scheduler,
                                                  timings=timings)
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        return before_run(FailureKind.API_ERROR, f"cannot ask the cluster what it offers: {_describe(exc)}",
                          "cpu" if cpu else "gpu")
    except NotOffered as exc:
        return before_run(FailureKind.ADDON_MISSING, str(exc), "cpu" if cpu else "gpu")
    if choices.cache == "pvc":
        run_namespace = CACHE_NAMESPACE
    spec = build_spec(settings, mode, namespace=run_namespace, gpus=gpus, nodes=nodes, image=image, epochs=epochs,
                      timeout_s=timeout_s, choices=choices, keep_results=keep_results, generations=generations)
    run = _Run(api, spec, mode, smoke_policy(spec, timings, link_gbps), timings, on_progress=on_progress, sleep=sleep,
               gpu_metrics="dcgm_exporter" in settings.addons.enabled)
    saved: list[str] = []
    save_error = None
    served: Served | None = None
    try:
        run.apply()
        verdict = run.watch()
        if serve and verdict.passed:
            node = next((pod.node for pod in run.observation.pods if pod.node), None)
            served = serve_and_ask(api, spec, node=node, pip_index=spec.pip_index, classes=CIFAR10_CLASSES,
                                   timeout_s=settings.addons.timeout_s, poll_s=timings.poll_s, sleep=sleep)
        if save_dir is not None:
            saved, save_error = save_results(api, spec, run.observation, save_dir, timeout_s=timings.collect_timeout_s,
                                             request_timeout_s=timings.request_timeout_s, poll_s=timings.poll_s,
                                             sleep=sleep)
        elif serve:
            # The collector takes the model out of the cache as it goes (nothing is kept on the node).
            with tempfile.TemporaryDirectory() as scratch:
                save_results(api, spec, run.observation, Path(scratch), timeout_s=timings.collect_timeout_s,
                             request_timeout_s=timings.request_timeout_s, poll_s=timings.poll_s, sleep=sleep)
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        verdict = run.fail(FailureKind.API_ERROR, f"the API server refused the smoke test: {_describe(exc)}")
    finally:
        cleanup_error = None if keep else run.clean_up()
    verdict = replace(verdict, kept=keep, cleanup_error=cleanup_error, saved=tuple(saved), save_error=save_error)
    return _finish(verdict, spec, settings, served, save_dir)


def _ask_cluster(api: client.ApiClient, settings: Settings, *, cpu: bool, nodes: int, keep_results: bool,
                 workload: str | None, scheduler: str | None, timings: Timings) -> tuple[Mode, list[str], Choices]:
    """What the run will be on this cluster, before anything is created: its mode, the GPU generations its nodes
    are labelled with, and what `auto` becomes for the workload, scheduler and cache. Raises what the API raises,
    and NotOffered."""
    mode = choose_mode(api, settings.smoke_test.mode, cpu, timings.request_timeout_s, settings.smoke_gpu_resource)
    generations = cluster_gpu_generations(api, timings.request_timeout_s) if mode == "gpu" else []
    offer = survey(api, settings.addons.volcano_queue, timings.request_timeout_s)
    choices = choose(offer, settings, nodes=nodes, save=keep_results, workload=workload, scheduler=scheduler)
    return mode, generations, choices


def _finish(verdict: Verdict, spec: SmokeSpec, settings: Settings, served: Served | None,
            save_dir: Path | None) -> Verdict:
    """The run's verdict with what followed it: the shared GPUs it trained on, the model served (a failed
    answer fails the test), and the verdict itself written beside the saved results."""
    if verdict.passed and spec.shared_pods > 1:
        verdict = replace(verdict, summary=f"{verdict.summary}; {spec.shared_pods} pods trained at once on shared "
                                           f"GPUs ({settings.gpu.sharing}, {settings.gpu.replicas} per GPU)")
    if served is not None:
        verdict = replace(verdict, served=asdict(served))
        if not served.ok:
            verdict = replace(verdict, passed=False, cause=FailureKind.SERVE_FAILED, detail=served.detail,
                              summary=f"FAIL ({FailureKind.SERVE_FAILED.value}): trained, but {served.detail}")
    if save_dir is not None:
        save_dir.mkdir(parents=True, exist_ok=True)
        write_verdict(save_dir, verdict)
        verdict = replace(verdict, saved=(*verdict.saved, "verdict.json"))
    return verdict
