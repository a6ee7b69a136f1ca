"""The smoke test's verdict, for each way a run can end, against a stand-in API server driven through the
real kubernetes client: the cluster "says" what a real one would, and the driver must read it right."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from provision.inputs.settings import Settings, parse_settings
from provision.resources import TRAINER_DIR
from provision.smoke import driver as smoke
from provision.smoke.driver import SmokeProgress, Timings, run_smoke_test
from provision.smoke.observation import Observation
from provision.smoke.verdict import FailureKind, Policy, Verdict, judge
from tests.support.apiserver import FakeApiServer, status
from tests.support.kube_objects import node
from tests.support.smoke_run import (
    EPOCH_LOG,
    IMAGE,
    JOB,
    METRICS,
    NS,
    RECORDED,
    Cluster,
    job,
    load_observation,
    succeeded,
    timeless,
    trainer_pod,
)

FAST = Timings(poll_s=0.0, unschedulable_grace_s=0.0, image_pull_grace_s=0.0, deadline_margin_s=5.0,
               request_timeout_s=5.0)


@dataclass
class Outcome:
    verdict: Verdict
    api: FakeApiServer
    progress: list[SmokeProgress]
    lines: list[str]

    def posted(self, kind_path: str) -> dict[str, Any]:
        return next(r.json for r in self.api.requests_to("POST") if r.path.endswith(kind_path))


def run(tmp_path: Path, cluster: Cluster, settings: Settings | None = None, **kwargs: Any) -> Outcome:
    progress: list[SmokeProgress] = []
    lines: list[str] = []

    def record(p: SmokeProgress) -> None:
        progress.append(SmokeProgress(**{**p.__dict__, "pods": list(p.pods)}))
        lines.extend(p.new_lines)

    with FakeApiServer() as api:
        cluster.serve(api)
        verdict = run_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), settings or Settings(),
                                 namespace=NS, timings=FAST, on_progress=record, sleep=lambda _: None, **kwargs)
    return Outcome(verdict, api, progress, lines)


# -- the verdicts ----------------------------------------------------------------------------------
def test_a_run_that_trains_to_accuracy_passes_and_leaves_nothing_behind(tmp_path: Path) -> None:
    cluster = Cluster(steps=[
        (job(), [trainer_pod("Pending", waiting=("ContainerCreating", ""))], ""),
        (job(), [trainer_pod("Running")], "".join(EPOCH_LOG.splitlines(keepends=True)[:4])),
        (job(("Complete", "", "")), [succeeded(METRICS)], EPOCH_LOG + json.dumps(METRICS) + "\n"),
    ])
    outcome = run(tmp_path, cluster)
    verdict = outcome.verdict
    assert verdict.passed and verdict.exit_code == 0 and verdict.cause is None
    assert verdict.summary.startswith("PASS: test accuracy 94.12% in 5.1s")
    assert "1x NVIDIA H100 80GB HBM3" in verdict.summary
    assert verdict.metrics is not None and verdict.metrics.images_per_s == 98765.4
    assert verdict.mode == "gpu"
    # The live view saw the pod start and the epochs go by; the log arrived line by line, once each.
    assert any(p.stage == "starting" for p in outcome.progress)
    assert max(p.epoch for p in outcome.progress) == 10 and outcome.progress[-1].epochs == 10
    assert outcome.lines.count("epoch 3/10  loss 1.0  train_acc 0.9  time 0.50s  images/s 100000") == 1
    # What was applied: the trainer's code, and a Job asking for the GPU.
    configmap = outcome.posted("/configmaps")
    assert set(configmap["data"]) == {path.name for path in TRAINER_DIR.glob("*.py")} >= {"train.py", "infer.py"}
    container = outcome.posted("/jobs")["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["image"] == IMAGE
    assert "--device cuda" in container["args"][0] and "--epochs 10" in container["args"][0]
    deleted = outcome.api.requests_to("DELETE", f"/api/v1/namespaces/{NS}")
    assert len(deleted) == 1 and not verdict.kept


def test_no_free_gpu_fails_with_the_schedulers_words_and_the_fix(tmp_path: Path) -> None:
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available."
    cluster = Cluster(steps=[(job(), [trainer_pod("Pending", unschedulable=message)], "")])
    verdict = run(tmp_path, cluster, settings=parse_settings({"smoke_test": {"mode": "gpu"}})).verdict
    assert not verdict.passed and verdict.exit_code == 1
    assert verdict.cause is FailureKind.UNSCHEDULABLE
    assert "3 Insufficient nvidia.com/gpu" in verdict.detail
    assert "nvidia-device-plugin" in verdict.detail


def test_unschedulable_is_not_final_while_the_grace_period_lasts(tmp_path: Path) -> None:
    message = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    cluster = Cluster(steps=[
        (job(), [trainer_pod("Pending", unschedulable=message)], ""),
        (job(), [trainer_pod("Running")], EPOCH_LOG),
        (job(("Complete", "", "")), [succeeded(METRICS)], EPOCH_LOG),
    ])
    progress: list[str] = []
    with FakeApiServer() as api:
        cluster.serve(api)
        verdict = run_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), Settings(), namespace=NS,
                                 timings=Timings(poll_s=0.0, unschedulable_grace_s=30.0), sleep=lambda _: None,
                                 on_progress=lambda p: progress.append(p.stage))
    assert verdict.passed, verdict.summary
    assert "scheduling" in progress


def test_an_image_that_cannot_be_pulled_is_named_in_the_verdict(tmp_path: Path) -> None:
    image = "docker.io/pytorch/pytorch:9.9-does-not-exist"
    pull = ("ImagePullBackOff", f'Back-off pulling image "{image}"')
    cluster = Cluster(steps=[(job(), [trainer_pod("Pending", waiting=pull)], "")])
    verdict = run(tmp_path, cluster, image=image).verdict
    assert verdict.cause is FailureKind.IMAGE_PULL
    assert f"image {image} cannot be pulled on node gpu-1" in verdict.detail
    assert "no mirror is configured for docker.io" in verdict.detail


def test_an_image_pull_through_a_mirror_says_which_mirror(tmp_path: Path) -> None:
    pull = ("ErrImagePull", "rpc error: code = NotFound")
    cluster = Cluster(steps=[(job(), [trainer_pod("Pending", waiting=pull)], "")])
    verdict = run(tmp_path, cluster, settings=parse_settings({"mirrors": {"profile": "cn"}})).verdict
    assert verdict.cause is FailureKind.IMAGE_PULL
    assert "https://docker.m.daocloud.io" in verdict.detail


def test_a_trainer_killed_for_memory_is_reported_as_oomkilled(tmp_path: Path) -> None:
    killed = trainer_pod("Failed", terminated={"exitCode": 137, "reason": "OOMKilled"})
    cluster = Cluster(steps=[(job(), [trainer_pod("Running")], EPOCH_LOG[:80]),
                             (job(("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")),
                              [killed], EPOCH_LOG[:80])])
    verdict = run(tmp_path, cluster).verdict
    assert verdict.cause is FailureKind.OOM_KILLED
    assert "OOMKilled (memory limit 12Gi) on node gpu-1" in verdict.detail


def test_a_job_past_its_deadline_says_how_far_training_got(tmp_path: Path) -> None:
    partial = "".join(EPOCH_LOG.splitlines(keepends=True)[:4])
    cluster = Cluster(steps=[
        (job(), [trainer_pod("Running")], partial),
        (job(("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")),
         [trainer_pod("Failed", terminated={"exitCode": 143, "reason": "Error"})], partial),
    ])
    verdict = run(tmp_path, cluster, timeout_s=300).verdict
    assert verdict.cause is FailureKind.DEADLINE_EXCEEDED
    assert "activeDeadlineSeconds (300s)" in verdict.detail
    assert "epoch 3/10" in verdict.detail


def test_the_observations_the_verdict_tests_replay_are_what_the_driver_records(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/data/smoke/ was recorded from runs like these: when what the driver observes changes, it shows here."""
    judged: list[Observation] = []

    def recording(observation: Observation, policy: Policy) -> Verdict | None:
        judged.append(observation)
        return judge(observation, policy)

    monkeypatch.setattr(smoke, "judge", recording)
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available."
    run(tmp_path, Cluster(steps=[(job(), [trainer_pod("Pending", unschedulable=message)], "")]))
    assert timeless(judged[-1]) == timeless(load_observation(RECORDED / "unschedulable.json"))
    partial = "".join(EPOCH_LOG.splitlines(keepends=True)[:4])
    run(tmp_path, Cluster(steps=[
        (job(), [trainer_pod("Running")], partial),
        (job(("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")),
         [trainer_pod("Failed", terminated={"exitCode": 143, "reason": "Error"})], partial),
    ]))
    assert timeless(judged[-1]) == timeless(load_observation(RECORDED / "deadline-exceeded.json"))


def test_accuracy_under_the_threshold_fails(tmp_path: Path) -> None:
    poor = METRICS | {"test_accuracy": 0.4213}
    cluster = Cluster(steps=[(job(("Complete", "", "")), [succeeded(poor)], EPOCH_LOG)])
    verdict = run(tmp_path, cluster).verdict
    assert not verdict.passed and verdict.exit_code == 1
    assert verdict.cause is FailureKind.LOW_ACCURACY
    assert "test accuracy 0.4213 is under the threshold 0.90" in verdict.detail
    assert verdict.metrics is not None and verdict.metrics.test_accuracy == 0.4213


def test_the_trainers_own_error_is_the_cause(tmp_path: Path) -> None:
    error = {"error": "CUDA is not available in this container: check that the pod requested nvidia.com/gpu"}
    failed = trainer_pod("Failed", terminated={"exitCode": 2, "reason": "Error", "message": json.dumps(error)})
    cluster = Cluster(steps=[(job(), [failed], "error: CUDA is not available\n")])
    verdict = run(tmp_path, cluster).verdict
    assert verdict.cause is FailureKind.TRAINER_FAILED
    assert "exited with code 2: CUDA is not available in this container" in verdict.detail
    assert verdict.log_tail == ("error: CUDA is not available",)


def test_a_crash_without_a_message_falls_back_to_the_last_log_line(tmp_path: Path) -> None:
    crashed = trainer_pod("Failed", terminated={"exitCode": 1, "reason": "Error",
                                        "message": "Traceback (most recent call last):\nRuntimeError: CUDA error: unknown error"})
    cluster = Cluster(steps=[(job(), [crashed], "")])
    verdict = run(tmp_path, cluster).verdict
    assert verdict.cause is FailureKind.TRAINER_FAILED
    assert verdict.detail.endswith("exited with code 1: RuntimeError: CUDA error: unknown error")


def test_keep_leaves_the_namespace_for_inspection(tmp_path: Path) -> None:
    cluster = Cluster(steps=[(job(("Complete", "", "")), [succeeded(METRICS)], EPOCH_LOG)])
    outcome = run(tmp_path, cluster, keep=True)
    assert outcome.verdict.passed and outcome.verdict.kept
    assert outcome.api.requests_to("DELETE") == []


def test_a_cluster_without_gpus_runs_the_cpu_variant(tmp_path: Path) -> None:
    cpu_metrics = METRICS | {"device": "cpu", "device_type": "cpu", "gpu_count": 0, "cuda_version": None}
    cluster = Cluster(nodes=[node("lab-1"), node("lab-2")],
                      steps=[(job(("Complete", "", "")), [succeeded(cpu_metrics)], EPOCH_LOG)])
    outcome = run(tmp_path, cluster)
    assert outcome.verdict.mode == "cpu" and outcome.verdict.passed
    assert "on CPU" in outcome.verdict.summary
    container = outcome.posted("/jobs")["spec"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert "--device cpu" in container["args"][0]
    # The trainer's own CPU defaults apply: the GPU epoch count is not forced on a CPU.
    assert "--epochs" not in container["args"][0]


def test_several_nodes_get_an_indexed_job_and_a_headless_service(tmp_path: Path) -> None:
    pods = [succeeded(METRICS | {"world_size": 4, "gpu_count": 4, "nodes": 2}) for _ in range(2)]
    for i, p in enumerate(pods):
        p["metadata"]["name"] = f"{JOB}-{i}-xyz"
        p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = str(i)
    cluster = Cluster(nodes=[node("gpu-1", 2), node("gpu-2", 2)],
                      steps=[(job(("Complete", "", "")), list(reversed(pods)), EPOCH_LOG)])
    outcome = run(tmp_path, cluster, nodes=2, gpus=2)
    assert outcome.verdict.passed and "4x NVIDIA H100" in outcome.verdict.summary
    service = outcome.posted("/services")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    spec = outcome.posted("/jobs")["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == 2
    # The log followed is pod index 0's.
    log_reads = outcome.api.requests_to("GET", f"/api/v1/namespaces/{NS}/pods/")
    assert {r.params["pod"] for r in log_reads} == {f"{JOB}-0-xyz"}


def test_a_refused_job_is_an_api_error_and_the_namespace_is_still_removed(tmp_path: Path) -> None:
    cluster = Cluster(steps=[(job(), [], "")])
    with FakeApiServer() as api:
        cluster.serve(api)
        api.add("POST", "/apis/batch/v1/namespaces/{ns}/jobs",
                status(403, "Forbidden", 'jobs.batch is forbidden: User "dev" cannot create resource "jobs"'))
        verdict = run_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), Settings(), namespace=NS,
                                 timings=FAST, sleep=lambda _: None)
        deleted = api.requests_to("DELETE", f"/api/v1/namespaces/{NS}")
    assert verdict.cause is FailureKind.API_ERROR
    assert 'HTTP 403 Forbidden: jobs.batch is forbidden: User "dev"' in verdict.detail
    assert len(deleted) == 1


def test_a_job_that_never_ends_times_out_on_the_drivers_side(tmp_path: Path) -> None:
    cluster = Cluster(steps=[(job(), [trainer_pod("Running")], "")])
    with FakeApiServer() as api:
        cluster.serve(api)
        verdict = run_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), Settings(), namespace=NS,
                                 timeout_s=1, timings=Timings(poll_s=0.05, deadline_margin_s=0.0))
    assert verdict.cause is FailureKind.TIMEOUT
    assert "no result after 1s" in verdict.detail and f"{JOB}-abcde Running" in verdict.detail


def test_a_missing_kubeconfig_is_a_one_line_error(tmp_path: Path) -> None:
    from provision.errors import BootstrapError
    with pytest.raises(BootstrapError, match="kubeconfig not found"):
        run_smoke_test(tmp_path / "nope", Settings())


def test_epochs_follow_the_settings_and_cpu_runs_keep_the_trainers_shorter_default() -> None:
    from provision.smoke.spec import build_spec

    assert build_spec(Settings(), "gpu", namespace=NS).epochs == 10
    assert build_spec(Settings(), "cpu", namespace=NS).epochs is None
    assert build_spec(parse_settings({"smoke_test": {"epochs": 4}}), "cpu", namespace=NS).epochs == 4
    assert build_spec(Settings(), "cpu", namespace=NS, epochs=1).epochs == 1
    spec = build_spec(parse_settings({"smoke_test": {"gpus": 8, "nodes": 2}}), "cpu", namespace=NS, image="x:1")
    assert (spec.gpus, spec.nodes, spec.image) == (0, 2, "x:1")


def test_the_pip_index_setting_reaches_every_training_container() -> None:
    from provision.smoke.manifests import render
    from provision.smoke.spec import build_spec

    settings = parse_settings({"mirrors": {"pip_index": "https://pypi.example.com/simple"}})
    for nodes in (1, 2):
        objects = render(build_spec(settings, "cpu", namespace=NS, nodes=nodes))
        pods = [o["spec"]["template"]["spec"] for o in objects if o["kind"] == "Job"]
        envs = [{e["name"]: e["value"] for e in c["env"]} for pod in pods for c in pod["containers"]]
        assert envs and all(env["PIP_INDEX_URL"] == "https://pypi.example.com/simple" for env in envs)


def test_with_the_runtimeclass_setting_gpu_pods_name_the_nvidia_runtime_class(tmp_path: Path) -> None:
    cluster = Cluster(steps=[(job(("Complete", "", "")), [succeeded(METRICS)], EPOCH_LOG)])
    outcome = run(tmp_path, cluster, settings=parse_settings({"gpu": {"runtime": "runtimeclass"}}))
    assert outcome.verdict.passed
    assert outcome.posted("/jobs")["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
