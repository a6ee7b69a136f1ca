"""GPU utilisation while the smoke test trains, read from NVIDIA's DCGM exporter when the cluster runs it (the
dcgm_exporter add-on): its metrics page on the training pods' nodes, through the API server's pod proxy, every
few seconds while a training pod runs. The exporter labels each GPU's samples with the pod that holds the GPU
(DCGM_EXPORTER_KUBERNETES), so only the run's own GPUs are counted. Without the exporter nothing is read and the
verdict says nothing about utilisation.

DCGM does not report DCGM_FI_DEV_GPU_UTIL for MIG instances (nor for a GPU in MIG mode); there the exporter's
default counters (etc/default-counters.csv, "Datacenter Profiling (DCP) metrics", on since 4.x) carry
DCGM_FI_PROF_GR_ENGINE_ACTIVE, the ratio of time the graphics/compute engine of the instance was active, labelled
with GPU_I_ID and GPU_I_PROFILE. Each GPU or instance the run holds is read from the first metric it reports, in
METRICS order, and the verdict names the metric its figures came from."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.inputs.addons import ADDONS

EXPORTER_NAMESPACE = ADDONS["dcgm_exporter"].namespace
EXPORTER_SELECTOR = "app.kubernetes.io/name=dcgm-exporter"
EXPORTER_PORT = 9400
# Each metric the utilisation is read from, in order of preference, and the factor that makes it a percentage.
METRICS: dict[str, float] = {"DCGM_FI_DEV_GPU_UTIL": 1.0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 100.0}
SAMPLE_EVERY_S = 5.0
_SAMPLE = re.compile(rf"^(?P<metric>{'|'.join(METRICS)})\{{(?P<labels>[^}}]*)\}}\s+(?P<value>[0-9.eE+-]+)", re.ASCII)
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"', re.ASCII)


@dataclass(frozen=True)
class Sample:
    percent: float
    metric: str


@dataclass(frozen=True)
class GpuUtilisation:
    """What the verdict says: mean and peak (%), how many samples, and the metric(s) they were read from."""

    mean: float
    peak: float
    samples: int
    metric: str


def utilisation(metrics_page: str, pods: set[str], namespace: str) -> list[Sample]:
    """The utilisation samples (%) of the metrics page that belong to `pods` of `namespace`: per GPU (or MIG
    instance: GPU_I_ID) one sample, from the first of METRICS it reports."""
    found: dict[tuple[str, str, str, str], tuple[int, Sample]] = {}
    for line in metrics_page.splitlines():
        sample = _SAMPLE.match(line)
        if not sample:
            continue
        labels = {m.group("key"): m.group("value") for m in _LABEL.finditer(sample.group("labels"))}
        if labels.get("pod") not in pods or labels.get("namespace", namespace) != namespace:
            continue
        metric = sample.group("metric")
        key = (labels.get("Hostname", ""), labels.get("UUID", labels.get("gpu", "")), labels.get("GPU_I_ID", ""),
               labels.get("pod", ""))
        rank = list(METRICS).index(metric)
        if key not in found or rank < found[key][0]:
            found[key] = (rank, Sample(round(float(sample.group("value")) * METRICS[metric], 1), metric))
    return [sample for _, sample in found.values()]


@dataclass
class GpuSampler:
    """Samples the run's GPUs; summary() is None until something was read."""

    api: client.ApiClient
    namespace: str
    request_timeout_s: float = 10.0
    samples: list[Sample] = field(default_factory=list)
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

    def summary(self) -> GpuUtilisation | None:
        if not self.samples:
            return None
        values = [s.percent for s in self.samples]
        return GpuUtilisation(mean=round(sum(values) / len(values), 1), peak=max(values), samples=len(values),
                              metric=" and ".join(dict.fromkeys(s.metric for s in self.samples)))
