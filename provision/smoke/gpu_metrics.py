"""GPU utilisation while the smoke test trains, read from NVIDIA's DCGM exporter when the cluster runs it (the
dcgm_exporter add-on): its metrics page on the training pods' nodes, through the API server's pod proxy, every
few seconds while a training pod runs. The exporter labels each GPU's samples with the pod that holds the GPU
(DCGM_EXPORTER_KUBERNETES), so only the run's own GPUs are counted. Without the exporter nothing is read and the
verdict says nothing about utilisation."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.inputs.addons import ADDONS

EXPORTER_NAMESPACE = ADDONS["dcgm_exporter"].namespace
EXPORTER_SELECTOR = "app.kubernetes.io/name=dcgm-exporter"
EXPORTER_PORT = 9400
METRIC = "DCGM_FI_DEV_GPU_UTIL"
SAMPLE_EVERY_S = 5.0
_SAMPLE = re.compile(rf"^{METRIC}\{{(?P<labels>[^}}]*)\}}\s+(?P<value>[0-9.eE+-]+)", re.ASCII)
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"', re.ASCII)


def utilisation(metrics_page: str, pods: set[str], namespace: str) -> list[float]:
    """The GPU utilisation samples (%) of the metrics page that belong to `pods` of `namespace`."""
    found = []
    for line in metrics_page.splitlines():
        sample = _SAMPLE.match(line)
        if not sample:
            continue
        labels = {m.group("key"): m.group("value") for m in _LABEL.finditer(sample.group("labels"))}
        if labels.get("pod") in pods and labels.get("namespace", namespace) == namespace:
            found.append(float(sample.group("value")))
    return found


@dataclass
class GpuSampler:
    """Samples the run's GPUs; summary() is None until something was read."""

    api: client.ApiClient
    namespace: str
    request_timeout_s: float = 10.0
    samples: list[float] = field(default_factory=list)
    # Node -> the exporter pod there; None until asked, {} when the cluster runs no exporter.
    exporters: dict[str, str] | None = None
    last_s: float = float("-inf")

    def _exporters(self) -> dict[str, str]:
        if self.exporters is None:
            try:
                pods = client.CoreV1Api(self.api).list_namespaced_pod(
                    EXPORTER_NAMESPACE, label_selector=EXPORTER_SELECTOR, _request_timeout=self.request_timeout_s)
                self.exporters = {p.spec.node_name: p.metadata.name for p in pods.items
                                  if p.spec and p.spec.node_name and p.metadata and p.status
                                  and p.status.phase == "Running"}
            except ApiException:
                self.exporters = {}
        return self.exporters

    def sample(self, now_s: float, running: dict[str, str]) -> None:
        """`running`: the run's running pods -> their nodes. Reads at most every SAMPLE_EVERY_S seconds."""
        if not running or now_s - self.last_s < SAMPLE_EVERY_S:
            return
        self.last_s = now_s
        exporters = self._exporters()
        for node in sorted(set(running.values())):
            exporter = exporters.get(node)
            if exporter is None:
                continue
            path = f"/api/v1/namespaces/{EXPORTER_NAMESPACE}/pods/{exporter}:{EXPORTER_PORT}/proxy/metrics"
            try:
                response = self.api.call_api(path, "GET", auth_settings=["BearerToken"], _preload_content=False,
                                             _request_timeout=self.request_timeout_s)
            except ApiException:
                continue
            raw = response[0].data if isinstance(response, tuple) else response.data
            self.samples += utilisation(raw.decode(errors="replace"), set(running), self.namespace)

    def summary(self) -> dict[str, float] | None:
        if not self.samples:
            return None
        return {"mean": round(sum(self.samples) / len(self.samples), 1), "peak": max(self.samples),
                "samples": float(len(self.samples))}
