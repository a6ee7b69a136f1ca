"""The doctor on the nodes: every node probed in parallel by the probe runner (nodes/probe.py: one SSH connection
and one command each), then judged.

A node that cannot be reached (or whose sudo refuses) is one finding of its own; the other nodes are judged all
the same.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from provision.findings import Finding, NodeFindings
from provision.inputs.inventory import Cluster, Node
from provision.inputs.settings import Settings
from provision.inputs.sources import resolve_sources
from provision.inputs.values import NodeName
from provision.nodes.doctor.checks import (
    check_certs,
    check_clocks,
    check_containerd,
    check_disk,
    check_dns,
    check_gpu,
    check_hostname,
    check_hosts,
    check_kubelet,
    check_package_source,
    check_selinux,
    check_swap,
)
from provision.nodes.doctor.firewall import check_firewall, required_ports
from provision.nodes.doctor.probe import NodeHealth, parse_health, probe_script
from provision.nodes.probe import NodeProbe, probe_nodes
from provision.render.playbook_vars import sandbox_image

PROBE_TIMEOUT_S = 60
# Where the doctor points a node at when its Kubernetes repository does not answer.
KUBERNETES_REPO_SETTING = "mirrors.kubernetes_repo (or offline.source)"


@dataclass(frozen=True)
class NodeDoctorReport(NodeFindings):
    # The node was probed (reached, sudo worked, the probe's output read); its GPUs on PCI.
    probed: bool = True
    gpus: int = 0
    probe_s: float = 0.0


def kubernetes_index_urls(settings: Settings) -> dict[str, str]:
    """The index file of the Kubernetes repository each package manager reads (the kubernetes_packages role's
    layout: <repo>/v<minor>/deb/ with suite "/", <repo>/v<minor>/rpm/)."""
    base = f"{resolve_sources(settings).kubernetes_repo}/v{settings.kubernetes.minor}"
    return {"deb": f"{base}/deb/InRelease", "rpm": f"{base}/rpm/repodata/repomd.xml"}


def health_probe(settings: Settings) -> NodeProbe[NodeHealth]:
    """The doctor's probe: one read-only script for every node, read into NodeHealth with the node's clock."""
    script = probe_script(kubernetes_index_urls(settings))
    return NodeProbe("probe", lambda _: script, lambda reading: parse_health(reading.stdout, reading.clock),
                     timeout_s=PROBE_TIMEOUT_S, unprobed="not checked: ")


def expected_gpus(node: Node, health: NodeHealth, counted: Mapping[NodeName, int] | None) -> int:
    """The GPUs a node should have: preflight's count (kept in the cluster's state), else those on its PCI bus;
    none where the inventory says gpu=false."""
    if node.gpu == "false":
        return 0
    if counted is not None and node.name in counted:
        return counted[node.name]
    return health.gpus


def judge_node(node: Node, health: NodeHealth, cluster: Cluster, settings: Settings, *, gpus: int,
               now: datetime) -> list[Finding]:
    """Every check of one node's probe (the clock is judged across nodes, apart)."""
    name = node.name
    return [
        check_swap(name, health), check_hostname(name, health),
        check_hosts(name, health, {n.name: n.cluster_address for n in cluster.nodes}),
        check_firewall(name, health, required_ports(node.is_control_plane)), check_selinux(name, health),
        check_containerd(name, health, sandbox_image=sandbox_image(settings), nvidia=gpus > 0,
                         nvidia_default=settings.gpu.runtime == "default"),
        check_kubelet(name, health), check_disk(name, health), check_dns(name, health),
        check_certs(name, health, now, settings.certificates.renew_before_days), *check_gpu(name, health, gpus),
        check_package_source(name, health, kubernetes_index_urls(settings), KUBERNETES_REPO_SETTING),
    ]


def run_node_checks(cluster: Cluster, settings: Settings, *, counted_gpus: Mapping[NodeName, int] | None = None,
                    become_password: str | None = None, now: datetime | None = None,
                    max_parallel: int = 32) -> list[NodeDoctorReport]:
    """Probe and judge every node of the inventory, in inventory order."""
    probed = probe_nodes(cluster.nodes, health_probe(settings), settings.ssh, become_password=become_password,
                         max_parallel=max_parallel)
    healths = {name: p.value for name, p in probed.items() if p.value is not None}
    clocks = check_clocks(healths)
    moment = now or datetime.now().astimezone()
    reports = []
    for node in cluster.nodes:
        outcome = probed[node.name]
        health = outcome.value
        if health is None:
            reports.append(NodeDoctorReport(node.name, node.role, node.address, outcome.reach, probed=False,
                                            probe_s=outcome.elapsed_s))
            continue
        gpus = expected_gpus(node, health, counted_gpus)
        findings = [*outcome.reach, clocks[node.name],
                    *judge_node(node, health, cluster, settings, gpus=gpus, now=moment)]
        reports.append(NodeDoctorReport(node.name, node.role, node.address, tuple(findings), gpus=gpus,
                                        probe_s=outcome.elapsed_s))
    return reports
