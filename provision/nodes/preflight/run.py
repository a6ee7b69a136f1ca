"""Running preflight: every node probed over SSH in parallel (uniqueness is judged against every reachable
node), progress reported as it goes, and the verdicts gathered into one PreflightReport."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from ansible.release import __version__ as ANSIBLE_CORE

from provision.findings import Finding as NodeFinding
from provision.inputs.gpu_sharing import Advertised
from provision.inputs.inventory import Cluster, Node
from provision.inputs.platforms import NodePython, Platform, platform_for, release_of
from provision.inputs.settings import Settings
from provision.nodes.preflight.checks import (
    CheckResult,
    Finding,
    Status,
    check_proxy_port,
    check_vip,
    containerd_source,
    evaluate,
    gpu_generations,
    judge,
    worst,
)
from provision.nodes.preflight.probe import NodeFacts, parse_facts, probe_script
from provision.nodes.runner import RunProgress
from provision.nodes.sources_check import NodeTarget
from provision.nodes.ssh import SshError, SshShell
from provision.nodes.tally import HostTally
from provision.render.endpoint import PROXY_PORT, endpoint_mode

PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class Problem:
    node: str
    check: CheckResult

    def describe(self) -> str:
        fix = f"; fix: {self.check.fix}" if self.check.fix else ""
        return f"{self.node}: {self.check.name}: {self.check.detail}{fix}"


@dataclass(frozen=True)
class NodeReport:
    name: str
    role: str
    address: str
    checks: tuple[CheckResult, ...]
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

    def check(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    @property
    def status(self) -> Status:
        return worst(c.status for c in self.checks)


@dataclass(frozen=True)
class PreflightReport:
    nodes: tuple[NodeReport, ...]
    elapsed_s: float
    # Control plane (node name) -> the interface kube-vip announces the VIP on there (probed ones; none without
    # a VIP).
    vip_interfaces: dict[str, str] = field(default_factory=dict)

    def _problems(self, status: Status) -> list[Problem]:
        return [Problem(n.name, c) for n in self.nodes for c in n.checks if c.status == status]

    @property
    def blocking(self) -> list[Problem]:
        return self._problems("fail")

    @property
    def warnings(self) -> list[Problem]:
        return self._problems("warn")

    @property
    def ok(self) -> bool:
        return not self.blocking

    @property
    def findings(self) -> list[NodeFinding]:
        """The problems as findings (blocking first), for telling each once with every node it holds for."""
        return [NodeFinding(p.check.name, p.node, p.check.status, p.check.detail, p.check.fix)
                for p in self.blocking + self.warnings]

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

    def node(self, name: str) -> NodeReport:
        return next(n for n in self.nodes if n.name == name)


@dataclass
class _Probe:
    node: Node
    checks: list[CheckResult] = field(default_factory=list)
    facts: NodeFacts | None = None


def _probe(node: Node, settings: Settings, become_password: str | None, script: str) -> _Probe:
    outcome = _Probe(node)
    shell = SshShell(node, settings.ssh, become_password)
    try:
        try:
            shell.open()
        except SshError as exc:
            outcome.checks.append(judge(node, Finding("ssh", True, exc.problem, exc.fix)))
            return outcome
        outcome.checks.append(CheckResult("ssh", "ok", f"as {node.user}"))
        try:
            shell.check_sudo()
        except SshError as exc:
            outcome.checks.append(judge(node, Finding("sudo", True, exc.problem, exc.fix)))
            return outcome
        outcome.checks.append(CheckResult("sudo", "ok", "sudo" if become_password is None else "sudo -K"))
        started = time.time()
        result = shell.run(script, sudo=True, timeout_s=PROBE_TIMEOUT_S)
        finished = time.time()
        try:
            facts = parse_facts(result.stdout)
        except ValueError as exc:
            outcome.checks.append(judge(node, Finding("facts", True, f"could not read the node's facts: {exc} "
                                                      f"({result.first_error_line()})", "run with the node reachable "
                                                      "and /bin/sh working, then again")))
            return outcome
        if facts.node_time_s is not None:
            # The node read its clock somewhere within the round trip: assume halfway, within half of it.
            facts = replace(facts, clock_offset_s=facts.node_time_s - (started + finished) / 2,
                            clock_uncertainty_s=(finished - started) / 2)
        outcome.facts = facts
    except SshError as exc:
        outcome.checks.append(judge(node, Finding("facts", True, exc.problem, exc.fix)))
    finally:
        shell.close()
    return outcome


def sources_target(node: Node, facts: NodeFacts, settings: Settings, gpu_count: int) -> NodeTarget | None:
    """What the node's package sources depend on, from its facts (None for a system the table refuses)."""
    platform = platform_for(facts.os_release)
    if not isinstance(platform, Platform):
        return None
    release = facts.os_release
    gpu = node.gpu == "true" or (node.gpu == "auto" and gpu_count > 0)
    return NodeTarget(node, platform, arch=facts.arch or "x86_64",
                      codename=release.get("VERSION_CODENAME") or release.get("UBUNTU_CODENAME", ""),
                      release=release_of(release).split(".")[0], gpu=gpu,
                      containerd_source=containerd_source(facts, settings.container_runtime.containerd_source))


def run_preflight(cluster: Cluster, settings: Settings, *, nodes: list[str] | None = None,
                  on_progress: Callable[[RunProgress], None] | None = None,
                  become_password: str | None = None, max_parallel: int = 32,
                  ansible_core: str = ANSIBLE_CORE, upgrade: bool = False) -> PreflightReport:
    """Check the named nodes (all by default), for a controller running `ansible_core` (this one's by default).
    Uniqueness is judged against every reachable node. `upgrade`: for `bootstrap upgrade` (evaluate)."""
    started = time.monotonic()
    targets = [cluster.node(name) for name in nodes] if nodes is not None else list(cluster.nodes)
    target_names = {n.name for n in targets}
    # Nodes outside the targets are probed too (a node being added must not clash with the existing ones).
    probed_nodes = list(cluster.nodes) if nodes is not None else targets
    progress = RunProgress(phase="preflight", hosts=[n.name for n in targets],
                           tally={n.name: HostTally() for n in targets})
    progress.task = "probing nodes"
    lock = threading.Lock()

    mode = endpoint_mode(cluster, settings)
    vip = settings.control_plane.vip if mode == "vip" else None
    proxy = mode == "proxy"
    script = probe_script(vip)

    def probe(node: Node) -> _Probe:
        outcome = _probe(node, settings, become_password, script if node.is_control_plane else probe_script())
        if on_progress and node.name in target_names:
            with lock:
                tally = progress.tally[node.name]
                tally.unreachable = any(c.name == "ssh" and c.status == "fail" for c in outcome.checks)
                tally.ok = len(outcome.checks)
                on_progress(progress)
        return outcome

    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(probed_nodes)))) as pool:
        probes: dict[str, _Probe] = {p.node.name: p for p in pool.map(probe, probed_nodes)}
    facts_by_node = {name: p.facts for name, p in probes.items() if p.facts is not None}
    smoke = settings.smoke_test
    judged = evaluate([n for n in targets if n.name in facts_by_node], facts_by_node, ansible_core, settings=settings,
                      multi_node=smoke.enabled and smoke.nodes > 1, min_link_gbps=smoke.min_link_gbps, upgrade=upgrade)
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
        all_checks = tuple(probes[node.name].checks + checks)
        facts = facts_by_node.get(node.name)
        generations = gpu_generations(facts, node) if facts is not None and verdict and verdict.gpu_count else ()
        gpu_count = verdict.gpu_count if verdict else 0
        reports.append(NodeReport(node.name, node.role, node.address, all_checks, gpu_count,
                                  verdict.python if verdict else None, facts.links.link_gbps if facts else None,
                                  gpu_generations=generations,
                                  sources_target=sources_target(node, facts, settings, gpu_count) if facts else None,
                                  advertised=verdict.advertised if verdict else None))
        if on_progress:
            with lock:
                tally = progress.tally[node.name]
                tally.ok = sum(c.status != "fail" for c in all_checks)
                tally.failed = sum(c.status == "fail" for c in all_checks)
    if on_progress:
        progress.task = "done"
        on_progress(progress)
    interfaces = {name: found.interface for name, found in vip_facts.items() if found.interface}
    return PreflightReport(tuple(reports), time.monotonic() - started, interfaces)
