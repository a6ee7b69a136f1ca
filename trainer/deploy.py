"""The deploy step of `smoke-test --pipeline`: serve the trained model with KServe from inside the pipeline, ask
it about one picture, report the answer, remove the service. Standard library only (the step runs in the smoke
image): the InferenceService comes rendered by cluster-bootstrap as JSON, and goes to the API server with the
pod's service account (cluster-bootstrap grants it InferenceServices in this namespace for the run).

    python deploy.py --service '{...InferenceService...}' --claim PVC --timeout 600
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error

from kube_api import call, in_cluster

PICTURE = [[[(8 * x) % 256, (8 * y) % 256, (4 * (x + y)) % 256] for x in range(32)] for y in range(32)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Deploy the trained model with KServe and ask it once.")
    parser.add_argument("--service", required=True, help="the InferenceService, as JSON")
    parser.add_argument("--claim", required=True, help="the PVC that holds the model (made by the pipeline)")
    parser.add_argument("--timeout", type=int, default=600)
    args = parser.parse_args(argv)
    service = json.loads(args.service)
    for volume in service["spec"]["predictor"]["volumes"]:
        if "persistentVolumeClaim" in volume:
            volume["persistentVolumeClaim"]["claimName"] = args.claim
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    api = in_cluster()
    token, context = api.token, api.context
    base = f"{api.base}/apis/serving.kserve.io/v1beta1/namespaces/{namespace}/inferenceservices"
    call("POST", base, service, token=token, context=context)
    try:
        deadline = time.monotonic() + args.timeout
        while True:
            status = call("GET", f"{base}/{name}", token=token, context=context).get("status") or {}
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []):
                break
            if time.monotonic() > deadline:
                print(f"error: {name} was not Ready in {args.timeout}s", file=sys.stderr)
                return 1
            time.sleep(3)
        url = f"http://{name}-predictor.{namespace}.svc/v1/models/cifar10:predict"
        started = time.monotonic()
        answer = call("POST", url, {"instances": [PICTURE]})
        first = answer["predictions"][0]
        print(json.dumps({"served": {"class": first["class"], "score": first["score"],
                                     "latency_s": round(time.monotonic() - started, 3)}}), flush=True)
        return 0
    except (urllib.error.URLError, KeyError, IndexError, ValueError) as exc:
        print(f"error: {name} did not answer with a class and a score: {exc}", file=sys.stderr)
        return 1
    finally:
        try:
            call("DELETE", f"{base}/{name}", token=token, context=context)
        except urllib.error.URLError:
            pass


if __name__ == "__main__":
    sys.exit(main())
