"""`bootstrap prepare`: prepare every node (OS, containerd and Docker, Kubernetes packages, NVIDIA stack)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from provision.cli import complete
from provision.cli.option_table import checked, options_of
from provision.cli.options import NodeOptions, node_options

if TYPE_CHECKING:
    from provision.nodes.prepare import PrepareResult

HELP = """Prepare the nodes for kubeadm; the first phase of `bootstrap up`, safe to run again at any time.

On every node: hostname from the inventory name, every node in /etc/hosts, swap off for good, SELinux
permissive (RHEL family), the firewall opened for kubeadm and Calico (firewall.mode), overlay and
br_netfilter loaded, the bridge and forwarding sysctls, chrony, containerd (2.x: Docker's containerd.io, or
the distribution's where it is 2.0+; container_runtime.containerd_source) configured for the major installed
with the systemd cgroup driver and kubeadm's pause image, then read back with `containerd config dump`
(and Docker from the same source unless container_runtime.install_docker is false), crictl,
kubeadm/kubelet/kubectl held at kubernetes.version; on cgroup v1 nodes with kubelet.switch_to_cgroup_v2 the
unified hierarchy and a reboot; on GPU nodes (gpu=true, or found on PCI by preflight with gpu=auto) the
NVIDIA driver (open or proprietary module per GPU generation), the container toolkit and containerd's nvidia
runtime, rebooting only when the driver needs it. Every repository comes from the settings (mirrors.*,
mirrors.profile: cn, offline.source). Preflight, with the version rules, runs first when it has not checked
these nodes yet. A package manager another process holds (unattended-upgrades on a fresh machine) is waited
for up to packages.lock_timeout_s, and transient download failures are tried again (downloads.attempts);
every failed or unreachable node is named. Killed at any point, a re-run finishes the job. A second run
changes nothing.

\b
Example:
    bootstrap prepare --inventory hosts.ini --config cluster.yaml
"""

LimitOption = Annotated[list[str] | None, options_of("prepare").option(
    "--limit", "-l", help="Prepare only these inventory hosts (repeat the option for several).", show_default=False,
    autocompletion=complete.nodes)]


def run_prepare_command(nodes: NodeOptions, *, limit: list[str] | None = None) -> PrepareResult:
    from provision.cli.support import load_inputs, run_pipeline
    from provision.cli.views import console, print_result

    cluster, settings = load_inputs(nodes)
    for name in limit or []:
        cluster.node(name)  # an unknown name is refused before any SSH connection
    # The phase pipeline, as `up` runs it: preflight first when it has not counted these nodes' GPUs yet.
    ctx = run_pipeline(("prepare",), cluster, settings, nodes, title=f"bootstrap prepare: {nodes.inventory}",
                       targets=tuple(limit) if limit else None)
    result = ctx.results.prepare
    assert result is not None, "the prepare phase ran to its check, which records its result"
    print_result(result.playbook)
    gpu_nodes = sorted(host for host, report in result.reports.items() if report.gpu_node)
    if gpu_nodes:
        console.print(f"GPU nodes: {', '.join(gpu_nodes)}")
    return result


def register(app: typer.Typer) -> None:
    @app.command("prepare", help=HELP)
    @checked("prepare")
    @node_options
    def prepare_command(nodes: NodeOptions, limit: LimitOption = None) -> None:
        run_prepare_command(nodes, limit=limit)
