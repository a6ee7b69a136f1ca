"""`smoke-test --save DIR`: the trained model and the metrics, back on the operator's machine.

The training pods are gone when the run ends, so rank 0 leaves its output in the cache (runs/<name>/ on the
hostPath of its node, or in the PVC). Afterwards a small collector pod mounts the same place, on that node
(the first pod's, then the others' until one holds the model), and serves the files; the driver reads them
through the API server's pod proxy (no port-forward, no exec) and deletes the collector, which removes the
files from the cache on its way out.

DIR then holds model.pt (and whatever else rank 0 wrote), metrics.json (the trainer's own report),
verdict.json, and trainer/ (the code that ran), so that `python -m trainer.infer --model model.pt --image
cat.png` works from DIR.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.kube.pods import pod_phase
from provision.smoke.manifests import COLLECTOR_PORT, SmokeSpec, collector_pod, read_trainer_files
from provision.smoke.observation import Observation
from provision.smoke.verdict import TrainerMetrics, Verdict


class SaveError(Exception):
    """The results could not be copied; the message says what was missing."""


def raw_metrics(observation: Observation) -> dict[str, Any] | None:
    """The trainer's metrics as it wrote them (every field, not only those the verdict reads)."""
    texts = [pod.terminated.message for pod in observation.pods if pod.terminated and pod.terminated.message]
    for text in [*texts, *reversed(observation.log_lines)]:
        if TrainerMetrics.parse(text) is not None:
            return dict(json.loads(text or ""))
    return None


def write_verdict(directory: Path, verdict: Verdict) -> None:
    (directory / "verdict.json").write_text(json.dumps(asdict(verdict), indent=2, default=str) + "\n")


class Collector:
    """Runs the collector pod, reads the run's files through the pod proxy, and removes it."""

    def __init__(self, api: client.ApiClient, spec: SmokeSpec, *, timeout_s: float, request_timeout_s: float,
                 poll_s: float, sleep: Callable[[float], None]) -> None:
        self.core = client.CoreV1Api(api)
        self.spec = spec
        self.timeout_s = timeout_s
        self.request_timeout_s = request_timeout_s
        self.poll_s = poll_s
        self.sleep = sleep

    def _get(self, pod: str, path: str) -> bytes:
        response: Any = self.core.connect_get_namespaced_pod_proxy_with_path(
            f"{pod}:{COLLECTOR_PORT}", self.spec.namespace, path, _preload_content=False,
            _request_timeout=max(self.request_timeout_s, 60))
        return bytes(response.data)

    def _wait_ready(self, name: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            pod = self.core.read_namespaced_pod(name, self.spec.namespace, _request_timeout=self.request_timeout_s)
            statuses = (pod.status.container_statuses if pod.status else None) or []
            if pod_phase(pod) == "Running" and statuses and all(s.ready for s in statuses):
                return
            if pod_phase(pod) in ("Failed", "Succeeded"):
                raise SaveError(f"the collector pod {name} ended ({pod_phase(pod)}) before serving the results")
            if time.monotonic() >= deadline:
                raise SaveError(f"the collector pod {name} was not ready within {self.timeout_s:.0f}s "
                                f"(phase {pod_phase(pod)})")
            self.sleep(self.poll_s)

    def fetch(self, node: str | None, directory: Path) -> list[str]:
        body: Any = collector_pod(self.spec, node if self.spec.cache == "hostpath" else None)
        name = body["metadata"]["name"]
        self.core.create_namespaced_pod(self.spec.namespace, body, _request_timeout=self.request_timeout_s)
        try:
            self._wait_ready(name)
            listed = json.loads(self._get(name, "index.json") or b"[]")
            # Plain file names only: the index comes from the cluster.
            files = [f for f in listed if isinstance(f, str) and f and "/" not in f and f not in (".", "..")]
            if "model.pt" not in files:
                raise SaveError(f"rank 0 left no model.pt in the cache ({self.spec.results_dir} on node "
                                f"{node or 'any'}): the trainer did not save one")
            for file in files:
                (directory / file).write_bytes(self._get(name, file))
            return files
        finally:
            try:
                self.core.delete_namespaced_pod(name, self.spec.namespace, grace_period_seconds=10,
                                                _request_timeout=self.request_timeout_s)
            except (ApiException, urllib3.exceptions.HTTPError):
                pass  # the namespace goes with the run, or reset takes the cache


def save_results(api: client.ApiClient, spec: SmokeSpec, observation: Observation, directory: Path, *,
                 timeout_s: float, request_timeout_s: float, poll_s: float,
                 sleep: Callable[[float], None]) -> tuple[list[str], str | None]:
    """Copy what the run produced into `directory`: (the files written, why some could not be, or None)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    trainer_dir = directory / "trainer"
    trainer_dir.mkdir(exist_ok=True)
    for name, source in (spec.trainer_files or read_trainer_files()).items():
        (trainer_dir / name).write_text(source)
        written.append(f"trainer/{name}")
    metrics = raw_metrics(observation)
    if metrics is None:
        return written, "the run reported no metrics, so there is no model to copy"
    (directory / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    written.append("metrics.json")
    collector = Collector(api, spec, timeout_s=timeout_s, request_timeout_s=request_timeout_s, poll_s=poll_s,
                          sleep=sleep)
    # Rank 0 is usually the first pod's; a rendezvous may give it to another node, whose cache then holds the model.
    nodes = list(dict.fromkeys(pod.node for pod in observation.pods if pod.node)) if spec.cache == "hostpath" else [None]
    error = "no pod of the run was placed on a node"
    for node in nodes or [None]:
        try:
            return written + collector.fetch(node, directory), None
        except SaveError as exc:
            error = str(exc)
        except (ApiException, urllib3.exceptions.HTTPError, ValueError) as exc:
            reason = f"HTTP {exc.status} {exc.reason}" if isinstance(exc, ApiException) else f"{type(exc).__name__}: {exc}"
            return written, f"the results could not be read through the API server ({reason})"
    return written, error
