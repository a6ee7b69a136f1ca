"""Running preflight: every node probed by the probe runner (nodes/probe.py; uniqueness is judged against every
reachable node), progress reported as it goes, and the findings gathered into one PreflightReport."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ansible.release import __version__ as ANSIBLE_CORE

from provision.findings import Finding, NodeFindings
from provision.inputs.gpu_sharing import Advertised
from provision.inputs.inventory import Cluster, Node
from provision.inputs.platforms import NodePython, Platform, platform_for, release_of
from provision.inputs.settings import Settings
from provision.nodes.preflight.checks import (
    PREFLIGHT_POLICY,
    check_proxy_port,
    check_vip,
    containerd_source,
    evaluate,
    gpu_generations,
    judge,
)
from provision.nodes.preflight.probe import NodeFacts, parse_facts, probe_script
from provision.nodes.probe import NodeProbe, Probed, probe_nodes
from provision.nodes.runner import RunProgress
from provision.nodes.sources_check import NodeTarget
from provision.nodes.tally import HostTally
from provision.render.endpoint import PROXY_PORT, endpoint_mode

PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class PreflightNode(NodeFindings):
    """One node's findings, and what preflight read there that later phases take from it."""

    gpu_count: int = 0
    # The interpreter Ansible runs on the node (None when it was not reached or its system is refused).
    python: NodePython | None = None
    # The speed multi-node training crosses at (nodes/nic.py); None when unknown.
    link_gbps: float | None = None
    # The generations of its GPUs (versions.GPU_GENERATIONS names), read from their PCI device ids.
    gpu_generations: tuple[str, ...] = ()
    # What the node will fetch packages with (its platform row, architecture, release, GPU stack, containerd's
    # source): the sources check asks for those indexes. None where the node was not probed or is refused.
    sources_target: NodeTarget | None = None
    # What the device plugin will advertise there once the gpu settings are applied (None: no GPUs, or refused).
    advertised: Advertised | None = None


@dataclass(frozen=True)
class PreflightReport:
    nodes: tuple[PreflightNode, ...]
    elapsed_s: float
    # Control plane (node name) -> the interface kube-vip announces the VIP on there (probed ones; none without
    # a VIP).
    vip_interfaces: dict[str, str] = field(default_factory=dict)

    @property
    def blocking(self) -> list[Finding]:
        """What stops `up`, as PREFLIGHT_POLICY settled it."""
        return PREFLIGHT_POLICY.blocked(f for n in self.nodes for f in n.findings)

    @property
    def warnings(self) -> list[Finding]:
        return [f for n in self.nodes for f in n.findings if f.status == "warn"]

    @property
    def ok(self) -> bool:
        return not self.blocking

    @property
    def findings(self) -> list[Finding]:
        """The problems (blocking first), for telling each once with every node it holds for."""
        return self.blocking + self.warnings

    @property
    def gpu_counts(self) -> dict[str, int]:
        return {n.name: n.gpu_count for n in self.nodes}

    @property
    def gpu_generations(self) -> dict[str, list[str]]:
        return {n.name: list(n.gpu_generations) for n in self.nodes}

    @property
    def gpu_advertised(self) -> dict[str, Advertised]:
        """Node -> the resource and count the scheduler will be offered there (GPU nodes only)."""
        return {n.name: n.advertised for n in self.nodes if n.advertised is not None}

    @property
    def link_speeds(self) -> dict[str, float]:
        return {n.name: n.link_gbps for n in self.nodes if n.link_gbps is not None}

    @property
    def sources_targets(self) -> dict[str, NodeTarget]:
        return {n.name: n.sources_target for n in self.nodes if n.sources_target is not None}

    @property
    def pythons(self) -> dict[str, NodePython]:
        """Node -> the interpreter the playbooks run there (written into each run's inventory)."""
        return {n.name: n.python for n in self.nodes if n.python is not None}

    def node(self, name: str) -> PreflightNode:
        return next(n for n in self.nodes if n.name == name)


def facts_probe(vip: str | None) -> NodeProbe[NodeFacts]:
    """Preflight's probe: the facts script (on control planes also what they see of the VIP), read into NodeFacts
    with the node's clock."""
    return NodeProbe("facts", lambda node: probe_script(vip if node.is_control_plane else None),
                     lambda reading: parse_facts(reading.stdout, reading.clock), timeout_s=PROBE_TIMEOUT_S)


def sources_target(node: Node, facts: NodeFacts, settings: Settings, gpu_count: int,
                   python: NodePython | None = None) -> NodeTarget | None:
    """What the node's package sources depend on, from its facts (None for a system the table refuses); asked for
    with the interpreter Ansible will run there (the inventory's, else `python`, preflight's choice)."""
    platform = platform_for(facts.os_release)
    if not isinstance(platform, Platform):
        return None
    release = facts.os_release
    gpu = node.gpu == "true" or (node.gpu == "auto" and gpu_count > 0)
    return NodeTarget(node, platform, arch=facts.arch or "x86_64",
                      codename=release.get("VERSION_CODENAME") or release.get("UBUNTU_CODENAME", ""),
                      release=release_of(release).split(".")[0], gpu=gpu,
                      containerd_source=containerd_source(facts, settings.container_runtime.containerd_source),
                      python=node.python_interpreter or (python.interpreter if python else None))


def run_preflight(cluster: Cluster, settings: Settings, *, nodes: list[str] | None = None,
                  on_progress: Callable[[RunProgress], None] | None = None,
                  become_password: str | None = None, max_parallel: int = 32,
                  ansible_core: str = ANSIBLE_CORE) -> PreflightReport:
    """Check the named nodes (all by default), for a controller running `ansible_core` (this one's by default).
    Uniqueness is judged against every reachable node."""
    started = time.monotonic()
    targets = [cluster.node(name) for name in nodes] if nodes is not None else list(cluster.nodes)
    target_names = {n.name for n in targets}
    # Nodes outside the targets are probed too (a node being added must not clash with the existing ones).
    probed_nodes = list(cluster.nodes) if nodes is not None else targets
    progress = RunProgress(phase="preflight", hosts=[n.name for n in targets],
                           tally={n.name: HostTally() for n in targets})
    progress.task = "probing nodes"

    mode = endpoint_mode(cluster, settings)
    vip = settings.control_plane.vip if mode == "vip" else None
    proxy = mode == "proxy"

    def probed(outcome: Probed[NodeFacts]) -> None:
        if on_progress and outcome.node.name in target_names:
            tally = progress.tally[outcome.node.name]
            tally.unreachable = any(f.check == "ssh" and f.problem for f in outcome.reach)
            tally.ok = len(outcome.reach)
            on_progress(progress)

    probes = probe_nodes(probed_nodes, facts_probe(vip), settings.ssh, become_password=become_password,
                         max_parallel=max_parallel, on_probed=probed)
    facts_by_node = {name: p.value for name, p in probes.items() if p.value is not None}
    smoke = settings.smoke_test
    judged = evaluate([n for n in targets if n.name in facts_by_node], facts_by_node, ansible_core, settings=settings,
                      multi_node=smoke.enabled and smoke.nodes > 1, min_link_gbps=smoke.min_link_gbps)
    vip_facts = {name: facts.vip for name, facts in facts_by_node.items() if facts.vip is not None}
    holders = {name: found.held_on for name, found in vip_facts.items() if found.held_on}
    reports = []
    for node in targets:
        verdict = judged.get(node.name)
        checks = verdict.checks if verdict else []
        if vip and node.is_control_plane and node.name in facts_by_node:
            checks = [*checks, judge(node, check_vip(vip, vip_facts.get(node.name), holders))]
        if proxy and node.name in facts_by_node:
            checks = [*checks, judge(node, check_proxy_port(facts_by_node[node.name], PROXY_PORT))]
        found = tuple(judge(node, f) for f in probes[node.name].reach) + tuple(checks)
        facts = facts_by_node.get(node.name)
        generations = gpu_generations(facts, node) if facts is not None and verdict and verdict.gpu_count else ()
        gpu_count = verdict.gpu_count if verdict else 0
        python = verdict.python if verdict else None
        reports.append(PreflightNode(node.name, node.role, node.address, found, gpu_count, python,
                                     facts.links.link_gbps if facts else None, gpu_generations=generations,
                                     sources_target=sources_target(node, facts, settings, gpu_count, python)
                                     if facts else None,
                                     advertised=verdict.advertised if verdict else None))
        if on_progress:
            tally = progress.tally[node.name]
            tally.failed = len(PREFLIGHT_POLICY.blocked(found))
            tally.ok = len(found) - tally.failed
    if on_progress:
        progress.task = "done"
        on_progress(progress)
    interfaces = {name: found.interface for name, found in vip_facts.items() if found.interface}
    return PreflightReport(tuple(reports), time.monotonic() - started, interfaces)
