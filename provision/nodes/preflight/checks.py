"""Judging a node's facts: pure functions, a fact in, a Finding (problem or not, detail, fix) out; then one
policy, `severity()`, turns a problem into "fail" (blocks `up`) or "warn" (shown, lets `up` go on)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from provision.inputs.inventory import Node
from provision.nodes.nic import check_links
from provision.nodes.preflight.probe import NVIDIA_VENDOR, NodeFacts

Status = Literal["ok", "warn", "fail"]

# kubeadm's own minimums for a control plane.
MIN_CPUS = 2
MIN_MEMORY_MB = 1700
CLOCK_SKEW_LIMIT_S = 30.0
CONTROL_PLANE_PORTS = (6443, 2379, 2380, 10250, 10257, 10259)
WORKER_PORTS = (10250,)
# Processes that hold those ports on a node that is already in a cluster (ss shows at most 15 characters).
KUBE_PROCESSES = frozenset({"kube-apiserver", "etcd", "kubelet", "kube-controller", "kube-scheduler"})
# Supported systems: os-release ID -> the major versions that work.
SUPPORTED_OS: dict[str, tuple[str, ...]] = {
    # CentOS Stream 9. CentOS 8 and Stream 8 are past their end of life; CentOS 7 too, and see below.
    "centos": ("9",),
    # EL8 is refused like CentOS 7 (see below).
    "rocky": ("9",),
    "almalinux": ("9",),
    "ubuntu": ("22.04", "24.04"),
    "debian": ("12",),
}
SUPPORTED_OS_TEXT = "CentOS Stream 9, Rocky Linux 9, AlmaLinux 9, Ubuntu 22.04/24.04, Debian 12"
# ansible-core 2.19 runs its modules with Python >= 3.8 and manages packages through the dnf Python bindings.
# CentOS 7 has Python 3.6 and yum 3; EL8's dnf bindings exist only for its platform Python 3.6 (ansible/ansible
# #82068). No playbook can prepare either, so they are refused here, before anything runs.
RHEL_FAMILY_IDS = ("centos", "rhel", "rocky", "almalinux", "ol")
OLD_RHEL_FIX = {
    "7": "CentOS/RHEL 7 is end-of-life and cannot be managed by ansible-core 2.19 (Python 3.6, yum 3): reinstall "
         "the node with Rocky Linux 9, AlmaLinux 9 or CentOS Stream 9 (same RPM family)",
    "8": "EL8 cannot be managed by ansible-core 2.19 (its dnf Python bindings exist only for Python 3.6): upgrade "
         "the node to EL9 (Rocky Linux 9, AlmaLinux 9 or CentOS Stream 9)",
}

# --- which problems block: the one place that decides ------------------------------------------------------

# A problem found by one of these stops `up` on any node.
BLOCKING = frozenset({"ssh", "sudo", "facts", "os", "hostname", "product_uuid", "mac", "ports", "clock", "gpu"})
# These stop `up` only on the control plane (kubeadm init refuses); on a worker they are a warning.
BLOCKING_ON_CONTROL_PLANE = frozenset({"cpu", "memory"})


def severity(check: str, node: Node) -> Status:
    """What a problem found by `check` on `node` means: "fail" blocks, "warn" is shown and lets `up` go on."""
    if check in BLOCKING or (check in BLOCKING_ON_CONTROL_PLANE and node.is_control_plane):
        return "fail"
    return "warn"


# --- results -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Finding:
    """A check's verdict before the policy gives it a status: was there a problem, what, and its fix."""

    name: str
    problem: bool
    detail: str
    fix: str = ""


def worst(statuses: Iterable[Status]) -> Status:
    found = set(statuses)
    return "fail" if "fail" in found else "warn" if "warn" in found else "ok"


# --- judging facts (pure functions) --------------------------------------------------------------------------

def check_os(facts: NodeFacts) -> Finding:
    release = facts.os_release
    os_id = release.get("ID", "").lower()
    version = release.get("VERSION_ID", "")
    name = f"{release.get('NAME', os_id)} {version}".strip() or "unknown (no /etc/os-release)"
    wanted = SUPPORTED_OS.get(os_id, ())
    if version in wanted or version.split(".")[0] in wanted:
        return Finding("os", False, name)
    if os_id in RHEL_FAMILY_IDS and version.split(".")[0] in OLD_RHEL_FIX:
        return Finding("os", True, f"{name} is not supported", OLD_RHEL_FIX[version.split(".")[0]])
    return Finding("os", True, f"{name} is not supported", f"use one of: {SUPPORTED_OS_TEXT}")


def check_cpu(facts: NodeFacts) -> Finding:
    if facts.cpus >= MIN_CPUS:
        return Finding("cpu", False, f"{facts.cpus} CPUs")
    return Finding("cpu", True, f"{facts.cpus} CPU(s), at least {MIN_CPUS} needed",
                   f"give the machine at least {MIN_CPUS} CPUs")


def check_memory(facts: NodeFacts) -> Finding:
    if facts.memory_mb >= MIN_MEMORY_MB:
        return Finding("memory", False, f"{facts.memory_mb} MB")
    return Finding("memory", True, f"{facts.memory_mb} MB of memory, at least {MIN_MEMORY_MB} MB needed",
                   f"give the machine at least {MIN_MEMORY_MB} MB of memory")


def part_of_cluster(facts: NodeFacts) -> bool:
    """The node already runs this cluster's pieces (a re-run on a finished cluster)."""
    return bool(facts.kube_configs) or any(lst.process in KUBE_PROCESSES for lst in facts.listeners)


def check_ports(facts: NodeFacts, node: Node) -> Finding:
    wanted = CONTROL_PLANE_PORTS if node.is_control_plane else WORKER_PORTS
    taken = {lst.port: lst for lst in facts.listeners if lst.port in wanted}
    if not taken:
        return Finding("ports", False, "free")
    foreign = {port: lst for port, lst in taken.items() if lst.process not in KUBE_PROCESSES}
    if not foreign and part_of_cluster(facts):
        holders = sorted({lst.process for lst in taken.values() if lst.process})
        return Finding("ports", False, f"already part of the cluster ({', '.join(holders) or 'kubeconfig present'})")
    culprits = foreign or taken
    described = ", ".join(f"{port} ({lst.process or 'unknown process'}"
                          f"{f' pid {lst.pid}' if lst.pid else ''})" for port, lst in sorted(culprits.items()))
    first = min(culprits)
    return Finding("ports", True, f"in use: {described}",
                   f"stop what listens there (`ss -ltnp 'sport = :{first}'` on the node shows it), or run "
                   "`bootstrap reset` if it is left from an earlier cluster")


def check_clock(facts: NodeFacts, limit_s: float = CLOCK_SKEW_LIMIT_S) -> Finding:
    offset = facts.clock_offset_s
    if abs(offset) - facts.clock_uncertainty_s <= limit_s:
        return Finding("clock", False, f"{offset:+.1f} s")
    return Finding("clock", True, f"{offset:+.0f} s off this machine's clock (limit {limit_s:.0f} s)",
                   "set the time and keep it in sync: `timedatectl set-ntp true` (chrony or systemd-timesyncd)")


def check_swap(facts: NodeFacts) -> Finding:
    places = [f"active: {', '.join(facts.swaps_active)}"] if facts.swaps_active else []
    places += [f"/etc/fstab: {line}" for line in facts.fstab_swaps]
    if not places:
        return Finding("swap", False, "off")
    return Finding("swap", True, "; ".join(places), "prepare turns swap off and comments out its /etc/fstab line")


def check_selinux(facts: NodeFacts) -> Finding:
    if facts.selinux != "enforcing":
        return Finding("selinux", False, facts.selinux or "absent")
    return Finding("selinux", True, "enforcing", "prepare sets SELinux to permissive (kubeadm's pods need it)")


def check_gpu(facts: NodeFacts, node: Node) -> tuple[Finding, int]:
    """The finding and the GPU count this node contributes (0 when the inventory says gpu=false)."""
    count = len(facts.gpus)
    driver = f"driver {facts.nvidia_driver.split('Kernel Module')[-1].split()[0]}" if facts.nvidia_driver and \
        "Kernel Module" in facts.nvidia_driver else ("driver loaded" if facts.nvidia_driver else "no driver yet")
    if node.gpu == "false":
        ignored = f" ({count} found, not used)" if count else ""
        return Finding("gpu", False, f"gpu=false in the inventory{ignored}"), 0
    if count == 0:
        if node.gpu == "true":
            return Finding("gpu", True, "gpu=true in the inventory, but no NVIDIA GPU was found",
                           f"check `lspci -d {NVIDIA_VENDOR}:` on the node, or set gpu=auto / gpu=false for it"), 0
        return Finding("gpu", False, "none"), 0
    return Finding("gpu", False, f"{count} NVIDIA GPU{'s' if count > 1 else ''} ({driver})"), count


def check_unique(facts_by_node: dict[str, NodeFacts]) -> dict[str, list[Finding]]:
    """hostname, product_uuid and MACs must differ between nodes (kubeadm's requirement)."""
    findings: dict[str, list[Finding]] = {name: [] for name in facts_by_node}

    def owners(values: dict[str, set[str]]) -> dict[str, list[str]]:
        seen: dict[str, list[str]] = {}
        for name, node_values in values.items():
            for value in node_values:
                seen.setdefault(value, []).append(name)
        return seen

    fixes = {
        "hostname": "give every machine its own hostname (`hostnamectl set-hostname NAME` on it)",
        "product_uuid": "machines cloned from one image share it: give each VM its own UUID (a hypervisor setting)",
        "mac": "cloned machines share a MAC: give each network interface its own MAC address",
    }
    values = {
        "hostname": {n: {f.hostname.lower()} if f.hostname else set() for n, f in facts_by_node.items()},
        "product_uuid": {n: {f.product_uuid} if f.product_uuid else set() for n, f in facts_by_node.items()},
        "mac": {n: set(f.macs.values()) - {"00:00:00:00:00:00"} for n, f in facts_by_node.items()},
    }
    for check, per_node in values.items():
        holders = owners(per_node)
        for name in facts_by_node:
            shared = {value: sorted(set(holders[value]) - {name}) for value in per_node[name]
                      if len(holders[value]) > 1}
            if shared:
                detail = "; ".join(f"{value} also on {', '.join(others)}" for value, others in sorted(shared.items()))
                findings[name].append(Finding(check, True, f"{check} {detail}", fixes[check]))
            else:
                shown = ", ".join(sorted(per_node[name])) or "not exposed"
                findings[name].append(Finding(check, False, shown if check != "mac" else f"{len(per_node[name])} unique"))
    return findings


def judge(node: Node, finding: Finding) -> CheckResult:
    if not finding.problem:
        return CheckResult(finding.name, "ok", finding.detail)
    return CheckResult(finding.name, severity(finding.name, node), finding.detail, finding.fix)


def check_network(facts: NodeFacts, *, multi_node: bool, min_gbps: float) -> Finding:
    problem, detail, fix = check_links(facts.links, multi_node=multi_node, min_gbps=min_gbps)
    return Finding("network", problem, detail, fix)


def evaluate(nodes: list[Node], facts_by_node: dict[str, NodeFacts], *, multi_node: bool = False,
             min_link_gbps: float = 10.0) -> dict[str, tuple[list[CheckResult], int]]:
    """Judge the facts of the nodes that could be probed: per node, its checks and GPU count. `multi_node`: the
    smoke test will train across nodes, so links under min_link_gbps are warned about."""
    unique = check_unique(facts_by_node)
    results = {}
    for node in nodes:
        facts = facts_by_node[node.name]
        gpu_finding, gpu_count = check_gpu(facts, node)
        findings = [check_os(facts), check_cpu(facts), check_memory(facts), *unique[node.name],
                    check_ports(facts, node), check_clock(facts), check_swap(facts), check_selinux(facts), gpu_finding,
                    check_network(facts, multi_node=multi_node, min_gbps=min_link_gbps)]
        results[node.name] = ([judge(node, f) for f in findings], gpu_count)
    return results
