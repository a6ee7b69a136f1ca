"""The smoke test as a TrainJob (Kubeflow Trainer v2), a PyTorchJob (Training Operator v1) or an Indexed Job,
under Volcano as one gang, against a stand-in API server driven through the real kubernetes client: what is
asked of the cluster (custom objects dry-run first), what each verdict kind reads (TrainJob / PyTorchJob /
PodGroup conditions, the trainer's own words for a rendezvous timeout or an NCCL error, the init container for
the data fetch), the all-reduce bandwidth beside the link speed, and the PVC cache's own namespace."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from provision.inputs.settings import Settings, parse_settings
from provision.smoke.driver import Timings, run_smoke_test
from provision.smoke.manifests import RUN_LABEL
from provision.smoke.spec import CACHE_NAMESPACE
from provision.smoke.verdict import FailureKind, Verdict
from tests.support.apiserver import FakeApiServer, RecordedRequest, status
from tests.support.kube_objects import node, pod
from tests.support.smoke_run import EPOCH_LOG, IMAGE, JOB, METRICS, NS, Cluster, job, podgroup, workload

FAST = Timings(poll_s=0.0, unschedulable_grace_s=0.0, image_pull_grace_s=0.0, deadline_margin_s=5.0,
               request_timeout_s=5.0)
TRAINER_CRDS = ("trainjobs.trainer.kubeflow.org",)
VOLCANO_CRDS = ("podgroups.scheduling.volcano.sh",)
OPERATOR_CRDS = ("pytorchjobs.kubeflow.org",)
TWO_NODES = [node("gpu-1", gpus=1), node("gpu-2", gpus=1)]
ALLREDUCE = {"allreduce": {"backend": "nccl", "device": "cuda", "world_size": 2, "nodes": 2, "size_bytes": 268435456,
                           "iterations": 5, "seconds": 0.5, "algbw_gbps": 4.3, "busbw_gbps": 4.3,
                           "link_iface": None, "link_gbps": None}}
TWO_NODE_METRICS = METRICS | {"world_size": 2, "gpu_count": 2, "nodes": 2}
TRAINED_LOG = json.dumps(ALLREDUCE) + "\n" + EPOCH_LOG + json.dumps(TWO_NODE_METRICS) + "\n"


def rank_pod(rank: int, phase: str, *, kind: str = "TrainJob", node_name: str | None = None,
             terminated: dict[str, Any] | None = None, unschedulable: str | None = None,
             init_terminated: dict[str, Any] | None = None) -> dict[str, Any]:
    """A pod of a TrainJob (an Indexed Job's, container "node") or a PyTorchJob (master, workers, "pytorch")."""
    labels = {RUN_LABEL: JOB}
    if kind == "PyTorchJob":
        role, index = ("master", 0) if rank == 0 else ("worker", rank - 1)
        labels |= {"training.kubeflow.org/replica-type": role, "training.kubeflow.org/replica-index": str(index)}
        name, container = f"{JOB}-{role}-{index}", "pytorch"
    else:
        labels["batch.kubernetes.io/job-completion-index"] = str(rank)
        # A TrainJob's pods are its JobSet's: <trainjob>-<replicated job>-<job index>-<pod index>-<suffix>.
        name, container = (f"{JOB}-node-0-{rank}-abcde", "node") if kind == "TrainJob" else \
            (f"{JOB}-{rank}-abcde", "trainer")
    made = pod(name, node_name or f"gpu-{rank + 1}", labels, namespace=NS, phase=phase, container=container,
               image=IMAGE, limits={"memory": "12Gi", "nvidia.com/gpu": "1"}, terminated=terminated,
               unschedulable=unschedulable)
    if init_terminated:
        made["status"]["initContainerStatuses"] = [{
            "name": "fetch-data", "image": IMAGE, "imageID": "", "ready": False, "restartCount": 0,
            "state": {"terminated": {"startedAt": "2025-01-01T00:00:00Z", "finishedAt": "2025-01-01T00:10:00Z",
                                     **init_terminated}}}]
        made["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "PodInitializing"}}
    return made


def run(tmp_path: Path, cluster: Cluster, settings: Settings | None = None, **kwargs: Any) -> tuple[Verdict, FakeApiServer]:
    with FakeApiServer() as api:
        cluster.serve(api)
        verdict = run_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), settings or Settings(), namespace=NS,
                                 timings=FAST, sleep=lambda _: None, **kwargs)
    return verdict, api


def posts(api: FakeApiServer) -> list[tuple[str, str | None]]:
    """(kind, dryRun) of every object the run asked the API server to create, in order."""
    return [((r.json or {}).get("kind", "?"), r.query_value("dryRun")) for r in api.requests_to("POST")]


def passed_pods(kind: str) -> list[dict[str, Any]]:
    done = {"exitCode": 0, "reason": "Completed"}
    return [rank_pod(0, "Succeeded", kind=kind, terminated=done | {"message": json.dumps(TWO_NODE_METRICS)}),
            rank_pod(1, "Succeeded", kind=kind, terminated=done)]


# --- TrainJob -------------------------------------------------------------------------------------------------

def test_with_the_trainer_installed_the_run_is_a_trainjob_dry_run_first(tmp_path: Path) -> None:
    cluster = Cluster(nodes=TWO_NODES, kind="TrainJob", crds=TRAINER_CRDS, steps=[
        (workload("TrainJob"), [rank_pod(0, "Running"), rank_pod(1, "Running")], json.dumps(ALLREDUCE) + "\n"),
        (workload("TrainJob", ("Complete", "JobSetCompleted", "")), passed_pods("TrainJob"), TRAINED_LOG)])
    verdict, api = run(tmp_path, cluster, nodes=2)
    assert verdict.passed, verdict.summary
    assert verdict.workload == "TrainJob"
    # Each custom object is checked by the API server (and the Trainer's webhook) before it is created.
    assert posts(api) == [("Namespace", None), ("ConfigMap", None), ("TrainingRuntime", "All"), ("TrainingRuntime", None),
                          ("TrainJob", "All"), ("TrainJob", None)]
    trainjob = [r.json for r in api.requests_to("POST") if (r.json or {}).get("kind") == "TrainJob"][-1]
    assert trainjob["spec"]["runtimeRef"] == {"name": JOB, "apiGroup": "trainer.kubeflow.org",
                                              "kind": "TrainingRuntime"}
    assert trainjob["spec"]["trainer"] == {"numNodes": 2, "numProcPerNode": 1}
    # The all-reduce timed before training is reported beside the link (unknown here: no preflight).
    assert verdict.bandwidth is not None and verdict.bandwidth.busbw_gbps == 4.3
    assert "all-reduce 4.30 Gb/s bus bandwidth" in verdict.summary and verdict.warnings == ()
    assert api.requests_to("DELETE", f"/api/v1/namespaces/{NS}")


def test_a_trainjob_past_its_deadline_is_named_with_both_budgets(tmp_path: Path) -> None:
    settings = parse_settings({"smoke_test": {"dataset": "cifar10", "cache": "hostpath", "data_timeout_s": 300}})
    cluster = Cluster(kind="TrainJob", crds=TRAINER_CRDS, steps=[
        (workload("TrainJob", ("Failed", "DeadlineExceeded", "TrainJob exceeded its activeDeadlineSeconds")),
         [rank_pod(0, "Failed", terminated={"exitCode": 143, "reason": "Error"})], "")])
    verdict, api = run(tmp_path, cluster, settings, timeout_s=600)
    assert verdict.cause is FailureKind.DEADLINE_EXCEEDED
    assert "the TrainJob ran past its activeDeadlineSeconds (900s: 600s of training and 300s for the data)" \
        in verdict.detail
    trainjob = [r.json for r in api.requests_to("POST") if (r.json or {}).get("kind") == "TrainJob"][-1]
    assert trainjob["spec"]["activeDeadlineSeconds"] == 900


def test_a_trainjob_the_server_refuses_on_dry_run_creates_nothing(tmp_path: Path) -> None:
    cluster = Cluster(kind="TrainJob", crds=TRAINER_CRDS, steps=[(workload("TrainJob"), [], "")])

    def refuse(request: RecordedRequest) -> Any:
        if request.query_value("dryRun") == "All":
            return status(422, "Invalid", 'TrainingRuntime.trainer.kubeflow.org "cifar10-smoke" is invalid: '
                                          'spec.mlPolicy.torch.numProcPerNode: Invalid value')
        return status(500, "InternalError", "must not be reached")

    with FakeApiServer() as api:
        cluster.serve(api)
        api.add("POST", "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainingruntimes", refuse)
        verdict = run_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), Settings(), namespace=NS,
                                 timings=FAST, sleep=lambda _: None)
    assert verdict.cause is FailureKind.API_ERROR
    # (The reason phrase of 422 depends on the Python serving the stand-in.)
    assert "HTTP 422 " in verdict.detail and ': TrainingRuntime.trainer.kubeflow.org "cifar10-smoke" is invalid' \
        in verdict.detail
    assert [kind for kind, dry in posts(api) if dry is None] == ["Namespace", "ConfigMap"]
    assert api.requests_to("DELETE", f"/api/v1/namespaces/{NS}")


# --- PyTorchJob -----------------------------------------------------------------------------------------------

def test_a_pytorchjob_succeeds_with_its_masters_log_followed(tmp_path: Path) -> None:
    settings = parse_settings({"smoke_test": {"workload": "pytorchjob"}})
    cluster = Cluster(nodes=TWO_NODES, kind="PyTorchJob", crds=OPERATOR_CRDS, steps=[
        (workload("PyTorchJob", ("Succeeded", "PyTorchJobSucceeded", "PyTorchJob cifar10-smoke is successfully "
                                 "completed.")), list(reversed(passed_pods("PyTorchJob"))), TRAINED_LOG)])
    verdict, api = run(tmp_path, cluster, settings, nodes=2)
    assert verdict.passed and verdict.workload == "PyTorchJob", verdict.summary
    logs = {r.params["pod"] for r in api.requests_to("GET", f"/api/v1/namespaces/{NS}/pods/")}
    assert logs == {f"{JOB}-master-0"}
    assert [kind for kind, dry in posts(api)] == ["Namespace", "ConfigMap", "PyTorchJob", "PyTorchJob"]


def test_a_pytorchjob_without_the_training_operator_names_the_addon(tmp_path: Path) -> None:
    verdict, api = run(tmp_path, Cluster(steps=[(job(), [], "")]), parse_settings({"smoke_test": {"workload": "pytorchjob"}}))
    assert verdict.cause is FailureKind.ADDON_MISSING
    assert verdict.detail == ("the cluster serves no pytorchjobs.kubeflow.org: install it (`bootstrap addons install "
                              "training_operator`) or run the smoke test as a plain Job (--workload job)")
    assert api.requests_to("POST") == []


def test_a_rank_killed_for_memory_is_oomkilled_whatever_the_workload(tmp_path: Path) -> None:
    killed = rank_pod(1, "Failed", kind="PyTorchJob", terminated={"exitCode": 137, "reason": "OOMKilled"})
    cluster = Cluster(nodes=TWO_NODES, kind="PyTorchJob", crds=OPERATOR_CRDS, steps=[
        (workload("PyTorchJob", ("Failed", "PyTorchJobFailed", "PyTorchJob cifar10-smoke is failed because 1 Worker "
                                 "replica(s) failed.")), [rank_pod(0, "Running", kind="PyTorchJob"), killed], "")])
    verdict, _ = run(tmp_path, cluster, parse_settings({"smoke_test": {"workload": "pytorchjob"}}), nodes=2)
    assert verdict.cause is FailureKind.OOM_KILLED
    assert "cifar10-smoke-worker-0 was OOMKilled (memory limit 12Gi) on node gpu-2" in verdict.detail


# --- Volcano ----------------------------------------------------------------------------------------------------

def test_under_volcano_a_job_is_one_gang_that_waits_whole_and_fails_by_name(tmp_path: Path) -> None:
    message = "2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 minAvailable; Pending: 1 " \
              "Unschedulable, 1 Schedulable. Origin reason is gpu-2: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    pending = [rank_pod(i, "Pending", kind="Job", unschedulable="pod group is not ready, 2 Pending, 2 minAvailable")
               for i in range(2)]
    cluster = Cluster(nodes=TWO_NODES, crds=VOLCANO_CRDS, queues=("cluster-bootstrap",),
                      steps=[(job(), pending, "")], podgroups=[podgroup("Pending", message)])
    verdict, api = run(tmp_path, cluster, nodes=2)
    assert verdict.cause is FailureKind.GANG_UNSCHEDULABLE
    assert verdict.detail.startswith("the 2 pods of the Job cannot be placed as one gang (PodGroup cifar10-smoke in "
                                     "queue cluster-bootstrap): 2/2 tasks in gang unschedulable")
    assert "none of them was started, so no rank waits on a half-formed rendezvous" in verdict.detail
    assert "nvidia-device-plugin" in verdict.detail
    group = next(r.json for r in api.requests_to("POST") if (r.json or {}).get("kind") == "PodGroup"
                 and r.query_value("dryRun") is None)
    assert (group["spec"]["minMember"], group["spec"]["queue"]) == (2, "cluster-bootstrap")
    pod_template = next(r.json for r in api.requests_to("POST", "/apis/batch/v1/"))["spec"]["template"]
    assert pod_template["spec"]["schedulerName"] == "volcano"
    assert pod_template["metadata"]["annotations"] == {"scheduling.k8s.io/group-name": JOB}


def test_a_gang_that_is_placed_after_a_wait_trains(tmp_path: Path) -> None:
    cluster = Cluster(nodes=TWO_NODES, crds=VOLCANO_CRDS, queues=("cluster-bootstrap",), steps=[
        (job(), [rank_pod(i, "Pending", kind="Job", unschedulable="pod group is not ready") for i in range(2)], ""),
        (job(("Complete", "", "")), passed_pods("Job"), TRAINED_LOG)],
        podgroups=[podgroup("Pending", "2/2 tasks in gang unschedulable"), podgroup("Running")])
    with FakeApiServer() as api:
        cluster.serve(api)
        verdict = run_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), Settings(), namespace=NS, nodes=2,
                                 timings=Timings(poll_s=0.0, unschedulable_grace_s=60.0), sleep=lambda _: None)
    assert verdict.passed, verdict.summary


def test_a_trainjob_under_volcano_gets_its_podgroup_from_the_trainer(tmp_path: Path) -> None:
    cluster = Cluster(nodes=TWO_NODES, kind="TrainJob", crds=(*TRAINER_CRDS, *VOLCANO_CRDS), queues=("cluster-bootstrap",),
                      steps=[(workload("TrainJob", ("Complete", "", "")), passed_pods("TrainJob"), TRAINED_LOG)],
                      podgroups=[status(404, "NotFound", "not yet"), podgroup("Running")])
    verdict, api = run(tmp_path, cluster, nodes=2)
    assert verdict.passed, verdict.summary
    assert "PodGroup" not in [kind for kind, _ in posts(api)]
    runtime = [r.json for r in api.requests_to("POST") if (r.json or {}).get("kind") == "TrainingRuntime"][-1]
    assert runtime["spec"]["podGroupPolicy"] == {"volcano": {}}
    # Trainer v2.3's Volcano plugin takes the PodGroup's queue from the runtime's JobSet template
    # (spec.template.metadata.annotations, or a TrainJob's runtimePatches); an annotation on either object's own
    # metadata is never read, and the gang would wait in Volcano's `default` queue.
    assert runtime["spec"]["template"]["metadata"]["annotations"] == {"scheduling.volcano.sh/queue-name": "cluster-bootstrap"}
    trainjob = next(r.json for r in api.requests_to("POST") if (r.json or {}).get("kind") == "TrainJob")
    assert "annotations" not in runtime["metadata"] and "annotations" not in trainjob["metadata"]


def test_volcano_asked_for_but_absent_names_the_addon(tmp_path: Path) -> None:
    verdict, _ = run(tmp_path, Cluster(steps=[(job(), [], "")]), scheduler="volcano")
    assert verdict.cause is FailureKind.ADDON_MISSING
    assert "`bootstrap addons install volcano`" in verdict.detail and "--scheduler default" in verdict.detail


# --- the trainer's own words -------------------------------------------------------------------------------------

def test_a_rank_that_never_met_the_others_is_a_rendezvous_timeout(tmp_path: Path) -> None:
    message = ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"
               "[rank1]: The node 'cifar10-smoke-0-1' failed to join the rendezvous 'cifar10-smoke-bandwidth'")
    failed_rank = rank_pod(1, "Failed", kind="Job", terminated={"exitCode": 1, "reason": "Error", "message": message})
    cluster = Cluster(nodes=TWO_NODES, steps=[(job(), [rank_pod(0, "Running", kind="Job"), failed_rank], "")])
    verdict, _ = run(tmp_path, cluster, nodes=2)
    assert verdict.cause is FailureKind.RENDEZVOUS_TIMEOUT
    assert "failed to join the rendezvous" in verdict.detail and "smoke_test.scheduler: volcano" in verdict.detail


def test_an_nccl_failure_is_named_with_how_to_see_why(tmp_path: Path) -> None:
    log = json.dumps(ALLREDUCE) + "\n" + "".join(EPOCH_LOG.splitlines(keepends=True)[:2]) + \
        "NCCL WARN NET/Socket : Connection closed by remote peer 10.0.0.12<55334>\n"
    message = ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited "
               "or there was a network error, NCCL version 2.21.5\nncclRemoteError: A call failed possibly due to a "
               "network error or a remote process exiting prematurely.")
    crashed = rank_pod(0, "Failed", kind="TrainJob", terminated={"exitCode": 1, "reason": "Error", "message": message})
    cluster = Cluster(nodes=TWO_NODES, kind="TrainJob", crds=TRAINER_CRDS,
                      steps=[(workload("TrainJob", ("Failed", "FailedJobs", "jobset failed")), [crashed], log)])
    verdict, _ = run(tmp_path, cluster, nodes=2)
    assert verdict.cause is FailureKind.NCCL_ERROR
    assert verdict.detail.startswith("the trainer in pod cifar10-smoke-node-0-0-abcde exited with code 1: ncclRemoteError")
    assert "NCCL_DEBUG: INFO" in verdict.detail
    # The bandwidth measured before the failure is still reported.
    assert verdict.bandwidth is not None and verdict.bandwidth.nodes == 2


# --- data and the link ------------------------------------------------------------------------------------------

def test_a_fetch_past_its_own_deadline_is_a_data_fetch_failure(tmp_path: Path) -> None:
    settings = parse_settings({"smoke_test": {"dataset": "cifar10", "cache": "hostpath", "data_timeout_s": 120},
                               "mirrors": {"profile": "cn"}})
    stuck = rank_pod(0, "Failed", kind="Job", init_terminated={"exitCode": 124, "reason": "Error"})
    verdict, api = run(tmp_path, Cluster(steps=[(job(), [stuck], "")]), settings)
    assert verdict.cause is FailureKind.DATA_FETCH
    assert verdict.detail == ("fetching CIFAR-10 into the cache on node gpu-1 did not finish within its 120s "
                              "(smoke_test.data_timeout_s): a slow or unreachable source; set mirrors.cifar10_archive "
                              "to a nearer copy")
    pod_spec = next(r.json for r in api.requests_to("POST", "/apis/batch/v1/"))["spec"]["template"]["spec"]
    fetch = pod_spec["initContainers"][0]
    assert fetch["name"] == "fetch-data" and "\nexec timeout 120 python -c" in fetch["args"][0]
    assert "https://dataset.bj.bcebos.com/cifar/cifar-10-python.tar.gz" in fetch["args"][0]
    assert {"name": "cache", "hostPath": {"path": "/var/lib/cluster-bootstrap/cache", "type": "DirectoryOrCreate"}} \
        in pod_spec["volumes"]


def test_a_slow_link_and_a_bandwidth_far_below_it_are_warned_about(tmp_path: Path) -> None:
    cluster = Cluster(nodes=TWO_NODES, kind="TrainJob", crds=TRAINER_CRDS,
                      steps=[(workload("TrainJob", ("Complete", "", "")), passed_pods("TrainJob"), TRAINED_LOG)])
    slow, _ = run(tmp_path, cluster, nodes=2, link_gbps=1.0)
    assert slow.passed and slow.link_gbps == 1.0
    assert slow.warnings == ("the nodes are linked at 1 Gb/s, under 10 Gb/s: multi-node training is throttled by its "
                             "all-reduce (4.30 Gb/s measured); train on one node or on a faster network",)
    cluster.step = 0
    fast, _ = run(tmp_path, cluster, nodes=2, link_gbps=100.0)
    assert "all-reduce 4.30 Gb/s bus bandwidth on a 100 Gb/s link" in fast.summary
    assert len(fast.warnings) == 1 and "far below the link's 100 Gb/s" in fast.warnings[0]


@pytest.mark.parametrize("kind", ["Job", "TrainJob"])
def test_a_pvc_cache_keeps_its_namespace_and_only_the_runs_objects_go(tmp_path: Path, kind: str) -> None:
    """Runs share the cache's namespace, and the claim in it, with the runs before them: an earlier run's
    workload failed there and its pod is still there. This run judges its own workload and pods, and deletes
    only its own objects."""
    settings = parse_settings({"smoke_test": {"dataset": "cifar10"}})
    done = rank_pod(0, "Succeeded", kind=kind, terminated={"exitCode": 0, "reason": "Completed",
                                                        "message": json.dumps(METRICS)})
    earlier = "cifar10-smoke-0ld0ld"
    earlier_pod = rank_pod(0, "Failed", kind=kind, terminated={"exitCode": 137, "reason": "OOMKilled"})
    earlier_pod["metadata"] |= {"name": f"{earlier}-0-abcde", "namespace": CACHE_NAMESPACE,
                                "labels": earlier_pod["metadata"]["labels"] | {RUN_LABEL: earlier, "job-name": earlier}}
    failure = ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    earlier_run = job(failure) if kind == "Job" else workload(kind, failure, name=earlier)
    earlier_run["metadata"] = {"name": earlier, "namespace": CACHE_NAMESPACE}
    complete = job(("Complete", "", "")) if kind == "Job" else workload(kind, ("Complete", "", ""))
    cluster = Cluster(default_storage_class="nfs", kind=kind, crds=TRAINER_CRDS if kind == "TrainJob" else (),
                      steps=[(complete, [done], EPOCH_LOG)],
                      existing={("", "Namespace", CACHE_NAMESPACE): {},
                                (CACHE_NAMESPACE, "PersistentVolumeClaim", "cifar10-smoke-cache"): {},
                                (CACHE_NAMESPACE, kind, earlier): earlier_run},
                      others=[earlier_pod])
    with FakeApiServer() as api:
        cluster.serve(api)
        api.add("DELETE", "/apis/batch/v1/namespaces/{ns}/jobs/{name}", status(200, "", "deleted"))
        api.add("DELETE", "/api/v1/namespaces/{ns}/configmaps/{name}", status(200, "", "deleted"))
        verdict = run_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), settings, timings=FAST,
                                 sleep=lambda _: None)
        deletes = [r.path for r in api.requests_to("DELETE")]
        claim = next(r.json for r in api.requests_to("POST", "/api/v1/namespaces/cb-smoke-cache/persistentvolumeclaims"))
        logs_read = {r.params["pod"] for r in api.requests_to("GET") if r.path.endswith("/log")}
    assert verdict.passed and verdict.namespace == CACHE_NAMESPACE and verdict.workload == kind, verdict.summary
    run_name = cluster.run_name
    assert run_name is not None and run_name.startswith("cifar10-smoke-") and run_name not in ("cifar10-smoke", earlier)
    assert logs_read == {done["metadata"]["name"]}
    assert deletes and all(path.rsplit("/", 1)[1].startswith(run_name) for path in deletes), deletes
    if kind == "Job":
        assert deletes == [f"/apis/batch/v1/namespaces/cb-smoke-cache/jobs/{run_name}",
                           f"/api/v1/namespaces/cb-smoke-cache/configmaps/{run_name}-trainer"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_the_new_observations_the_verdict_tests_replay_are_what_the_driver_records(tmp_path: Path, monkeypatch) -> None:
    from provision.smoke import driver as smoke
    from provision.smoke.observation import Observation
    from provision.smoke.verdict import Policy, judge
    from tests.support.smoke_run import RECORDED, load_observation, timeless

    judged: list[Observation] = []

    def recording(observation: Observation, policy: Policy) -> Verdict | None:
        judged.append(observation)
        return judge(observation, policy)

    def group_timeless(observation: Observation) -> dict[str, Any]:
        seen = timeless(observation)
        if seen["podgroup"]:
            seen["podgroup"]["unschedulable_since"] = seen["podgroup"]["unschedulable_since"] is not None
        return seen

    monkeypatch.setattr(smoke, "judge", recording)
    message = ("2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 minAvailable; Pending: 2 "
               "Unschedulable")
    pending = [rank_pod(i, "Pending", kind="Job", unschedulable="pod group is not ready, 2 Pending, 2 minAvailable")
               for i in range(2)]
    run(tmp_path, Cluster(nodes=TWO_NODES, crds=VOLCANO_CRDS, queues=("cluster-bootstrap",), steps=[(job(), pending, "")],
                          podgroups=[podgroup("Pending", message)]), nodes=2)
    assert group_timeless(judged[-1]) == group_timeless(load_observation(RECORDED / "unschedulable-gang.json"))
    stuck = rank_pod(0, "Failed", kind="Job", init_terminated={"exitCode": 124, "reason": "Error"})
    run(tmp_path, Cluster(steps=[(job(), [stuck], "")]),
        parse_settings({"smoke_test": {"dataset": "cifar10", "cache": "hostpath", "data_timeout_s": 120}}))
    assert group_timeless(judged[-1]) == group_timeless(load_observation(RECORDED / "data-fetch-timeout.json"))
