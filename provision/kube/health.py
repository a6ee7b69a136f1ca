"""The doctor through the API: one read-only snapshot of what the cluster says (nodes, kube-system's pods, the
cluster DNS's endpoints and CoreDNS's last log lines), then pure judges of it, each a Finding naming the node (or
"cluster"), how bad and the fix. The judges take recorded objects: tests feed them the stand-in API server's.

Nothing here creates anything: cluster DNS is judged by its endpoints and CoreDNS's own words, not by a probe pod
(that is `bootstrap up --only verify`'s).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.findings import Finding, Status
from provision.inputs.settings import GPU_RESOURCE
from provision.kube.client import call_api
from provision.kube.pods import container_statuses, node_name, pod_labels, pod_name, pod_phase
from provision.kube.verify import DEVICE_PLUGIN_SELECTOR, Expectations, Problem, pod_problem

DNS_SERVICE = "kube-dns"
COREDNS_SELECTOR = "k8s-app=kube-dns"
LOG_LINES = 30
# Node conditions other than Ready that mean trouble when True.
PRESSURE = {"MemoryPressure": "memory", "DiskPressure": "disk", "PIDPressure": "process IDs"}
DESCRIBE = "`kubectl describe node {node}`"


@dataclass
class ClusterSnapshot:
    """What the API said, once."""

    server: str
    nodes: list[client.V1Node] = field(default_factory=list)
    pods: list[client.V1Pod] = field(default_factory=list)  # kube-system's
    # The kube-dns Service's EndpointSlices (None: the API would not list them).
    dns_slices: list[client.V1EndpointSlice] | None = None
    # CoreDNS pod -> its last log lines.
    coredns_logs: dict[str, str] = field(default_factory=dict)


def read_snapshot(api: client.ApiClient) -> ClusterSnapshot:
    """Read-only calls, each bounded (call_api); ApiUnreachable when the server does not answer the first."""
    core, discovery = client.CoreV1Api(api), client.DiscoveryV1Api(api)
    snapshot = ClusterSnapshot(server=str(api.configuration.host))
    snapshot.nodes = list(call_api(api, core.list_node).items)
    snapshot.pods = list(call_api(api, core.list_namespaced_pod, "kube-system").items)
    try:
        snapshot.dns_slices = list(call_api(api, discovery.list_namespaced_endpoint_slice, "kube-system",
                                            label_selector=f"kubernetes.io/service-name={DNS_SERVICE}").items)
    except ApiException:
        snapshot.dns_slices = None
    for pod in snapshot.pods:
        if pod_labels(pod).get("k8s-app") == "kube-dns" and pod_phase(pod) == "Running":
            try:
                snapshot.coredns_logs[pod_name(pod)] = str(call_api(
                    api, core.read_namespaced_pod_log, pod_name(pod), "kube-system", tail_lines=LOG_LINES))
            except ApiException:
                continue
    return snapshot


def _finding(check: str, subject: str, status: Status, detail: str, fix: str = "") -> Finding:
    return Finding(check, subject, status, detail, fix if status in ("warn", "fail") else "")


def _from_problem(check: str, problem: Problem) -> Finding:
    # A problem that may still resolve itself (an image being pulled, a few restarts) is a warning.
    return _finding(check, problem.subject, "fail" if problem.settled else "warn", problem.what, problem.cause)


# --- nodes ----------------------------------------------------------------------------------------------------

def _conditions(node: client.V1Node) -> dict[str, client.V1NodeCondition]:
    return {c.type: c for c in (node.status.conditions if node.status and node.status.conditions else [])}


def node_findings(nodes: Iterable[client.V1Node], expected: Iterable[str]) -> list[Finding]:
    """Each node of the inventory registered and Ready (and if not, its conditions say why), under no pressure,
    not cordoned; nodes the cluster has that the inventory does not."""
    by_name = {n.metadata.name: n for n in nodes if n.metadata and n.metadata.name}
    expected = list(expected)
    found = []
    for name in expected:
        node = by_name.get(name)
        if node is None:
            found.append(_finding("node", name, "fail", "not registered with the API server",
                                  f"see `journalctl -u kubelet` on {name}; `bootstrap up --from join` joins it"))
            continue
        conditions = _conditions(node)
        ready = conditions.get("Ready")
        problems = []
        if ready is None or ready.status != "True":
            why = f"{ready.reason or ''}: {ready.message or ''}".strip(": ") if ready else "no Ready condition"
            stopped = ready is None or ready.status == "Unknown"
            fix = (f"the kubelet on {name} stopped reporting: `systemctl status kubelet` and `journalctl -u kubelet` "
                   "there" if stopped else f"{DESCRIBE.format(node=name)} shows every condition")
            if "cni" in why.lower() or "network plugin" in why.lower():
                fix = (f"the pod network is not up on {name}: see its calico-node pod (`kubectl -n kube-system get "
                       "pods -o wide -l k8s-app=calico-node`)")
            found.append(_finding("node", name, "fail", f"NotReady ({why or 'no reason given'})", fix))
            continue
        for kind, what in PRESSURE.items():
            condition = conditions.get(kind)
            if condition is not None and condition.status == "True":
                problems.append(f"{what} pressure ({condition.message or condition.reason or kind})")
        network = conditions.get("NetworkUnavailable")
        if network is not None and network.status == "True":
            problems.append(f"network unavailable ({network.message or network.reason or ''})")
        if problems:
            found.append(_finding("node", name, "fail", f"Ready, but under {'; '.join(problems)}",
                                  f"{DESCRIBE.format(node=name)}; the kubelet evicts pods until it is relieved"))
        elif node.spec is not None and node.spec.unschedulable:
            found.append(_finding("node", name, "warn", "cordoned: no new pod is scheduled there",
                                  f"`kubectl uncordon {name}` once it is ready for work"))
        else:
            found.append(_finding("node", name, "ok", "Ready"))
    for name in sorted(set(by_name) - set(expected)):
        found.append(_finding("node", name, "warn", "in the cluster but not in the inventory",
                              "add it to the inventory, or take it out: `kubectl drain` and `kubectl delete node`"))
    return found


# --- kube-system's pods, etcd, DNS ---------------------------------------------------------------------------

def pod_findings(pods: Iterable[client.V1Pod], expect: Expectations) -> list[Finding]:
    """Every kube-system pod running and ready, and if not, why (the kubelet's and the scheduler's reasons)."""
    found = []
    for pod in pods:
        name = pod_labels(pod).get("app.kubernetes.io/name")
        # The device plugin on a GPU node is judged with its GPUs (gpu_findings), once.
        if name == "dns-probe" or (name == "nvidia-device-plugin" and expect.gpus.get(node_name(pod) or "", 0) > 0):
            continue
        problem = pod_problem(pod, expect)
        if problem is not None:
            found.append(_from_problem("pods", problem))
    return found or [_finding("pods", "cluster", "ok", "every kube-system pod runs")]


def etcd_findings(pods: Iterable[client.V1Pod], control_planes: Iterable[str]) -> list[Finding]:
    """kubeadm's stacked etcd: one member per control plane, each running and ready; quorum is a majority."""
    members = {node_name(p): p for p in pods if pod_labels(p).get("component") == "etcd"}
    planes = list(control_planes)
    if not members:
        return [_finding("etcd", "cluster", "skip", "not checked: no etcd pod in kube-system (external etcd?)")]
    healthy = [name for name in planes if name in members and pod_phase(members[name]) == "Running"
               and all(c.ready for c in container_statuses(members[name]))]
    down = [name for name in planes if name not in healthy]
    if not down:
        return [_finding("etcd", "cluster", "ok", f"{len(healthy)} of {len(planes)} members ready")]
    quorum = len(planes) // 2 + 1
    if len(healthy) < quorum:
        return [_finding("etcd", "cluster", "fail", f"quorum lost: {len(healthy)} of {len(planes)} members ready "
                         f"(down: {', '.join(down)}); the cluster accepts no change",
                         "bring the members back (`crictl ps -a --name etcd` and `crictl logs` on those control "
                         "planes); with a member lost for good, restore from a snapshot")]
    return [_finding("etcd", name, "warn", f"etcd member not ready ({len(healthy)} of {len(planes)} ready: quorum "
                     f"holds, {len(healthy) - quorum} more may fail)",
                     f"see `crictl ps -a --name etcd` and `crictl logs` of etcd on {name}") for name in down]


def dns_findings(slices: list[client.V1EndpointSlice] | None, logs: dict[str, str]) -> list[Finding]:
    """Cluster DNS from inside: the kube-dns Service has ready endpoints, and CoreDNS reports no forwarding loop
    and reaches the nameservers it forwards to."""
    if slices is not None:
        ready = sum(1 for s in slices for e in (s.endpoints or [])
                    if e.conditions is None or e.conditions.ready is not False)
        if not ready:
            return [_finding("dns", "cluster", "fail", "the kube-dns Service has no ready endpoint: pods resolve no "
                             "name", "see the CoreDNS pods (`kubectl -n kube-system get pods -l k8s-app=kube-dns`)")]
    for pod, text in sorted(logs.items()):
        lines = text.splitlines()
        loop = [line for line in lines if "plugin/loop" in line and ("FATAL" in line or "Loop" in line)]
        if loop:
            return [_finding("dns", "cluster", "fail", f"CoreDNS ({pod}) found a forwarding loop: {loop[-1].strip()}",
                             "the nodes' /etc/resolv.conf points at a local stub (127.0.0.53): give the kubelet the "
                             "real one (resolvConf: /run/systemd/resolve/resolv.conf)")]
        upstream = [line for line in lines if "[ERROR]" in line and ("i/o timeout" in line or "connection refused"
                                                                     in line or "no route to host" in line)]
        if upstream:
            return [_finding("dns", "cluster", "warn", f"CoreDNS ({pod}) cannot reach the nameservers it forwards to: "
                             f"{upstream[-1].strip()}", "the nameservers in the nodes' /etc/resolv.conf must answer "
                             "from the pod network (`bootstrap doctor` checks each node's)")]
    return [_finding("dns", "cluster", "ok", "kube-dns has ready endpoints; CoreDNS reports no error")]


# --- GPUs ------------------------------------------------------------------------------------------------------

def gpu_findings(nodes: Iterable[client.V1Node], pods: Iterable[client.V1Pod], expect: Expectations) -> list[Finding]:
    """On each GPU node (preflight's count): the device plugin runs there, and it advertises as many nvidia.com/gpu
    as preflight counted."""
    by_name = {n.metadata.name: n for n in nodes if n.metadata and n.metadata.name}
    plugin_label = DEVICE_PLUGIN_SELECTOR.split("=", 1)
    plugins = {node_name(p): p for p in pods if pod_labels(p).get(plugin_label[0]) == plugin_label[1]}
    found = []
    for name, expected in sorted(expect.gpus.items()):
        if expected <= 0 or name not in by_name:
            continue
        status = by_name[name].status
        allocatable = (status.allocatable if status else None) or {}
        try:
            advertised = int(str(allocatable.get(GPU_RESOURCE, "0")))
        except ValueError:
            advertised = 0
        plugin = plugins.get(name)
        if plugin is None:
            found.append(_finding("gpu_plugin", name, "fail", "no nvidia-device-plugin pod runs there",
                                  f"is {name} labelled nvidia.com/gpu.present=true and the DaemonSet applied? "
                                  "`bootstrap up --only gpu` does both"))
        else:
            problem = pod_problem(plugin, expect)
            if problem is not None:
                found.append(_from_problem("gpu_plugin", problem))
        if advertised != expected:
            found.append(_finding("gpu_allocatable", name, "fail", f"{advertised} {GPU_RESOURCE} allocatable, "
                                  f"preflight counted {expected}",
                                  f"run nvidia-smi on {name} (a GPU hidden or unhealthy) and read the device plugin's "
                                  "log there (`kubectl -n kube-system logs -l app.kubernetes.io/name=nvidia-device-plugin`)"))
        elif plugin is not None and pod_problem(plugin, expect) is None:
            found.append(_finding("gpu_allocatable", name, "ok", f"{advertised} {GPU_RESOURCE}"))
    return found


def judge_cluster(snapshot: ClusterSnapshot, expect: Expectations, control_planes: Iterable[str]) -> list[Finding]:
    """Every API-side check of one snapshot."""
    return [*node_findings(snapshot.nodes, expect.nodes), *pod_findings(snapshot.pods, expect),
            *etcd_findings(snapshot.pods, control_planes), *dns_findings(snapshot.dns_slices, snapshot.coredns_logs),
            *gpu_findings(snapshot.nodes, snapshot.pods, expect)]

