"""Is the cluster healthy? Asked through the Kubernetes API (the kubernetes client), never over SSH.

Every node Ready (the control planes as control planes), every kube-system pod running (kube-vip or the local API
proxy where the endpoint puts them), etcd's members exactly the control planes, cluster DNS answering from inside
a pod, and on GPU nodes `nvidia.com/gpu` allocatable equal to the GPUs preflight found. The checks poll until they pass or the
time is up; what still fails then becomes a Problem naming the node and the likely cause.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.errors import BootstrapError
from provision.inputs.settings import GPU_RESOURCE
from provision.kube.client import REQUEST_TIMEOUT_S, ApiUnreachable, call_api
from provision.kube.pods import (
    CONFIG_REASONS,
    CRASH_LOOP,
    HOPELESS_IMAGE_REASONS,
    IMAGE_PULL_REASONS,
    container_statuses,
    node_name,
    pod_labels,
    pod_name,
    pod_phase,
    scheduling_message,
)

DEVICE_PLUGIN_SELECTOR = "app.kubernetes.io/name=nvidia-device-plugin"
DNS_PROBE_LABELS = {"app.kubernetes.io/name": "dns-probe", "app.kubernetes.io/managed-by": "cluster-bootstrap"}
# A container restarted this often while waiting in CrashLoopBackOff is not going to recover by itself.
SETTLED_RESTARTS = 3
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# kubeadm's etcd static pods, and etcdctl in them with kubeadm's certificates.
ETCD_SELECTOR = "component=etcd"
ETCDCTL_MEMBER_LIST = ["etcdctl", "--endpoints=https://127.0.0.1:2379", "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
                       "--cert=/etc/kubernetes/pki/etcd/server.crt", "--key=/etc/kubernetes/pki/etcd/server.key",
                       "member", "list", "-w", "json"]
Check = Literal["nodes", "pods", "gpus", "etcd", "dns"]
ALL_CHECKS: tuple[Check, ...] = ("nodes", "pods", "gpus", "etcd", "dns")


@dataclass(frozen=True)
class Problem:
    """One thing wrong, said the way an operator can act on it."""

    subject: str
    what: str
    cause: str
    # False while it may still resolve itself (an image being pulled, a node still registering).
    settled: bool = False

    def describe(self) -> str:
        return f"{self.subject}: {self.what}: {self.cause}"


@dataclass(frozen=True)
class Expectations:
    """What a healthy cluster looks like for this inventory and these settings."""

    nodes: tuple[str, ...]
    # Node -> GPUs preflight found there; nodes with 0 (or absent) are not checked for GPUs.
    gpus: dict[str, int] = field(default_factory=dict)
    # Node -> {resource: count} the device plugin must advertise there when that is not the GPUs themselves (MIG
    # instances, shared replicas: inputs/gpu_sharing.py); absent nodes must advertise gpus[node] nvidia.com/gpu.
    gpu_offered: dict[str, dict[str, int]] = field(default_factory=dict)
    pod_cidr: str = "10.244.0.0/16"
    dns_domain: str = "cluster.local"
    gpu_runtime: Literal["default", "runtimeclass"] = "default"
    dns_probe_image: str = "docker.io/library/busybox:1.36"
    # Only pods on these nodes are checked (None: every kube-system pod); `node add` checks its node only.
    pods_on: tuple[str, ...] | None = None
    # Where the DNS probe runs (None: wherever the scheduler puts it); `node add` asks from the new node.
    dns_node: str | None = None
    # Nodes that must have joined as control planes (the first one was initialised as one).
    control_planes: tuple[str, ...] = ()
    # etcd's members must include these control planes; None: etcd is not asked.
    etcd_members: tuple[str, ...] | None = None
    # ... and be none but these (every control plane of the inventory; None: only those above).
    etcd_allowed: tuple[str, ...] | None = None
    # The control-plane endpoint's static pod (its app.kubernetes.io/name: kube-vip, cb-api-proxy) and the nodes
    # that must run it; None: nothing to look for.
    endpoint_pods: tuple[str, tuple[str, ...]] | None = None


@dataclass
class VerifyReport:
    ready_nodes: list[str] = field(default_factory=list)
    # Node -> (GPUs expected, GPUs allocatable).
    gpus: dict[str, tuple[int, int]] = field(default_factory=dict)
    dns_answered: bool | None = None
    # etcd's members as listed (None: not asked, or no answer).
    etcd_members: list[str] | None = None
    problems: list[Problem] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        parts = [f"{len(self.ready_nodes)} nodes Ready"]
        if self.etcd_members:
            parts.append(f"{len(self.etcd_members)} etcd members")
        if self.gpus:
            parts.append(f"{sum(found for _, found in self.gpus.values())} GPUs allocatable")
        if self.dns_answered:
            parts.append("DNS answers")
        return ", ".join(parts)

    def raise_for_problems(self, what: str = "verification") -> None:
        if self.ok:
            return
        more = f" (and {len(self.problems) - 1} more problems)" if len(self.problems) > 1 else ""
        raise BootstrapError(f"{what} failed: {self.problems[0].describe()}{more}")


# --- node checks -------------------------------------------------------------------------------------

def _ready_condition(node: client.V1Node) -> client.V1NodeCondition | None:
    for condition in (node.status.conditions if node.status and node.status.conditions else []):
        if condition.type == "Ready":
            return condition
    return None


def _node_problems(nodes: dict[str, client.V1Node], expected: Iterable[str]) -> tuple[list[str], list[Problem]]:
    ready, problems = [], []
    for name in expected:
        node = nodes.get(name)
        if node is None:
            problems.append(Problem(name, "has not registered with the API server",
                                    f"the kubelet on {name} did not join: see `journalctl -u kubelet` on {name}, "
                                    "then `bootstrap up --from join`"))
            continue
        condition = _ready_condition(node)
        if condition is not None and condition.status == "True":
            ready.append(name)
            continue
        message = (condition.message or "") if condition else ""
        reason = (condition.reason or "") if condition else ""
        text = f"{reason} {message}".lower()
        if condition is None or condition.status == "Unknown" or "stopped posting" in text:
            cause = (f"the kubelet on {name} stopped reporting: check `systemctl status kubelet` and "
                     f"`journalctl -u kubelet` on {name}")
        elif "cni" in text or "network plugin" in text or "networkpluginnotready" in text:
            cause = (f"the pod network is not up on {name}: check the calico-node pod on {name} "
                     "(`kubectl -n kube-system get pods -o wide -l k8s-app=calico-node`)")
        else:
            cause = message or reason or "the kubelet reports it not ready"
        problems.append(Problem(name, "is NotReady", cause))
    return ready, problems


def _control_plane_problems(nodes: dict[str, client.V1Node], expected: Iterable[str]) -> list[Problem]:
    """A control plane of the inventory that registered without kubeadm's control-plane role joined as a worker."""
    problems = []
    for name in expected:
        node = nodes.get(name)
        labels = (node.metadata.labels if node is not None and node.metadata else None) or {}
        if node is not None and CONTROL_PLANE_LABEL not in labels:
            problems.append(Problem(name, "is in the cluster but not as a control plane",
                                    f"it joined as a worker: `bootstrap reset {name}`, then `bootstrap up --from join` "
                                    "joins it as a control plane", settled=True))
    return problems


# --- the control-plane endpoint and etcd ---------------------------------------------------------------

def endpoint_pod_problems(pods: Iterable[client.V1Pod], component: str, nodes: Iterable[str]) -> list[Problem]:
    """Every node that must run the endpoint's static pod (kube-vip, the local API proxy) has one (whether it runs
    well is the pod check's)."""
    running_on = {node_name(p) for p in pods if pod_labels(p).get("app.kubernetes.io/name") == component}
    return [Problem(name, f"{component} does not run there",
                    f"its static pod is /etc/kubernetes/manifests on {name}: see `crictl ps -a --name "
                    f"{component.removeprefix('cb-')}` and `journalctl -u kubelet` there; `bootstrap up --from join` "
                    "lays it down again") for name in nodes if name not in running_on]


def etcd_member_names(text: str) -> list[str] | None:
    """`etcdctl member list -w json` -> the members' names (an unstarted learner has none); None if unreadable."""
    try:
        members = json.loads(text).get("members")
    except (ValueError, AttributeError):
        return None
    if not isinstance(members, list):
        return None
    return [str(m.get("name", "")) for m in members if isinstance(m, dict)]


def etcd_member_problems(members: list[str] | None, expected: Iterable[str],
                         allowed: Iterable[str] | None = None) -> list[Problem]:
    """etcd's members against the control planes: each expected one a member, and no member of a machine that is
    not one of the `allowed` (default: the expected)."""
    expected = list(expected)
    permitted = set(expected if allowed is None else allowed)
    if members is None:
        return [Problem("etcd", "did not list its members", "no etcd pod answered `etcdctl member list`: check the "
                        "etcd pods (`kubectl -n kube-system get pods -l component=etcd`)")]
    problems = [Problem(name, "is not an etcd member", f"its etcd did not join: see `crictl logs` of etcd on {name}; "
                        f"`bootstrap reset {name}`, then `bootstrap up --from join`")
                for name in expected if name not in members]
    problems += [Problem("etcd", f"has a member {name or '(unnamed, not started)'} that is no control plane of the "
                         "inventory", "a control plane removed without its member, or one not started: `etcdctl "
                         "member remove` it on a control plane (bootstrap node remove does that first)")
                 for name in members if name not in permitted]
    return problems


def read_etcd_members(api: client.ApiClient, pods: Iterable[client.V1Pod]) -> list[str] | None:
    """etcd's members as one running etcd pod lists them (kubectl exec through the API); None if none answered."""
    from kubernetes.stream import stream

    core = client.CoreV1Api(api)
    for pod in pods:
        if pod_phase(pod) != "Running" or pod_labels(pod).get("component") != "etcd":
            continue
        # The socket is read here, not through the client's preloaded answer: kubernetes < 31 (kfp pins it) parses
        # output that is JSON and hands back its Python repr, which no JSON reader takes.
        try:
            session = stream(core.connect_get_namespaced_pod_exec, pod_name(pod), "kube-system",
                             command=ETCDCTL_MEMBER_LIST, stderr=False, stdin=False, stdout=True, tty=False,
                             _request_timeout=REQUEST_TIMEOUT_S, _preload_content=False)
            try:
                session.run_forever(timeout=REQUEST_TIMEOUT_S)
                output = session.read_all()
            finally:
                session.close()
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            continue
        members = etcd_member_names(str(output))
        if members is not None:
            return members
    return None


# --- pod checks --------------------------------------------------------------------------------------

def _pod_component(pod: client.V1Pod) -> str:
    labels = pod_labels(pod)
    for key in ("k8s-app", "app.kubernetes.io/name", "component", "app"):
        if key in labels:
            return labels[key]
    return pod_name(pod)


def _crash_cause(component: str, pod: client.V1Pod, expect: Expectations) -> str:
    name, node = pod_name(pod), node_name(pod) or "its node"
    logs = f"`kubectl -n kube-system logs --previous {name}`"
    if component == "calico-node":
        return (f"check the pod CIDR: kubernetes.pod_cidr {expect.pod_cidr} must not overlap any network of {node} "
                f"nor the service CIDR; then {logs}")
    if component in ("kube-dns", "coredns"):
        return ("CoreDNS usually crash-loops on a forwarding loop: the node's /etc/resolv.conf points at a local "
                f"stub resolver (127.0.0.53); see {logs}")
    if component == "kube-proxy":
        return f"kube_proxy_mode needs kernel support on {node} (ipvs needs the ip_vs modules); see {logs}"
    if component == "nvidia-device-plugin":
        return _device_plugin_cause(node, expect)
    return f"see {logs}"


def _device_plugin_cause(node: str, expect: Expectations) -> str:
    if expect.gpu_runtime == "default":
        return (f"nvidia runtime is not containerd's default on {node}: the device plugin cannot load NVML; "
                "check default_runtime_name = \"nvidia\" in /etc/containerd/config.toml and restart containerd")
    return (f"containerd on {node} has no 'nvidia' runtime handler for RuntimeClass nvidia: check the nvidia "
            "runtime in /etc/containerd/config.toml (`nvidia-ctk runtime configure --runtime=containerd`)")


def pod_problem(pod: client.V1Pod, expect: Expectations) -> Problem | None:
    phase = pod_phase(pod)
    if phase == "Succeeded":
        return None
    name, node = pod_name(pod), node_name(pod)
    subject = node or "cluster"
    component = _pod_component(pod)
    for container in container_statuses(pod):
        waiting = container.state.waiting if container.state else None
        if waiting is None:
            continue
        if waiting.reason == CRASH_LOOP:
            return Problem(subject, f"{component} CrashLoopBackOff (pod {name}, container {container.name}, "
                                    f"{container.restart_count} restarts)",
                           _crash_cause(component, pod, expect),
                           settled=container.restart_count >= SETTLED_RESTARTS)
        if waiting.reason in IMAGE_PULL_REASONS:
            return Problem(subject, f"{component} cannot pull its image {container.image} (pod {name})",
                           f"check the registry mirrors / offline.image_repository, and try `crictl pull "
                           f"{container.image}` on {node}", settled=waiting.reason in HOPELESS_IMAGE_REASONS)
        if waiting.reason in CONFIG_REASONS:
            return Problem(subject, f"{component} cannot start (pod {name}): {waiting.reason}",
                           waiting.message or f"see `kubectl -n kube-system describe pod {name}`", settled=True)
    status = pod.status or client.V1PodStatus()
    if phase == "Pending" and not node:
        return Problem("cluster", f"{component} cannot be scheduled (pod {name})",
                       scheduling_message(pod) or f"no node fits it: see `kubectl -n kube-system describe pod {name}`")
    if phase == "Failed":
        return Problem(subject, f"{component} failed (pod {name}): {status.reason or ''}".rstrip(": "),
                       status.message or f"see `kubectl -n kube-system describe pod {name}`", settled=True)
    if phase != "Running":
        return Problem(subject, f"{component} is {phase} (pod {name})",
                       f"still starting; see `kubectl -n kube-system describe pod {name}`")
    not_ready = [c.name for c in status.container_statuses or [] if not c.ready]
    if not_ready:
        return Problem(subject, f"{component} is running but not ready (pod {name}, {', '.join(not_ready)})",
                       f"its readiness probe fails: see `kubectl -n kube-system logs {name}`")
    return None


# --- GPU checks --------------------------------------------------------------------------------------

def _gpu_problems(nodes: dict[str, client.V1Node], pods: list[client.V1Pod], expect: Expectations,
                  report: VerifyReport) -> list[Problem]:
    problems = []
    plugin_pods = {node_name(p): p for p in pods if pod_labels(p).get("app.kubernetes.io/name") == "nvidia-device-plugin"}
    for name, physical in sorted(expect.gpus.items()):
        if physical <= 0 or name not in nodes:
            continue
        resource, expected = next(iter(expect.gpu_offered.get(name, {GPU_RESOURCE: physical}).items()))
        status = nodes[name].status
        allocatable = (status.allocatable if status else None) or {}
        try:
            found = int(str(allocatable.get(resource, "0")))
        except ValueError:
            found = 0
        report.gpus[name] = (expected, found)
        if found == expected:
            continue
        plugin = plugin_pods.get(name)
        if found > 0 and expected != physical:
            problems.append(Problem(name, f"advertises {found} {resource}, {expected} expected from its {physical} "
                                    "GPUs and the gpu settings (MIG instances, shared replicas)",
                                    f"see the nvidia-device-plugin pod's log on {name}, and `nvidia-smi -L` there "
                                    "for the MIG instances", settled=True))
        elif found > 0:
            problems.append(Problem(name, f"advertises {found} {resource}, preflight found {expected}",
                                    f"a GPU is hidden or unhealthy: run nvidia-smi on {name} and see the "
                                    "nvidia-device-plugin pod's log", settled=True))
        elif plugin is None:
            problems.append(Problem(name, f"no {resource} allocatable and no nvidia-device-plugin pod runs there",
                                    f"is {name} labelled nvidia.com/gpu.present=true and the DaemonSet applied? "
                                    "`bootstrap up --only gpu` does both"))
        else:
            plugin_problem = pod_problem(plugin, expect)
            problems.append(Problem(name, f"no {resource} allocatable"
                                    + (f" ({plugin_problem.what})" if plugin_problem else ""),
                                    _device_plugin_cause(name, expect),
                                    settled=bool(plugin_problem and plugin_problem.settled)))
    return problems


# --- the whole check ---------------------------------------------------------------------------------

def _snapshot(api: client.ApiClient, expect: Expectations, checks: tuple[Check, ...]) -> VerifyReport:
    core = client.CoreV1Api(api)
    report = VerifyReport()
    nodes = {n.metadata.name: n for n in call_api(api, core.list_node).items if n.metadata and n.metadata.name}
    pods: list[client.V1Pod] = []
    if "pods" in checks or "gpus" in checks:
        pods = call_api(api, core.list_namespaced_pod, "kube-system").items
    if "nodes" in checks:
        report.ready_nodes, node_problems = _node_problems(nodes, expect.nodes)
        report.problems.extend(node_problems)
        report.problems.extend(_control_plane_problems(nodes, expect.control_planes))
    gpu_problems = _gpu_problems(nodes, pods, expect, report) if "gpus" in checks else []
    if "pods" in checks:
        gpu_nodes = {p.subject for p in gpu_problems}
        for pod in pods:
            if expect.pods_on is not None and node_name(pod) not in expect.pods_on:
                continue
            if pod_labels(pod).get("app.kubernetes.io/name") == "dns-probe":
                continue
            problem = pod_problem(pod, expect)
            # The GPU check already says what a failing device plugin means on that node.
            if problem and not (_pod_component(pod) == "nvidia-device-plugin" and problem.subject in gpu_nodes):
                report.problems.append(problem)
    report.problems.extend(gpu_problems)
    if "pods" in checks and expect.endpoint_pods is not None:
        report.problems.extend(endpoint_pod_problems(pods, *expect.endpoint_pods))
    if "etcd" in checks and expect.etcd_members is not None:
        etcd_pods = call_api(api, core.list_namespaced_pod, "kube-system", label_selector=ETCD_SELECTOR).items
        members = read_etcd_members(api, etcd_pods)
        report.etcd_members = members
        report.problems.extend(etcd_member_problems(members, expect.etcd_members, expect.etcd_allowed))
    return report


def dns_probe_target(expect: Expectations) -> str:
    return f"kubernetes.default.svc.{expect.dns_domain}"


def dns_probe_pod(expect: Expectations, timeout_s: float) -> client.V1Pod:
    """A one-shot pod in kube-system that resolves the API server's service name and exits."""
    return client.V1Pod(
        api_version="v1", kind="Pod",
        metadata=client.V1ObjectMeta(generate_name="bootstrap-dns-probe-", namespace="kube-system",
                                     labels=dict(DNS_PROBE_LABELS)),
        spec=client.V1PodSpec(
            restart_policy="Never",
            node_name=expect.dns_node,
            active_deadline_seconds=max(30, int(timeout_s)),
            # Any node will do, the control plane of a single-node cluster included.
            tolerations=[client.V1Toleration(operator="Exists")],
            containers=[client.V1Container(name="nslookup", image=expect.dns_probe_image,
                                           command=["nslookup", dns_probe_target(expect)])],
        ),
    )


def check_dns(api: client.ApiClient, expect: Expectations, timeout_s: float, *,
              sleep: Callable[[float], None] = time.sleep) -> Problem | None:
    """Run a one-shot pod that resolves the API server's service name; None when DNS answered."""
    core = client.CoreV1Api(api)
    selector = ",".join(f"{k}={v}" for k, v in DNS_PROBE_LABELS.items())
    call_api(api, core.delete_collection_namespaced_pod, "kube-system", label_selector=selector)
    target = dns_probe_target(expect)
    pod = dns_probe_pod(expect, timeout_s)
    name = pod_name(call_api(api, core.create_namespaced_pod, "kube-system", pod))
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            current = call_api(api, core.read_namespaced_pod, name, "kube-system")
            phase = pod_phase(current)
            node = node_name(current) or "cluster"
            if phase == "Succeeded":
                return None
            if phase == "Failed":
                try:
                    log = str(call_api(api, core.read_namespaced_pod_log, name, "kube-system")).strip().splitlines()
                except ApiException:
                    log = []  # ended before its container started (its deadline): there is no log to read
                return Problem(node, f"cluster DNS did not answer for {target}",
                               f"{log[-1] if log else 'no output'}; check the CoreDNS pods and that kube-proxy "
                               f"and calico-node run on {node}", settled=True)
            problem = pod_problem(current, expect)
            if problem and "cannot pull" in problem.what:
                return Problem(node, f"the DNS probe image {expect.dns_probe_image} cannot be pulled",
                               "set verify.dns_probe_image to an image (with nslookup) your registry serves",
                               settled=True)
            if time.monotonic() >= deadline:
                return Problem(node, f"the DNS probe did not finish in {timeout_s:.0f}s (pod phase {phase})",
                               f"see `kubectl -n kube-system describe pod {name}`")
            sleep(1.0)
    finally:
        try:
            call_api(api, core.delete_namespaced_pod, name, "kube-system", grace_period_seconds=0)
        except (ApiException, ApiUnreachable):
            pass


def verify_cluster(api: client.ApiClient, expect: Expectations, *, timeout_s: float,
                   checks: tuple[Check, ...] = ALL_CHECKS, poll_s: float = 2.0,
                   on_message: Callable[[str], None] | None = None,
                   sleep: Callable[[float], None] = time.sleep) -> VerifyReport:
    """Poll until every check passes or timeout_s is spent; the report lists what still fails.

    An unreachable API server is itself a problem (retried for the whole wait). Problems that will not go
    away by waiting (a crash loop that has restarted several times) end the wait early.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    report = VerifyReport()
    while True:
        try:
            report = _snapshot(api, expect, checks)
        except ApiUnreachable as exc:
            report = VerifyReport(problems=[Problem("control plane", "the Kubernetes API does not answer",
                                                    str(exc))])
        if report.ok:
            break
        if on_message:
            on_message(f"waiting: {report.problems[0].describe()}")
        if all(p.settled for p in report.problems) or time.monotonic() >= deadline:
            report.elapsed_s = time.monotonic() - started
            return report
        sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
    if "dns" in checks:
        if on_message:
            on_message("checking that cluster DNS answers from a pod")
        remaining = max(30.0, deadline - time.monotonic())
        try:
            problem = check_dns(api, expect, remaining, sleep=sleep)
        except ApiUnreachable as exc:
            problem = Problem("control plane", "the Kubernetes API stopped answering", str(exc))
        report.dns_answered = problem is None
        if problem:
            report.problems.append(problem)
    report.elapsed_s = time.monotonic() - started
    return report
