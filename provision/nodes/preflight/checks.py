"""Judging a node's facts: pure functions, a fact in, a Finding (provision/findings.py: ok, or a problem with its
fix) out; then preflight's BlockingPolicy, PREFLIGHT_POLICY, settles each problem as "fail" (blocks `up`) or
"warn" (shown, lets `up` go on)."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from provision.findings import BlockingPolicy, Finding, ok, problem
from provision.inputs import versions
from provision.inputs.gpu_sharing import Advertised, advertised, mig_problem
from provision.inputs.inventory import Node
from provision.inputs.platforms import (
    NodePython,
    Platform,
    PythonProblem,
    Refusal,
    choose_python,
    controller_refusal,
    missing_cpu_flags,
    platform_for,
)
from provision.inputs.settings import Settings
from provision.nodes.nic import check_links
from provision.nodes.preflight.probe import NVIDIA_VENDOR, NodeFacts, VipFacts

# kubeadm's own minimums for a control plane.
MIN_CPUS = 2
MIN_MEMORY_MB = 1700
CLOCK_SKEW_LIMIT_S = 30.0
CONTROL_PLANE_PORTS = (6443, 2379, 2380, 10250, 10257, 10259)
WORKER_PORTS = (10250,)
# Processes that hold those ports on a node that is already in a cluster (ss shows at most 15 characters).
KUBE_PROCESSES = frozenset({"kube-apiserver", "etcd", "kubelet", "kube-controller", "kube-scheduler"})
# Interfaces whose addresses come from the pod or service range by design (Calico's, kube-proxy's ipvs dummy, node
# local DNS): a node already in the cluster has them.
CLUSTER_INTERFACES = frozenset({"lo", "tunl0", "vxlan.calico", "kube-ipvs0", "nodelocaldns"})
CLUSTER_INTERFACE_PREFIXES = ("cali",)

# --- which problems block: the one place that decides ------------------------------------------------------

# A problem found by one of these stops `up` on any node; cpu and memory only on the control plane (kubeadm init
# refuses), on a worker they are a warning. The compatibility rules come in pairs where the settings can accept the
# risk: containerd_1x (Kubernetes 1.35) and cgroup_v1_allowed (kubelet.allow_cgroup_v1) are the warned halves of
# containerd and cgroup. `ssh`, `sudo` and `facts` are the probe runner's (nodes/probe.py): a node not probed.
PREFLIGHT_POLICY = BlockingPolicy(
    blocking=frozenset({"ssh", "sudo", "facts", "os", "python", "isa", "hostname", "product_uuid", "mac", "ports",
                        "clock", "gpu", "containerd", "cgroup", "kernel", "gpu_driver", "smoke_image", "vip",
                        "proxy_port", "gpu_mig", "networks"}),
    on_control_plane=frozenset({"cpu", "memory"}))


def judge(node: Node, finding: Finding) -> Finding:
    """A judge's finding about `node`, settled by preflight's policy."""
    return PREFLIGHT_POLICY.settle(finding, node.name, node.is_control_plane)


# --- judging facts (pure functions) --------------------------------------------------------------------------

def check_os(facts: NodeFacts, ansible_core: str) -> Finding:
    """The node's system against the platform table (provision/inputs/platforms.py), and against this controller:
    a system the controller's ansible-core cannot manage is refused here, before anything changes."""
    row = platform_for(facts.os_release)
    if isinstance(row, Refusal):
        return problem("os", f"{row.name}: {row.reason}", row.fix)
    refusal = controller_refusal(row, ansible_core)
    if refusal:
        return problem("os", f"{row.name}: {refusal.split(': ', 1)[0]}", refusal.rsplit(": ", 1)[1])
    # In the node's own words (its os-release), as the preflight table shows it.
    release = facts.os_release
    return ok("os", f"{release.get('NAME', row.name)} {release.get('VERSION_ID', '')}".strip())


def check_support(facts: NodeFacts) -> Finding:
    """A system the table supports with a warning (it runs, but say why it may not keep working)."""
    row = platform_for(facts.os_release)
    if isinstance(row, Platform) and row.support == "warned":
        return problem("support", f"{row.name}: {row.note.split(': ')[0]}", row.note.split(": ", 1)[-1])
    return ok("support", row.support_level)


def check_python(facts: NodeFacts) -> tuple[Finding, NodePython | None]:
    """The interpreter Ansible will run on the node (the platform table's), and whether it is there or will be
    installed by prepare before anything else runs."""
    row = platform_for(facts.os_release)
    if not isinstance(row, Platform):
        return ok("python", "not checked (system refused)"), None
    chosen = choose_python(row, {found.path: found for found in facts.pythons})
    if isinstance(chosen, PythonProblem):
        return problem("python", chosen.detail, chosen.fix), None
    if chosen.install:
        return ok("python", f"{chosen.interpreter}: prepare installs {chosen.install} first"), chosen
    found = facts.python(chosen.interpreter)
    version = f" ({'.'.join(map(str, found.version))})" if found else ""
    return ok("python", f"{chosen.interpreter}{version}"), chosen


def check_isa(facts: NodeFacts) -> Finding:
    """EL10 is built for x86-64-v3 (AlmaLinux 10 also for v2): the CPU must have that level's features."""
    row = platform_for(facts.os_release)
    if not isinstance(row, Platform) or row.x86_64_level < 2 or facts.arch != "x86_64":
        return ok("isa", facts.arch or "unknown")
    if not facts.cpu_flags:
        return ok("isa", "not checked (no CPU flags in /proc/cpuinfo)")
    missing = missing_cpu_flags(row, facts.arch, facts.cpu_flags)
    level = f"x86-64-v{row.x86_64_level}"
    if not missing:
        return ok("isa", level)
    way_out = "AlmaLinux 10's x86_64_v2 build or an EL9 release" if row.x86_64_level == 3 else "an EL9 release"
    return problem("isa", f"{row.name} needs {level}; this CPU lacks {', '.join(sorted(missing))}",
                   f"give the VM the host's CPU model (host-passthrough), or install {way_out}")


def check_cpu(facts: NodeFacts) -> Finding:
    if facts.cpus >= MIN_CPUS:
        return ok("cpu", f"{facts.cpus} CPUs")
    return problem("cpu", f"{facts.cpus} CPU(s), at least {MIN_CPUS} needed",
                   f"give the machine at least {MIN_CPUS} CPUs")


def check_memory(facts: NodeFacts) -> Finding:
    if facts.memory_mb >= MIN_MEMORY_MB:
        return ok("memory", f"{facts.memory_mb} MB")
    return problem("memory", f"{facts.memory_mb} MB of memory, at least {MIN_MEMORY_MB} MB needed",
                   f"give the machine at least {MIN_MEMORY_MB} MB of memory")


def part_of_cluster(facts: NodeFacts) -> bool:
    """The node already runs this cluster's pieces (a re-run on a finished cluster)."""
    return bool(facts.kube_configs) or any(lst.process in KUBE_PROCESSES for lst in facts.listeners)


def check_ports(facts: NodeFacts, node: Node) -> Finding:
    wanted = CONTROL_PLANE_PORTS if node.is_control_plane else WORKER_PORTS
    taken = {lst.port: lst for lst in facts.listeners if lst.port in wanted}
    if not taken:
        return ok("ports", "free")
    foreign = {port: lst for port, lst in taken.items() if lst.process not in KUBE_PROCESSES}
    if not foreign and part_of_cluster(facts):
        holders = sorted({lst.process for lst in taken.values() if lst.process})
        return ok("ports", f"already part of the cluster ({', '.join(holders) or 'kubeconfig present'})")
    culprits = foreign or taken
    described = ", ".join(f"{port} ({lst.process or 'unknown process'}"
                          f"{f' pid {lst.pid}' if lst.pid else ''})" for port, lst in sorted(culprits.items()))
    first = min(culprits)
    return problem("ports", f"in use: {described}",
                   f"stop what listens there (`ss -ltnp 'sport = :{first}'` on the node shows it), or run "
                   "`bootstrap reset` if it is left from an earlier cluster")


def check_networks(facts: NodeFacts, settings: Settings) -> Finding:
    """The node's own networks against the pod and service CIDRs: traffic to an address both hold would go the
    wrong way. The settings alone (pod against service) are judged when they are read (inputs/settings.py)."""
    kube = settings.kubernetes
    for key, example in (("pod_cidr", "10.244.0.0/16"), ("service_cidr", "10.96.0.0/12")):
        cidr = ipaddress.IPv4Network(getattr(kube, key))
        for name, address in facts.addresses:
            if name in CLUSTER_INTERFACES or name.startswith(CLUSTER_INTERFACE_PREFIXES):
                continue
            if address.network.overlaps(cidr):
                return problem("networks", f"interface {name} has {address.with_prefixlen}, which overlaps "
                                                 f"kubernetes.{key} {cidr}: cluster traffic and this network would "
                                                 "collide",
                               f"set kubernetes.{key} in cluster.yaml to a range none of your nodes use (e.g. {example})")
    return ok("networks", "no node network overlaps the pod or service CIDR")


def check_clock(facts: NodeFacts, limit_s: float = CLOCK_SKEW_LIMIT_S) -> Finding:
    offset = facts.clock_offset_s
    if abs(offset) - facts.clock_uncertainty_s <= limit_s:
        return ok("clock", f"{offset:+.1f} s")
    return problem("clock", f"{offset:+.0f} s off this machine's clock (limit {limit_s:.0f} s)",
                   "set the time and keep it in sync: `timedatectl set-ntp true` (chrony or systemd-timesyncd)")


def check_swap(facts: NodeFacts) -> Finding:
    places = [f"active: {', '.join(facts.swaps_active)}"] if facts.swaps_active else []
    places += [f"/etc/fstab: {line}" for line in facts.fstab_swaps]
    if not places:
        return ok("swap", "off")
    return problem("swap", "; ".join(places), "prepare turns swap off and comments out its /etc/fstab line")


def check_selinux(facts: NodeFacts) -> Finding:
    if facts.selinux != "enforcing":
        return ok("selinux", facts.selinux or "absent")
    return problem("selinux", "enforcing", "prepare sets SELinux to permissive (kubeadm's pods need it)")


def check_gpu(facts: NodeFacts, node: Node) -> tuple[Finding, int]:
    """The finding and the GPU count this node contributes (0 when the inventory says gpu=false)."""
    count = len(facts.gpus)
    driver = f"driver {facts.nvidia_driver.split('Kernel Module')[-1].split()[0]}" if facts.nvidia_driver and \
        "Kernel Module" in facts.nvidia_driver else ("driver loaded" if facts.nvidia_driver else "no driver yet")
    if node.gpu == "false":
        ignored = f" ({count} found, not used)" if count else ""
        return ok("gpu", f"gpu=false in the inventory{ignored}"), 0
    if count == 0:
        if node.gpu == "true":
            return problem("gpu", "gpu=true in the inventory, but no NVIDIA GPU was found",
                           f"check `lspci -d {NVIDIA_VENDOR}:` on the node, or set gpu=auto / gpu=false for it"), 0
        return ok("gpu", "none"), 0
    return ok("gpu", f"{count} NVIDIA GPU{'s' if count > 1 else ''} ({driver})"), count


def check_vip(vip: str, facts: VipFacts | None, holders: dict[str, str]) -> Finding:
    """A control plane and the control-plane VIP: kube-vip answers ARP for it, so it must be on a network the
    control plane is attached to (no gateway in the route), and free: held by nobody, or by one of our control
    planes (`holders`: node -> interface, a re-run on a formed cluster)."""
    fix_subnet = "pick control_plane.vip from the control planes' own subnet (ARP does not cross a router)"
    if facts is None or facts.interface is None:
        return problem("vip", f"no route to the VIP {vip}", fix_subnet)
    if holders:
        where = ", ".join(f"{name} ({interface})" for name, interface in sorted(holders.items()))
        return ok("vip", f"{vip} held by {where}: kube-vip")
    if facts.route_via:
        return problem("vip", f"{vip} is reached through the router {facts.route_via} (on {facts.route_dev}), "
                                    "not on this node's own network", fix_subnet)
    if facts.answered_by:
        return problem("vip", f"{vip} is taken: {facts.answered_by} answers for it on {facts.route_dev}",
                       "pick a free address for control_plane.vip (outside every DHCP range), or free this one")
    return ok("vip", f"{vip} free, on {facts.interface}")


def check_proxy_port(facts: NodeFacts, port: int) -> Finding:
    """The local API proxy's port (endpoint proxy) is free, or held by the proxy itself (a formed cluster)."""
    holders = [lst for lst in facts.listeners if lst.port == port and lst.process != "haproxy"]
    if not holders:
        return ok("proxy_port", f"{port} free" if not any(
            lst.port == port for lst in facts.listeners) else f"{port}: the local API proxy")
    holder = holders[0]
    who = f"{holder.process or 'an unknown process'}{f' (pid {holder.pid})' if holder.pid else ''}"
    return problem("proxy_port", f"{port}, where the local API proxy listens, is held by {who}",
                   f"stop it (`ss -ltnp 'sport = :{port}'` on the node shows it), or give the cluster a VIP "
                   "(control_plane.vip), which needs no port on the nodes")
# --- the compatibility rules between a node and the versions chosen (provision/inputs/versions.py) ---------------

# Which source each runtime package comes from: Debian's docker.io depends on Debian's containerd, which
# conflicts with containerd.io, and docker-ce needs containerd.io, so one node holds one family only.
PACKAGE_SOURCE = {"containerd": "distribution", "docker.io": "distribution",
                  "containerd.io": "docker", "docker-ce": "docker"}


def distribution_containerd(facts: NodeFacts) -> tuple[int, ...] | None:
    """The containerd the node's distribution would install: its package manager's candidate when it names one,
    else the platform table's for the release; None when it offers none (the RHEL family)."""
    if facts.containerd_candidate:
        return versions.parse_version(facts.containerd_candidate) or None
    row = platform_for(facts.os_release)
    known = row.containerd if isinstance(row, Platform) else None
    return versions.parse_version(known) if known else None


def containerd_source(facts: NodeFacts, setting: str) -> str:
    """Where this node's containerd comes from: the setting, or for auto what versions.auto_containerd_source
    picks for the distribution's own containerd (the container_runtime role makes the same choice on the node)."""
    return setting if setting != "auto" else versions.auto_containerd_source(distribution_containerd(facts))


def check_containerd(facts: NodeFacts, settings: Settings) -> Finding:
    """Rule: Kubernetes 1.36 and later need containerd 2 (1.35 is the last minor for containerd 1.x, warned);
    judged on the containerd the node has, else the one prepare would install."""
    kube = settings.kubernetes
    source = containerd_source(facts, settings.container_runtime.containerd_source)
    wanted = " and ".join(versions.CONTAINERD_PACKAGES[source])
    foreign = sorted(name for name in facts.runtime_packages if PACKAGE_SOURCE.get(name, source) != source)
    if foreign:
        other = "distribution" if source == "docker" else "docker"
        return problem("containerd", f"{', '.join(foreign)} installed, but container_runtime.containerd_source "
                                           f"resolves to {source} ({wanted}), which cannot be installed beside it",
                       f"set container_runtime.containerd_source: {other} to keep them, or remove them first "
                       f"(`apt-get purge {' '.join(foreign)}` on the node)")
    if facts.containerd_version:
        version, origin = facts.containerd_version, "installed"
    elif source == "docker":
        version, origin = versions.DOCKER_CONTAINERD_MINIMUM, "Docker's containerd.io, to be installed"
    else:
        found = distribution_containerd(facts)
        if found is None:
            return problem("containerd", "container_runtime.containerd_source is distribution, but the "
                                               "distribution offers no containerd package",
                           "set container_runtime.containerd_source: auto (Docker's containerd.io)")
        version, origin = found, "the distribution's, to be installed"
    verdict = versions.containerd_verdict(kube.minor_number, version)
    detail = f"{verdict.detail} ({origin})"
    if verdict.status == "ok":
        return ok("containerd", detail)
    two = "set container_runtime.containerd_source: docker (Docker's containerd.io, 2.x)"
    if origin == "installed":
        two = "upgrade the node's containerd to 2.x (Docker's containerd.io), or remove it so prepare installs it"
    if verdict.status == "warn":
        return problem("containerd_1x", detail, f"before moving to Kubernetes 1.36: {two}")
    return problem("containerd", detail, f"{two}, or set kubernetes.version: '1.35' (the last minor for "
                                              "containerd 1.x)")


def check_cgroup(facts: NodeFacts, settings: Settings) -> Finding:
    """Rule: from 1.35 the kubelet refuses cgroup v1 (KEP-5573), unless the settings accept it or switch the node."""
    minor = settings.kubernetes.minor_number
    if facts.cgroup_version != 1 or minor < versions.CGROUP_V1_REFUSED_FROM:
        shown = {1: "v1", 2: "v2"}.get(facts.cgroup_version or 0, "not read")
        return ok("cgroup", f"cgroup {shown}")
    kubelet = settings.kubelet
    if kubelet.switch_to_cgroup_v2:
        return problem("cgroup_v2_switch", "cgroup v1: prepare switches the node to cgroup v2 "
                                                 "(kubelet.switch_to_cgroup_v2) and reboots it")
    if kubelet.allow_cgroup_v1:
        return problem("cgroup_v1_allowed", f"cgroup v1, run with failCgroupV1: false because "
                                                  f"kubelet.allow_cgroup_v1 is true: unsupported by Kubernetes 1.{minor}",
                       "move the node to cgroup v2 (kubelet.switch_to_cgroup_v2: true), then set allow_cgroup_v1 false")
    return problem("cgroup", f"cgroup v1 (legacy or hybrid hierarchy), which the kubelet of Kubernetes 1.{minor} "
                                   "refuses (failCgroupV1, KEP-5573)",
                   "switch the node to cgroup v2 with kubelet.switch_to_cgroup_v2: true (prepare sets "
                   "systemd.unified_cgroup_hierarchy=1 and reboots it), or accept cgroup v1 with "
                   "kubelet.allow_cgroup_v1: true (unsupported, warned on every run)")


def check_kernel(facts: NodeFacts, settings: Settings) -> Finding:
    """Rule: kube-proxy's nftables mode needs Linux 5.13 or newer."""
    kernel = facts.kernel or "not read"
    release = versions.parse_version(facts.kernel or "")
    if settings.kubernetes.kube_proxy_mode != "nftables" or not release or release >= versions.NFTABLES_MINIMUM_KERNEL:
        return ok("kernel", f"Linux {kernel}")
    return problem("kernel", f"Linux {kernel}: kube-proxy's nftables mode needs Linux "
                                   f"{versions.shown_version(versions.NFTABLES_MINIMUM_KERNEL)} or newer",
                   "set kubernetes.kube_proxy_mode: iptables, or upgrade the node's kernel")


def gpu_generations(facts: NodeFacts, node: Node) -> tuple[str, ...]:
    """The generations of the node's NVIDIA GPUs that the versions table knows (none on a gpu=false node)."""
    if node.gpu == "false":
        return ()
    found = {versions.gpu_generation(device) for device in facts.gpu_device_ids}
    return tuple(g.name for g in versions.GPU_GENERATIONS if g in found)


def check_gpu_versions(facts: NodeFacts, settings: Settings, node: Node) -> list[Finding]:
    """Rules: each GPU generation (told by its PCI device id) against gpu.driver_branch, and an explicit
    smoke_test.image's CUDA against what the generation runs. Nothing to judge on a node without GPUs."""
    if node.gpu == "false" or not facts.gpu_device_ids:
        return []
    branch = settings.gpu.driver_branch
    findings = []
    generations: dict[str, versions.GpuGeneration] = {}
    for device in sorted(set(facts.gpu_device_ids)):
        generation = versions.gpu_generation(device)
        if generation is None:
            findings.append(problem("gpu_generation", f"NVIDIA device 0x{device:04x} is in no generation the "
                                                            "versions table knows: its driver branch is not checked",
                                    "update cluster-bootstrap, or check the GPU's support in NVIDIA's driver notes"))
        else:
            generations[generation.name] = generation
    for generation in generations.values():
        refused = versions.driver_problem(generation, branch)
        if refused:
            findings.append(problem("gpu_driver", refused.split(": ")[0], refused.split(": ", 1)[1]))
    image = settings.smoke_test.image
    cuda = versions.image_cuda_major(image)
    oldest = min(generations.values(), key=lambda g: g.cuda_major, default=None)
    if "image" in settings.smoke_test.model_fields_set and cuda and oldest and cuda > oldest.cuda_major:
        fitting = versions.smoke_image_for([oldest.name])
        findings.append(problem("smoke_image", f"smoke_test.image {image} is built for CUDA {cuda}, which "
                                                     f"{oldest.name} GPUs cannot run (CUDA {oldest.cuda_major} at most)",
                                f"leave smoke_test.image out (these GPUs get {fitting})" if fitting
                                else f"set smoke_test.image to a CUDA {oldest.cuda_major} image"))
    if generations and not any(f.problem for f in findings if f.check in ("gpu_driver", "smoke_image")):
        flavour = versions.module_flavour(list(generations.values()))
        findings.append(ok("gpu_driver", f"{', '.join(generations)} on driver {branch} ({flavour} module)"))
    return findings


def check_gpu_sharing(facts: NodeFacts, settings: Settings, node: Node,
                      gpu_count: int) -> tuple[Finding | None, Advertised | None]:
    """Rule: gpu.mig on GPUs that support it and its profile; then what the scheduler will be offered there (the
    count verify holds allocatable to). Nothing on a node without GPUs."""
    if gpu_count == 0:
        return None, None
    gpu = settings.gpu
    refused = mig_problem(gpu, facts.gpu_device_ids)
    if refused:
        return problem("gpu_mig", refused[0], refused[1]), None
    offered = advertised(gpu, facts.gpu_device_ids, gpu_count)
    if not gpu.mig.enabled and gpu.sharing == "none":
        return None, offered
    return ok("gpu_mig" if gpu.mig.enabled else "gpu_sharing",
                   f"{offered.detail}: {offered.count} {offered.resource} schedulable"), offered


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
                findings[name].append(problem(check, f"{check} {detail}", fixes[check]))
            else:
                shown = ", ".join(sorted(per_node[name])) or "not exposed"
                findings[name].append(ok(check, shown if check != "mac" else f"{len(per_node[name])} unique"))
    return findings


def check_network(facts: NodeFacts, *, multi_node: bool, min_gbps: float) -> Finding:
    found, detail, fix = check_links(facts.links, multi_node=multi_node, min_gbps=min_gbps)
    return problem("network", detail, fix) if found else ok("network", detail)


@dataclass(frozen=True)
class NodeVerdict:
    checks: list[Finding]
    gpu_count: int
    python: NodePython | None  # the interpreter Ansible will run there (None when the node is refused)
    # What the device plugin will advertise there (None without GPUs, or when its GPUs refuse the MIG settings).
    advertised: Advertised | None = None


def evaluate(nodes: list[Node], facts_by_node: dict[str, NodeFacts], ansible_core: str, *,
             settings: Settings | None = None, multi_node: bool = False,
             min_link_gbps: float = 10.0) -> dict[str, NodeVerdict]:
    """Judge the facts of the nodes that could be probed (for a controller running `ansible_core`): per node, its
    checks, GPU count and interpreter. `settings`: what the compatibility rules hold the node to (the defaults when
    None). `multi_node`: the smoke test will train across nodes, so links under min_link_gbps are warned about."""
    settings = settings or Settings()
    unique = check_unique(facts_by_node)
    results: dict[str, NodeVerdict] = {}
    for node in nodes:
        facts = facts_by_node[node.name]
        gpu_finding, gpu_count = check_gpu(facts, node)
        os_finding = check_os(facts, ansible_core)
        python_finding, python = check_python(facts)
        findings = [os_finding, check_support(facts), python_finding, check_isa(facts), check_cpu(facts),
                    check_memory(facts), *unique[node.name], check_ports(facts, node), check_clock(facts),
                    check_swap(facts), check_selinux(facts), gpu_finding, check_networks(facts, settings),
                    check_network(facts, multi_node=multi_node, min_gbps=min_link_gbps),
                    check_containerd(facts, settings), check_cgroup(facts, settings), check_kernel(facts, settings),
                    *check_gpu_versions(facts, settings, node)]
        sharing, offered = check_gpu_sharing(facts, settings, node, gpu_count)
        if sharing is not None:
            findings.append(sharing)
        checks = [judge(node, f) for f in findings]
        usable = os_finding.check not in {c.check for c in PREFLIGHT_POLICY.blocked(checks)}
        results[node.name] = NodeVerdict(checks, gpu_count, python if usable else None, offered)
    return results
