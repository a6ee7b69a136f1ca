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

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.errors import BootstrapError
from provision.findings import Finding
from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState
from provision.kube.client import ApiUnreachable, load_api_client
from provision.kube.health import ClusterSnapshot, judge_cluster, read_snapshot
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.kube.verify import Expectations, check_dns, dns_probe_target
from provision.nodes.doctor.etcd import run_etcd_checks
from provision.nodes.doctor.run import NodeDoctorReport, run_node_checks
from provision.render.manifests import image_ref

# How long the pod of --probe-dns may take to be scheduled, pull its image and answer.
DNS_PROBE_TIMEOUT_S = 90


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


def _snapshot(kubeconfig: Path) -> tuple[ClusterSnapshot, client.ApiClient] | Finding:
    """The API's snapshot, or why there is none (a finding: skip without a cluster, fail when it does not answer)."""
    if not kubeconfig.is_file():
        return Finding("api", "cluster", "skip", f"not checked: no admin kubeconfig at {kubeconfig} (`bootstrap up` "
                                                 "leaves one when it forms the cluster)")
    try:
        api = load_api_client(kubeconfig)
        return read_snapshot(api), api
    except ApiUnreachable as exc:
        return Finding("api", "cluster", "fail", "the Kubernetes API does not answer: the API-side checks did not run",
                       str(exc))
    except BootstrapError as exc:
        return Finding("api", "cluster", "fail", "the API-side checks did not run", str(exc))


def expectations(cluster: Cluster, settings: Settings, gpus: dict[str, int]) -> Expectations:
    kube = settings.kubernetes
    return Expectations(nodes=tuple(n.name for n in cluster.nodes), gpus=gpus, pod_cidr=kube.pod_cidr,
                        dns_domain=kube.dns_domain, gpu_runtime=settings.gpu.runtime,
                        dns_probe_image=image_ref(settings, settings.verify.dns_probe_image))


def dns_probe(api: client.ApiClient, expect: Expectations) -> Finding:
    """A name resolved from inside a pod: a one-shot pod in kube-system, deleted afterwards (the only thing the
    doctor creates, and only when asked)."""
    try:
        problem = check_dns(api, expect, DNS_PROBE_TIMEOUT_S)
    except ApiUnreachable as exc:
        return Finding("dns_probe", "cluster", "fail", "the API stopped answering during the DNS probe", str(exc))
    except ApiException as exc:
        return Finding("dns_probe", "cluster", "fail", f"the DNS probe could not run: the API answered HTTP {exc.status} "
                       f"({exc.reason})", "the admin kubeconfig must allow creating and deleting pods in kube-system")
    if problem is None:
        return Finding("dns_probe", "cluster", "ok", f"a pod resolved {dns_probe_target(expect)}")
    return Finding("dns_probe", problem.subject, "fail", problem.what, problem.cause)


def run_doctor(cluster: Cluster, settings: Settings, *, become_password: str | None = None,
               kubeconfig: Path | None = None, now: datetime | None = None, probe_dns: bool = False) -> DoctorReport:
    """Probe every node and read the API at once, then judge both. `probe_dns`: also resolve a name from a pod."""
    started = time.monotonic()
    state = ClusterState.load(cluster)
    with ThreadPoolExecutor(max_workers=2) as pool:
        reading = pool.submit(_snapshot, kubeconfig or admin_kubeconfig_path(cluster))
        # etcd as etcd itself says (its own probe on each control plane): a plug-in beside the nodes' probe.
        etcd_reading = pool.submit(run_etcd_checks, cluster, settings, become_password)
        nodes = run_node_checks(cluster, settings, counted_gpus=state.gpus, become_password=become_password, now=now)
        read = reading.result()
        etcd = etcd_reading.result()
    if isinstance(read, Finding):
        return DoctorReport(tuple(nodes), (read, *etcd), time.monotonic() - started)
    snapshot, api = read
    # The GPUs each node should offer: preflight's count where it ran, else what the doctor's probe saw.
    counted: dict[str, int] = dict((state.gpus or {}).items())
    gpus = {n.name: n.gpus if n.probed else counted.get(n.name, 0) for n in nodes}
    gpus = {name: count for name, count in gpus.items() if count and cluster.node(name).gpu != "false"}
    expect = expectations(cluster, settings, gpus)
    found = judge_cluster(snapshot, expect, [n.name for n in cluster.control_planes])
    if probe_dns:
        found.append(dns_probe(api, expect))
    answered = Finding("api", "cluster", "ok", f"answers at {snapshot.server}")
    return DoctorReport(tuple(nodes), (answered, *found, *etcd), time.monotonic() - started, snapshot.server)
