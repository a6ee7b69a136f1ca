"""The prepare phase's check (provision/phases/prepare.py runs playbooks/prepare.yml, then this): what each node
reports about itself.

The playbook's last task (the cb_node_report module) returns one JSON document per node: hostname, swap,
sysctls, containerd, Docker, kubelet, holds, GPUs (provision/nodes/reports.py validates it). `check_node`
turns it into problems a user can act on, so a node that Ansible called "ok" but that is not ready for kubeadm
is still caught here.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings
from provision.nodes.containerd_config import config_problems
from provision.nodes.documents import sent
from provision.nodes.reports import NODE_REPORT_KEY, NodeReport
from provision.nodes.runner import PlaybookResult, failure_line, failure_mark, nodes_error
from provision.render.kubeadm_config import CRI_SOCKET
from provision.render.node_tables import KERNEL_MODULES, MODULES_LOAD_FILE, SYSCTLS
from provision.render.prepare_files import sandbox_image

KUBE_PACKAGES = ("kubeadm", "kubelet", "kubectl")


@dataclass
class PrepareResult:
    playbook: PlaybookResult
    reports: dict[str, NodeReport] = field(default_factory=dict)

    @property
    def changed(self) -> dict[str, int]:
        return self.playbook.changed


def check_node(host: str, report: NodeReport, settings: Settings) -> list[str]:
    """Problems with a prepared node, each naming the fact and what to look at; empty when it is ready."""
    problems = []
    if report.hostname != host:
        problems.append(f"hostname is '{report.hostname}', not its node name '{host}'")
    if report.swap.active:
        problems.append("swap is still on (swapon --show lists it)")
    if report.swap.fstab:
        problems.append("/etc/fstab still has an active swap line")
    for module in KERNEL_MODULES:
        if module not in report.modules_load:
            problems.append(f"{module} is not in {MODULES_LOAD_FILE}")
    for key, wanted in SYSCTLS.items():
        value = report.sysctls.get(key)
        if value != wanted:
            problems.append(f"sysctl {key} is '{value or ''}', not {wanted}")
    if report.unit("containerd").active != "active":
        problems.append("containerd is not running: see `journalctl -u containerd` on the node")
    containerd = report.containerd
    # The effective configuration, nvidia-ctk's drop-in included: a departure is named by its path and value.
    for departure in config_problems(containerd.config_dump, sandbox_image(settings), nvidia=report.gpu_node,
                                     nvidia_default=settings.gpu.runtime == "default"):
        problems.append(f"containerd runs with {departure} (`containerd config dump`; is another file under "
                        "/etc/containerd overriding prepare's?)")
    if containerd.cri != "ok":
        problems.append("containerd's CRI plugin is not running (`ctr plugins ls` on the node)")
    if report.crictl.endpoint != CRI_SOCKET:
        problems.append("/etc/crictl.yaml does not point at containerd's socket")
    if report.crictl.works is False:
        problems.append("`crictl version` fails against containerd")
    if settings.container_runtime.install_docker and report.unit("docker").active != "active":
        problems.append("Docker is not running: see `journalctl -u docker` on the node")
    packages = {tool: report.packages.get(tool) for tool in KUBE_PACKAGES}
    for tool, package in packages.items():
        if package is None or not package.installed:
            problems.append(f"{tool} is not installed")
    missing_holds = [tool for tool, package in packages.items() if package is None or not package.held]
    if missing_holds:
        problems.append(f"{', '.join(missing_holds)} not held at their version (apt-mark hold / dnf versionlock)")
    missing = [spec for spec, installed in report.package_plan.items() if installed is False]
    if missing:
        problems.append(f"{', '.join(missing)} not installed")
    if report.unit("kubelet").enabled != "enabled":
        problems.append("the kubelet is not enabled at boot")
    problems += kubeadm_version_problems(report, settings)
    if report.gpu_node and not report.nvidia_gpus:
        problems.append("it is a GPU node but nvidia-smi lists no GPU")
    return problems


def kubeadm_version_problems(report: NodeReport, settings: Settings) -> list[str]:
    """Why the kubeadm installed on the node cannot be the one kubernetes.version asks for: kubeadm init is given
    exactly the release installed (kubernetesVersion), so it must be readable and agree with the settings."""
    wanted = settings.kubernetes
    found = report.kubeadm_release
    if report.kubeadm_version is None:
        return []  # reported above as not installed
    if found is None:
        return [f"the installed kubeadm's version '{report.kubeadm_version}' is not a Kubernetes release "
                "(`dpkg -l kubeadm` / `rpm -q kubeadm` on the node)"]
    if not wanted.is_running(found):
        return [f"kubeadm {found} is installed, but kubernetes.version is {wanted.version}: remove the held kubeadm, "
                "kubelet and kubectl packages from the node (or `bootstrap reset` it) and run prepare again"]
    return []


def kubernetes_version(reports: Mapping[str, NodeReport], cluster: Cluster) -> str | None:
    """The Kubernetes release kubeadm init is given: the kubeadm installed on the first control plane, from its
    report (None when it was not among the nodes prepared)."""
    report = reports.get(cluster.control_plane.name)
    return report.kubeadm_release if report is not None else None


def read_reports(run_dir: Path) -> dict[str, NodeReport]:
    """Each host's report of its state (the cb_node_report module's document). Raises BootstrapError naming the
    host when a report does not validate."""
    return sent(run_dir, NODE_REPORT_KEY, NodeReport, phase="prepare", what="its state")


def check_prepared(playbook: PlaybookResult, cluster: Cluster, settings: Settings,
                   nodes: Sequence[str] | None = None) -> dict[str, NodeReport]:
    """The Python check after the playbook: every node reported, and reported itself ready for kubeadm.

    Raises BootstrapError naming every node that failed (with its own first cause: the unreachable source, the
    lock, the task), was unreachable, sent no report, or is not ready, one line each; returns the reports by node
    name.
    """
    failed = playbook.failed_hosts
    if not playbook.ok and not failed:
        playbook.raise_for_failure()
    reports = read_reports(playbook.run_dir)
    # Ansible reports and fails under the inventory host name; the lines and the marks name the node.
    name_of: dict[str, str] = {node.host: node.name for node in cluster.nodes}
    lines = {name_of.get(host, host): failure_line(failure) for host, failure in failed.items()}
    marks = {name_of.get(host, host): failure_mark(failure) for host, failure in failed.items()}
    targets = [cluster.node(name) for name in nodes] if nodes else list(cluster.nodes)
    checked: dict[str, NodeReport] = {}
    for node in targets:
        if node.name in lines:
            continue
        report = reports.get(node.host)
        if report is None:
            lines[node.name], marks[node.name] = f"{node.name} sent no report of its state", "no report"
            continue
        checked[node.name] = report
        problems = check_node(node.name, report, settings)
        if problems:
            lines[node.name], marks[node.name] = f"{node.name} is not ready: {'; '.join(problems)}", "not ready"
    if lines:
        order: dict[str, int] = {node.name: index for index, node in enumerate(targets)}
        ordered = dict(sorted(lines.items(), key=lambda item: order.get(item[0], len(order))))
        raise nodes_error("prepare", ordered, marks, len(targets), playbook.run_dir / "run.log")
    return checked

