"""Phase prepare: run playbooks/prepare.yml, then check in Python what each node reports about itself.

The playbook's last task prints one `key=value` line per fact on every node (hostname, swap, sysctls,
containerd, Docker, kubelet, holds, GPUs); `check_node` turns those into problems a user can act on, so a
node that Ansible called "ok" but that is not ready for kubeadm is still caught here.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provision.errors import BootstrapError
from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings
from provision.nodes.runner import PlaybookResult, RunProgress, run_playbook

PLAYBOOK = "prepare.yml"
REPORT_TASK = "Report the prepared state"
# The task that turns an unreachable repository into one named message (os_prep/tasks/repository-*.yml).
NAMED_SOURCE_FAILURE = "Name the unreachable source"
SYSCTLS = ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables", "net.ipv4.ip_forward")
KUBE_PACKAGES = ("kubeadm", "kubelet", "kubectl")


@dataclass(frozen=True)
class NodeReport:
    """What one node says about itself after preparation (the report task's key=value lines)."""

    host: str
    facts: dict[str, str]

    @classmethod
    def parse(cls, host: str, lines: list[str]) -> NodeReport:
        facts = {}
        for line in lines:
            key, sep, value = line.partition("=")
            if sep:
                facts[key.strip()] = value.strip()
        return cls(host=host, facts=facts)

    def get(self, key: str) -> str:
        return self.facts.get(key, "")


@dataclass
class PrepareResult:
    playbook: PlaybookResult
    reports: dict[str, NodeReport] = field(default_factory=dict)

    @property
    def changed(self) -> dict[str, int]:
        return self.playbook.changed


def check_node(report: NodeReport, settings: Settings) -> list[str]:
    """Problems with a prepared node, each naming the fact and what to look at; empty when it is ready."""
    problems = []
    if report.get("hostname") != report.host:
        problems.append(f"hostname is '{report.get('hostname')}', not its inventory name '{report.host}'")
    if report.get("swap_active") != "0":
        problems.append("swap is still on (swapon --show lists it)")
    if report.get("fstab_swap") != "0":
        problems.append("/etc/fstab still has an active swap line")
    modules = report.get("modules_load").split()
    for module in ("overlay", "br_netfilter"):
        if module not in modules:
            problems.append(f"{module} is not in /etc/modules-load.d/cluster-bootstrap.conf")
    for key in SYSCTLS:
        if report.get(f"sysctl.{key}") != "1":
            problems.append(f"sysctl {key} is '{report.get(f'sysctl.{key}')}', not 1")
    if report.get("active.containerd") != "active":
        problems.append("containerd is not running: see `journalctl -u containerd` on the node")
    if report.get("systemd_cgroup") in ("", "0"):
        problems.append("containerd does not use the systemd cgroup driver (SystemdCgroup = true is missing)")
    if report.get("cri") != "ok":
        problems.append("containerd's CRI plugin is not running (`ctr plugins ls` on the node)")
    if not report.get("crictl_endpoint").endswith("/containerd.sock"):
        problems.append("/etc/crictl.yaml does not point at containerd's socket")
    if report.get("crictl") == "failing":
        problems.append("`crictl version` fails against containerd")
    if settings.container_runtime.install_docker and report.get("active.docker") != "active":
        problems.append("Docker is not running: see `journalctl -u docker` on the node")
    for tool in KUBE_PACKAGES:
        if report.get(f"installed.{tool}") != "yes":
            problems.append(f"{tool} is not installed")
    held = report.get("held").split()
    missing_holds = [tool for tool in KUBE_PACKAGES if tool not in held]
    if missing_holds:
        problems.append(f"{', '.join(missing_holds)} not held at their version (apt-mark hold / dnf versionlock)")
    if report.get("enabled.kubelet") != "enabled":
        problems.append("the kubelet is not enabled at boot")
    if report.get("gpu_node") == "True":
        if report.get("nvidia_gpus") in ("", "0"):
            problems.append("it is a GPU node but nvidia-smi lists no GPU")
        if report.get("nvidia_runtime") in ("", "0"):
            problems.append("containerd has no nvidia runtime (nvidia-ctk runtime configure)")
    return problems


def read_reports(run_dir: Path) -> dict[str, NodeReport]:
    """The report task's output per host, from ansible-runner's saved events."""
    reports = {}
    for path in run_dir.glob("artifacts/*/job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == REPORT_TASK:
            lines = (data.get("res") or {}).get("stdout_lines") or []
            reports[data["host"]] = NodeReport.parse(data["host"], lines)
    return reports


def _raise_playbook_failure(result: PlaybookResult) -> None:
    # An unreachable repository fails twice (the download, then the task naming the source and the fix): show
    # the second, which says what to do.
    named = [f for f in result.failures if f.task.startswith(NAMED_SOURCE_FAILURE)]
    if named:
        raise BootstrapError(f"prepare failed: {named[0].host}: {named[0].message} (full log: "
                             f"{result.run_dir / 'run.log'})")
    result.raise_for_failure()


def check_prepared(playbook: PlaybookResult, cluster: Cluster, settings: Settings,
                   nodes: Sequence[str] | None = None) -> dict[str, NodeReport]:
    """The Python check after the playbook: every node reported, and reported itself ready for kubeadm.

    Raises BootstrapError naming the host and its problems (or the unreachable source); returns the reports.
    """
    _raise_playbook_failure(playbook)
    reports = read_reports(playbook.run_dir)
    for host in nodes or [node.name for node in cluster.nodes]:
        report = reports.get(host)
        if report is None:
            raise BootstrapError(f"prepare: {host} sent no report of its state (full log: "
                                 f"{playbook.run_dir / 'run.log'})")
        problems = check_node(report, settings)
        if problems:
            raise BootstrapError(f"prepare: {host} is not ready: {'; '.join(problems)}")
    return reports


def prepare(
    cluster: Cluster,
    settings: Settings,
    *,
    limit: list[str] | None = None,
    on_progress: Callable[[RunProgress], None] | None = None,
    verbose: bool = False,
    become_password: str | None = None,
) -> PrepareResult:
    """Prepare the nodes; raises BootstrapError naming the host and the problem when a node is not ready."""
    playbook = run_playbook(PLAYBOOK, cluster, settings, phase="prepare", limit=limit, on_progress=on_progress,
                            verbose=verbose, become_password=become_password)
    return PrepareResult(playbook=playbook, reports=check_prepared(playbook, cluster, settings, limit))
