"""`bootstrap doctor`: what is wrong with a running cluster, from its nodes (one read-only probe each, over SSH)
and from its API (one read-only snapshot), judged by pure checks into findings with their fixes.

The two sides run at once and neither waits for the other: an unreachable node is one finding and the other
nodes are judged; a cluster without an API yet (no admin kubeconfig on this machine) or with an API that does
not answer says so, and the nodes are judged all the same.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from provision.errors import BootstrapError
from provision.findings import Finding
from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState
from provision.kube.client import load_api_client
from provision.kube.health import ClusterSnapshot, judge_cluster, read_snapshot
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.kube.verify import ApiUnreachable, Expectations
from provision.nodes.doctor.run import NodeDoctorReport, run_node_checks


@dataclass(frozen=True)
class DoctorReport:
    nodes: tuple[NodeDoctorReport, ...]
    # What the API says of the whole cluster and of each node (subject "cluster" or a node's name).
    cluster: tuple[Finding, ...]
    elapsed_s: float
    api_server: str | None = None

    @property
    def findings(self) -> list[Finding]:
        return [f for n in self.nodes for f in n.findings] + list(self.cluster)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.problem]

    @property
    def healthy(self) -> bool:
        return not self.problems


def _snapshot(kubeconfig: Path) -> ClusterSnapshot | Finding:
    """The API's snapshot, or why there is none (a finding: skip without a cluster, fail when it does not answer)."""
    if not kubeconfig.is_file():
        return Finding("api", "cluster", "skip", f"not checked: no admin kubeconfig at {kubeconfig} (`bootstrap up` "
                                                 "leaves one when it forms the cluster)")
    try:
        return read_snapshot(load_api_client(kubeconfig))
    except ApiUnreachable as exc:
        return Finding("api", "cluster", "fail", "the Kubernetes API does not answer: the API-side checks did not run",
                       str(exc))
    except BootstrapError as exc:
        return Finding("api", "cluster", "fail", "the API-side checks did not run", str(exc))


def expectations(cluster: Cluster, settings: Settings, gpus: dict[str, int]) -> Expectations:
    kube = settings.kubernetes
    return Expectations(nodes=tuple(n.name for n in cluster.nodes), gpus=gpus, pod_cidr=kube.pod_cidr,
                        dns_domain=kube.dns_domain, gpu_runtime=settings.gpu.runtime)


def run_doctor(cluster: Cluster, settings: Settings, *, become_password: str | None = None,
               kubeconfig: Path | None = None, now: datetime | None = None) -> DoctorReport:
    """Probe every node and read the API at once, then judge both."""
    started = time.monotonic()
    state = ClusterState.load(cluster)
    with ThreadPoolExecutor(max_workers=1) as pool:
        reading = pool.submit(_snapshot, kubeconfig or admin_kubeconfig_path(cluster))
        nodes = run_node_checks(cluster, settings, counted_gpus=state.gpus, become_password=become_password, now=now)
        snapshot = reading.result()
    if isinstance(snapshot, Finding):
        return DoctorReport(tuple(nodes), (snapshot,), time.monotonic() - started)
    # The GPUs each node should offer: preflight's count where it ran, else what the doctor's probe saw.
    counted = state.gpus or {}
    gpus = {n.name: n.gpus if n.probed else counted.get(n.name, 0) for n in nodes}
    gpus = {name: count for name, count in gpus.items() if count and cluster.node(name).gpu != "false"}
    found = judge_cluster(snapshot, expectations(cluster, settings, gpus), [n.name for n in cluster.control_planes])
    api = Finding("api", "cluster", "ok", f"answers at {snapshot.server}")
    return DoctorReport(tuple(nodes), (api, *found), time.monotonic() - started, snapshot.server)
