"""The train step of `smoke-test --pipeline`: the training as a Kubeflow PyTorchJob (the seeds' shape), started from
inside the pipeline and followed to its end. The PyTorchJob comes rendered by cluster-bootstrap as JSON (the same
manifest `smoke-test --workload pytorchjob` runs: its GPU request, RuntimeClass and trainer); the run's PVC is
named here, as the pipeline made it. The master's report (the trainer's termination message) is printed; the job is
left for the driver, which reads it for the verdict and removes it. Standard library only.

    python launch.py --job '{...PyTorchJob...}' --claim PVC --timeout 3600
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error

from kube_api import Api, in_cluster

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
# The Training Operator's labels on a job's pods (kubeflow/trainer release-1.9, pkg/controller.v1/common).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"


def with_claim(job: dict, claim: str) -> dict:
    """The job with every PersistentVolumeClaim volume of its pods naming `claim`."""
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        for volume in replica["template"]["spec"].get("volumes", []):
            if "persistentVolumeClaim" in volume:
                volume["persistentVolumeClaim"]["claimName"] = claim
    return job


def finished(job: dict) -> tuple[str, str] | None:
    """("Succeeded" | "Failed", message) once the operator says the job ended; None while it runs."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Succeeded", "Failed") and condition.get("status") == "True":
            return str(condition["type"]), str(condition.get("message") or condition.get("reason") or "")
    return None


def master_report(api: Api, namespace: str, name: str) -> str:
    """The master's termination message (the trainer's metrics), or "" when there is none yet."""
    selector = f"{JOB_NAME_LABEL}={name},{REPLICA_TYPE_LABEL}=master"
    pods = api.call("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}").get("items") or []
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated") or {}
            if terminated.get("message"):
                return str(terminated["message"])
    return ""


def run(api: Api, job: dict, *, timeout_s: float, poll_s: float = 5.0) -> int:
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    try:
        api.call("POST", base, job)
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # left by an earlier try of this step: followed as it is
            print(f"error: the API server refused the PyTorchJob: HTTP {exc.code} {exc.read()[:300]!r}",
                  file=sys.stderr)
            return 1
    print(f"PyTorchJob {namespace}/{name} created", flush=True)
    deadline = time.monotonic() + timeout_s
    while True:
        ended = finished(api.call("GET", f"{base}/{name}"))
        if ended:
            break
        if time.monotonic() > deadline:
            print(f"error: PyTorchJob {name} did not finish in {timeout_s:.0f}s", file=sys.stderr)
            return 1
        time.sleep(poll_s)
    state, message = ended
    report = master_report(api, namespace, name)
    if report:
        print(report, flush=True)
    if state != "Succeeded":
        print(f"error: PyTorchJob {name} {state.lower()}: {message}", file=sys.stderr)
        return 1
    print(f"PyTorchJob {name} succeeded", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train as a PyTorchJob and follow it to its end.")
    parser.add_argument("--job", required=True, help="the PyTorchJob, as JSON")
    parser.add_argument("--claim", required=True, help="the run's PVC (made by the pipeline)")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args(argv)
    return run(in_cluster(), with_claim(json.loads(args.job), args.claim), timeout_s=args.timeout)


if __name__ == "__main__":
    sys.exit(main())
