"""The smoke test's verdict as a pure function: observations recorded from runs of the driver against the
stand-in API server (tests/data/smoke/, one per way a run ends) are judged again, with no API server.

Each file is `dataclasses.asdict` of the Observation the driver judged last in that run (times rounded,
empty fields left out). A trouble that must last before it is final is replayed later by moving the
observation's clock on, the way the next polls would.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from provision.inputs.settings import Settings, parse_settings
from provision.smoke.driver import Timings, smoke_policy
from provision.smoke.observation import Observation, Waiting
from provision.smoke.spec import build_spec
from provision.smoke.verdict import FailureKind, Policy, Verdict, judge
from tests.support.smoke_run import IMAGE, NS, RECORDED, load_observation


def recorded(name: str) -> Observation:
    return load_observation(RECORDED / f"{name}.json")


def policy(settings: Settings | None = None) -> Policy:
    """What a default `bootstrap smoke-test` on a GPU cluster holds its run to."""
    settings = settings or Settings()
    return smoke_policy(build_spec(settings, "gpu", namespace=NS), Timings())


def later(observation: Observation, seconds: float) -> Observation:
    return replace(observation, elapsed_s=observation.elapsed_s + seconds)


def failure(observation: Observation, rules: Policy | None = None) -> Verdict:
    verdict = judge(observation, rules or policy())
    assert verdict is not None and not verdict.passed and verdict.exit_code == 1
    return verdict


# -- PASS -------------------------------------------------------------------------------------------------------

def test_a_run_that_trained_to_accuracy_passes_with_the_metrics_in_its_summary() -> None:
    observation = recorded("passed")
    verdict = judge(observation, policy())
    assert verdict is not None and verdict.passed and verdict.exit_code == 0 and verdict.cause is None
    assert verdict.summary == ("PASS: test accuracy 94.12% in 5.1s of training (98,765 images/s, 10 epochs) "
                               "on 1x NVIDIA H100 80GB HBM3")
    assert verdict.metrics is not None and verdict.metrics.inference_accuracy == 0.9398
    assert (verdict.namespace, verdict.mode, verdict.elapsed_s) == (NS, "gpu", round(observation.elapsed_s, 1))
    assert verdict.log_tail == observation.log_lines[-20:]


def test_without_a_termination_message_the_metrics_line_of_the_log_is_read() -> None:
    observation = recorded("passed")
    pod = observation.pods[0]
    assert pod.terminated is not None
    observation = replace(observation, pods=(replace(pod, terminated=replace(pod.terminated, message=None)),))
    verdict = judge(observation, policy())
    assert verdict is not None and verdict.passed
    assert verdict.metrics is not None and verdict.metrics.test_accuracy == 0.9412


def test_accuracy_under_the_threshold_fails_and_the_threshold_is_the_settings() -> None:
    verdict = failure(recorded("low-accuracy"))
    assert verdict.cause is FailureKind.LOW_ACCURACY
    assert verdict.detail == ("test accuracy 0.4213 is under the threshold 0.90 after 10 epochs on "
                              "1x NVIDIA H100 80GB HBM3")
    assert verdict.metrics is not None and verdict.metrics.test_accuracy == 0.4213
    lenient = policy(parse_settings({"smoke_test": {"min_accuracy": 0.4}}))
    assert (passed := judge(recorded("low-accuracy"), lenient)) is not None and passed.passed


# -- pods that never start -----------------------------------------------------------------------------------

def test_an_unschedulable_pod_is_waited_for_then_fails_with_the_schedulers_words_and_the_fix() -> None:
    observation = recorded("unschedulable")
    # Right after `up` the device plugin may still be registering the GPUs.
    assert judge(observation, policy()) is None
    assert judge(later(observation, 119), policy()) is None
    verdict = failure(later(observation, 120))
    assert verdict.cause is FailureKind.UNSCHEDULABLE
    assert verdict.detail.startswith("pod cifar10-smoke-abcde cannot be scheduled: 0/3 nodes are available: "
                                     "3 Insufficient nvidia.com/gpu.")
    assert "check that the NVIDIA device plugin runs on the GPU nodes" in verdict.detail


def test_an_image_that_cannot_be_pulled_is_final_after_a_minute_and_says_no_mirror_is_configured() -> None:
    observation = recorded("image-pull-backoff")
    assert judge(observation, policy()) is None
    verdict = failure(later(observation, 60))
    assert verdict.cause is FailureKind.IMAGE_PULL
    assert verdict.detail.startswith(f"image {IMAGE} cannot be pulled on node gpu-1: ImagePullBackOff: Back-off")
    assert verdict.detail.endswith("no mirror is configured for docker.io: set container_runtime.registry_mirrors, "
                                   "or point smoke_test.image (or --image) at an image the nodes can reach")


def test_an_image_pulled_through_a_mirror_names_the_mirror_to_check() -> None:
    verdict = failure(later(recorded("image-pull-backoff"), 60), policy(parse_settings({"mirrors": {"profile": "cn"}})))
    assert verdict.cause is FailureKind.IMAGE_PULL
    assert "pulls from docker.io go through the mirror(s) https://docker.m.daocloud.io" in verdict.detail


def test_an_invalid_image_name_is_final_at_once() -> None:
    observation = recorded("image-pull-backoff")
    invalid = replace(observation.pods[0], waiting=Waiting("InvalidImageName", 'invalid reference format: "py torch"'))
    verdict = failure(replace(observation, pods=(invalid,)))
    assert verdict.cause is FailureKind.IMAGE_PULL and "InvalidImageName" in verdict.detail


def test_a_container_that_cannot_be_created_fails_at_once_with_the_kubelets_message() -> None:
    verdict = failure(recorded("pod-config"))
    assert verdict.cause is FailureKind.POD_CONFIG
    assert verdict.detail == ('pod cifar10-smoke-abcde cannot start its container: CreateContainerConfigError: '
                              'configmap "cifar10-smoke-trainer" not found')


# -- runs that end badly -------------------------------------------------------------------------------------

def test_a_trainer_killed_for_memory_names_the_limit_and_the_node() -> None:
    verdict = failure(recorded("oom-killed"))
    assert verdict.cause is FailureKind.OOM_KILLED
    assert verdict.detail == ("the trainer in pod cifar10-smoke-abcde was OOMKilled (memory limit 12Gi) on node "
                              "gpu-1: the node or the limit has too little memory for the data set")


def test_a_job_past_its_deadline_says_how_far_training_got_and_does_not_blame_the_trainer() -> None:
    observation = recorded("deadline-exceeded")
    assert observation.pods[0].phase == "Failed"  # killed by the deadline
    verdict = failure(observation)
    assert verdict.cause is FailureKind.DEADLINE_EXCEEDED
    assert verdict.detail == ("the Job ran past its activeDeadlineSeconds (900s) and was stopped; training had "
                              "reached epoch 3/10")


def test_the_trainers_own_error_is_the_cause() -> None:
    verdict = failure(recorded("trainer-error"))
    assert verdict.cause is FailureKind.TRAINER_FAILED
    assert verdict.detail == ("the trainer in pod cifar10-smoke-abcde exited with code 2: CUDA is not available in "
                              "this container: check that the pod requested nvidia.com/gpu")
    assert verdict.log_tail == ("error: CUDA is not available",)


def test_a_crash_without_a_json_error_falls_back_to_the_last_line_it_wrote() -> None:
    verdict = failure(recorded("trainer-traceback"))
    assert verdict.cause is FailureKind.TRAINER_FAILED
    assert verdict.detail == "the trainer in pod cifar10-smoke-abcde exited with code 1: RuntimeError: CUDA error: unknown error"


def test_an_evicted_pod_is_reported_with_the_kubelets_reason() -> None:
    verdict = failure(recorded("evicted"))
    assert verdict.cause is FailureKind.TRAINER_FAILED
    assert verdict.detail == ("pod cifar10-smoke-abcde failed: Evicted: The node was low on resource: "
                              "ephemeral-storage.")


def test_a_failed_job_whose_pods_are_gone_reports_the_jobs_condition() -> None:
    verdict = failure(recorded("job-failed-without-pods"))
    assert verdict.cause is FailureKind.TRAINER_FAILED
    assert verdict.detail == "the Job failed: BackoffLimitExceeded: Job has reached the specified backoff limit"


def test_a_completed_job_without_metrics_is_not_a_pass() -> None:
    verdict = failure(recorded("complete-without-metrics"))
    assert verdict.cause is FailureKind.TRAINER_FAILED
    assert "reported no metrics" in verdict.detail


# -- the driver's own limits -----------------------------------------------------------------------------------

def test_a_run_still_going_after_the_jobs_deadline_and_a_minute_times_out() -> None:
    observation = recorded("still-running")
    assert judge(later(observation, 958), policy()) is None
    verdict = failure(replace(observation, elapsed_s=960.5))
    assert verdict.cause is FailureKind.TIMEOUT
    assert verdict.detail == ("no result after 960s (pods: cifar10-smoke-abcde Running); the Job's deadline should "
                              "have ended it: is the job controller running?")


def test_an_api_server_that_stops_answering_is_given_three_polls() -> None:
    observation = recorded("api-not-answering")
    verdict = failure(observation)
    assert verdict.cause is FailureKind.API_ERROR
    assert verdict.detail == "the API server stopped answering: HTTP 503 Service Unavailable: etcdserver: request timed out"
    assert judge(replace(observation, api_errors=2), policy()) is None


def test_what_was_seen_before_the_api_server_stopped_answering_is_not_judged_again() -> None:
    # Unschedulable for two minutes, but this poll went unanswered: the pod may have been placed meanwhile.
    stale = replace(later(recorded("unschedulable"), 120), api_errors=1, api_error="HTTP 503 Service Unavailable")
    assert judge(stale, policy()) is None


# -- the add-ons' workloads and the multi-node failures ------------------------------------------------------------

def test_a_gang_volcano_cannot_place_is_waited_for_then_failed_whole() -> None:
    observation = recorded("unschedulable-gang")
    assert judge(observation, policy()) is None
    assert judge(later(observation, 119), policy()) is None
    verdict = failure(later(observation, 120))
    assert verdict.cause is FailureKind.GANG_UNSCHEDULABLE
    assert verdict.detail == ("the 2 pods of the Job cannot be placed as one gang (PodGroup cifar10-smoke in queue "
                              "cluster-bootstrap): 2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 "
                              "minAvailable; Pending: 2 Unschedulable; none of them was started, so no rank waits on a "
                              "half-formed rendezvous")


def test_once_volcano_placed_the_gang_its_old_condition_is_not_a_failure() -> None:
    observation = later(recorded("unschedulable-gang"), 600)
    assert observation.podgroup is not None
    placed = replace(observation, podgroup=replace(observation.podgroup, phase="Running"), pods=())
    assert judge(placed, policy()) is None


def test_ranks_that_never_met_are_a_rendezvous_timeout_with_the_way_out() -> None:
    verdict = failure(recorded("rendezvous-timeout"))
    assert verdict.cause is FailureKind.RENDEZVOUS_TIMEOUT
    assert verdict.detail.startswith("the trainer in pod cifar10-smoke-1-abcde exited with code 1: [rank1]: The node "
                                     "'cifar10-smoke-0-1' failed to join the rendezvous 'cifar10-smoke-bandwidth'; ")
    assert "smoke_test.scheduler: volcano" in verdict.detail and "port 29500" in verdict.detail


def test_an_nccl_failure_is_named_and_the_bandwidth_measured_before_it_kept() -> None:
    verdict = failure(recorded("nccl-error"))
    assert verdict.cause is FailureKind.NCCL_ERROR
    assert verdict.workload == "TrainJob"
    assert "NCCL_DEBUG: INFO" in verdict.detail
    assert verdict.bandwidth is not None and (verdict.bandwidth.nodes, verdict.bandwidth.busbw_gbps) == (2, 4.3)


def test_a_fetch_stopped_by_its_own_deadline_is_a_data_fetch_failure() -> None:
    settings = parse_settings({"smoke_test": {"dataset": "cifar10", "data_timeout_s": 120}})
    spec = build_spec(settings, "gpu", namespace=NS)
    assert spec.cache == "hostpath"  # auto, on a cluster without a default StorageClass
    verdict = failure(recorded("data-fetch-timeout"), smoke_policy(spec, Timings()))
    assert verdict.cause is FailureKind.DATA_FETCH
    assert "did not finish within its 120s (smoke_test.data_timeout_s)" in verdict.detail


def test_what_the_trainer_says_decides_between_rendezvous_nccl_and_its_own_failure() -> None:
    from provision.smoke.verdict import classify_failure

    assert classify_failure("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. "
                            "1/2 clients joined.") is FailureKind.RENDEZVOUS_TIMEOUT
    assert classify_failure("rendezvous host cifar10-smoke-0.cifar10-smoke never resolved: is cluster DNS working?") \
        is FailureKind.RENDEZVOUS_TIMEOUT
    assert classify_failure("[PG 0 Rank 1] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making "
                            "progress") is FailureKind.NCCL_ERROR
    assert classify_failure("ValueError: the learning rate is negative") is FailureKind.TRAINER_FAILED


def test_bandwidth_is_warned_about_only_across_nodes_and_only_against_a_known_link() -> None:
    from provision.smoke.verdict import Bandwidth, bandwidth_warnings

    two = Bandwidth(busbw_gbps=0.8, nodes=2)
    assert bandwidth_warnings(two, None, 10) == ()
    assert bandwidth_warnings(Bandwidth(busbw_gbps=0.8, nodes=1), 1.0, 10) == ()
    assert [w.split(":")[0] for w in bandwidth_warnings(two, 1.0, 10)] == ["the nodes are linked at 1 Gb/s, under 10 Gb/s"]
    assert bandwidth_warnings(Bandwidth(busbw_gbps=20.0, nodes=2), 25.0, 10) == ()
    assert "far below the link's 100 Gb/s" in bandwidth_warnings(Bandwidth(busbw_gbps=20.0, nodes=2), 100.0, 10)[0]


# -- speed and the real data set ----------------------------------------------------------------------------------

def with_metrics(observation: Observation, **fields: object) -> Observation:
    """The recorded run, its trainer having reported these metrics instead."""
    import json

    pod = observation.pods[0]
    assert pod.terminated is not None and pod.terminated.message
    metrics = json.loads(pod.terminated.message) | fields
    return replace(observation, pods=(replace(pod, terminated=replace(pod.terminated, message=json.dumps(metrics))),),
                   log_lines=())


def test_a_gpu_slowed_below_its_models_floor_fails_although_it_learned() -> None:
    """Accuracy alone passes a GPU that trains on a slow path: the steady speed per GPU is judged too."""
    slow = with_metrics(recorded("passed"), steady_images_per_s=9_000.0, precision="bf16")
    verdict = failure(slow)
    assert verdict.cause is FailureKind.TOO_SLOW and verdict.metrics is not None
    assert verdict.summary.startswith("FAIL (too-slow): 9,000 images/s per GPU after warm-up on NVIDIA H100 80GB HBM3 "
                                      "(bf16), under the floor of 75,000 for H100")
    assert "nvidia-smi -q -d CLOCK,POWER" in verdict.detail and "smoke_test.throughput_floors" in verdict.detail


def test_a_healthy_gpu_passes_and_the_summary_sets_its_speed_beside_the_floor() -> None:
    healthy = with_metrics(recorded("passed"), steady_images_per_s=240_000.0, world_size=2, gpu_count=2)
    verdict = judge(healthy, policy())
    assert verdict is not None and verdict.passed
    assert verdict.summary.endswith("; 120,000 images/s per GPU after warm-up (floor for H100: 75,000)")


@pytest.mark.parametrize(("gpus", "per_gpu", "passes"), [
    (1, 75_000.0, True), (1, 74_999.0, False), (8, 75_000.0, True), (8, 74_999.0, False), (8, 70_000.0, False)])
def test_the_floor_holds_each_gpu_of_a_run_not_the_runs_total(gpus: int, per_gpu: float, passes: bool) -> None:
    """Eight GPUs at 70,000 images/s each make 560,000 for the run: far over H100's floor of 75,000 as a total,
    and each GPU under it."""
    run = with_metrics(recorded("passed"), steady_images_per_s=per_gpu * gpus, gpu_count=gpus, world_size=gpus,
                       nodes=max(1, gpus // 4))
    verdict = judge(run, policy())
    assert verdict is not None and verdict.passed is passes, verdict.summary
    assert f"{per_gpu:,.0f} images/s per GPU after warm-up" in verdict.summary


def test_a_model_the_table_does_not_list_reports_without_a_floor_and_cpu_runs_are_never_judged_on_speed() -> None:
    unknown = with_metrics(recorded("passed"), device="NVIDIA RTX PRO 6000 Blackwell", steady_images_per_s=10.0)
    verdict = judge(unknown, policy())
    assert verdict is not None and verdict.passed and verdict.summary.endswith("(no floor for this model)")
    cpu = with_metrics(recorded("passed"), device="cpu", gpu_count=0, steady_images_per_s=50.0)
    verdict = judge(cpu, policy())
    assert verdict is not None and verdict.passed


def test_the_floor_table_is_a_setting_and_a_shorter_model_name_does_not_match_a_longer_one() -> None:
    from provision.smoke.verdict import throughput_floor

    floors = Settings().smoke_test.throughput_floors
    assert throughput_floor("NVIDIA A100-SXM4-80GB", floors) == ("A100", 32_000.0)
    assert throughput_floor("NVIDIA A10", floors) == ("A10", 10_000.0)
    assert throughput_floor("Tesla T4", floors) == ("T4", 3_000.0) and throughput_floor("NVIDIA GH200", floors) is None
    lowered = parse_settings({"smoke_test": {"throughput_floors": {"H100": 5_000}}})
    slow = with_metrics(recorded("passed"), steady_images_per_s=9_000.0)
    verdict = judge(slow, policy(lowered))
    assert verdict is not None and verdict.passed


def test_the_real_data_set_is_held_to_its_own_pass_mark() -> None:
    """On CIFAR-10 the recipe reaches about 94%: a run at 93.0% passes the synthetic mark but not the real one."""
    settings = parse_settings({"smoke_test": {"dataset": "cifar10"}})
    real = smoke_policy(build_spec(settings, "gpu", namespace=NS), Timings())
    assert real.min_accuracy == 0.935 and policy().min_accuracy == 0.90
    verdict = failure(with_metrics(recorded("passed"), test_accuracy=0.93, dataset="cifar10"), real)
    assert verdict.cause is FailureKind.LOW_ACCURACY
    assert verdict.detail.startswith("test accuracy 0.9300 is under the threshold 0.935 after 10 epochs")


@pytest.mark.parametrize(("accuracy", "shown"), [(0.8999, "0.8999"), (0.89999, "0.8999"), (0.899999999, "0.8999")])
def test_accuracy_just_under_the_floor_fails_and_says_it_is_under(accuracy: float, shown: str) -> None:
    """The pass mark is a floor: a hair under it fails, and the figure shown is under it too (rounded to four
    places 0.89999 would read 0.9000, 'under the threshold 0.90')."""
    verdict = failure(with_metrics(recorded("passed"), test_accuracy=accuracy))
    assert verdict.cause is FailureKind.LOW_ACCURACY
    assert verdict.detail.startswith(f"test accuracy {shown} is under the threshold 0.90 after")


def test_accuracy_exactly_at_the_floor_passes() -> None:
    verdict = judge(with_metrics(recorded("passed"), test_accuracy=0.90), policy())
    assert verdict is not None and verdict.passed, verdict
