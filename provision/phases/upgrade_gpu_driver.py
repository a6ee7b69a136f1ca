"""upgrade_gpu_driver (`bootstrap upgrade --gpu-driver BRANCH`, after the Kubernetes steps): the NVIDIA driver moved
to BRANCH, and the container toolkit to the settings' version, on every GPU node that runs anything else, under
drain as a kubelet upgrade is (a driver swap unloads the kernel module every GPU pod uses). What each GPU node runs
is read first (playbooks/gpu_driver_read.yml); then the GPU control planes one at a time, then the GPU workers in
the upgrade's groups (--parallel, --canary, --pause-after), each drained, upgraded by playbooks/upgrade_gpu_driver.yml
(the old branch out, the nvidia role with the new one, the new module checked loaded), its device plugin pod
restarted against the new driver, and uncordoned only once the node is Ready with its GPUs allocatable again
(nvidia.com/gpu, or what sharing and MIG advertise, as preflight decided). Each node's stage is recorded
(upgrade.gpu_driver in the state), so a re-run goes on."""
from __future__ import annotations

import re

from kubernetes import client
from pydantic import BaseModel, ConfigDict

from provision.errors import BootstrapError
from provision.inputs.upgrade import Batch, UpgradePaused, worker_batches
from provision.inputs.values import NodeName
from provision.kube.upgrade import restart_pods, wait_for_allocatable
from provision.kube.verify import DEVICE_PLUGIN_SELECTOR, GPU_RESOURCE
from provision.nodes.documents import read_documents
from provision.phases.common import api, gpu_nodes
from provision.phases.engine import Phase, PhaseContext
from provision.phases.node_upgrade import NodeWork, drained
from provision.render.playbook_vars import gpu_driver_upgrade_vars

PLAYBOOK = "upgrade_gpu_driver.yml"
# `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build ...`: the branch is the first
# number of the version.
DRIVER_RE = re.compile(r"\s([0-9]{3,4})\.[0-9]+(?:\.[0-9]+)?\s", re.ASCII)
TOOLKIT_RE = re.compile(r"version ([0-9]+\.[0-9]+\.[0-9]+)", re.ASCII)


class DriverFound(BaseModel):
    """What a GPU node runs (roles/nvidia_upgrade/tasks/read.yml's nvidia_upgrade_found): the loaded driver's
    version line and `nvidia-ctk --version`, '' where none."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    driver: str
    toolkit: str


def branch_of(line: str) -> str:
    """The driver branch /proc/driver/nvidia/version's first line names ('' for none)."""
    match = DRIVER_RE.search(f" {line} ")
    return match.group(1) if match else ""


def toolkit_of(text: str) -> str:
    """The version `nvidia-ctk --version` prints ('' for none)."""
    match = TOOLKIT_RE.search(text)
    return match.group(1) if match else ""


def _branch(ctx: PhaseContext) -> str:
    if ctx.upgrade is None or ctx.upgrade.gpu_driver is None:
        raise BootstrapError("internal: upgrade_gpu_driver runs for the upgrade's --gpu-driver only")
    return ctx.upgrade.gpu_driver


def skip_reason(ctx: PhaseContext) -> str | None:
    if ctx.upgrade is None or ctx.upgrade.gpu_driver is None:
        return "no --gpu-driver"
    return None if gpu_nodes(ctx) else "no GPU nodes (preflight found none)"


def limit(ctx: PhaseContext) -> list[str]:
    return list(gpu_nodes(ctx))


def _expected(ctx: PhaseContext, name: str) -> dict[str, int]:
    """What the node's device plugin advertises once it is back: as preflight decided it (sharing, MIG), else one
    nvidia.com/gpu per GPU preflight found."""
    physical = (ctx.state.gpus or {}).get(NodeName(name), 0)
    return dict(ctx.state.gpu_offered.get(name) or {GPU_RESOURCE: physical})


def pending(ctx: PhaseContext, found: dict[str, DriverFound]) -> dict[NodeName, str]:
    """GPU node -> the branch it runs now, for those that need the upgrade: another branch (or none loaded), another
    container toolkit, or left out of service by a stopped run."""
    branch, toolkit = _branch(ctx), ctx.settings.gpu.container_toolkit_version
    record = ctx.state.upgrade
    left = {name for name, stage in (record.gpu_driver if record else {}).items() if stage.stage != "done"}
    todo: dict[NodeName, str] = {}
    for name in gpu_nodes(ctx):
        report = found[name]
        now = branch_of(report.driver)
        if now != branch or toolkit_of(report.toolkit) != toolkit or name in left:
            todo[name] = now
    return todo


def check(ctx: PhaseContext) -> str:
    branch = _branch(ctx)
    options = ctx.upgrade
    assert options is not None
    found = read_documents(ctx.playbook_results[-1], [ctx.cluster.node(name) for name in gpu_nodes(ctx)],
                           "nvidia_upgrade_found", DriverFound, "its NVIDIA driver")
    todo = pending(ctx, found)
    if not todo:
        return f"every GPU node runs driver {branch} and container toolkit {ctx.settings.gpu.container_toolkit_version}"
    key = f"gpu-driver {branch}"
    variables = gpu_driver_upgrade_vars(ctx.cluster, gpu_nodes(ctx), ctx.state.gpu_generations, todo)

    def back(api_client: client.ApiClient, name: str) -> None:
        wait_for_allocatable(api_client, name, _expected(ctx, name), timeout_s=ctx.settings.verify.timeout_s,
                             on_message=ctx.say)

    def after(name: str) -> client.ApiClient | None:
        fresh = api(ctx)
        restart_pods(fresh, name, "kube-system", DEVICE_PLUGIN_SELECTOR)
        return fresh

    work = NodeWork(f"NVIDIA driver {branch}", key, PLAYBOOK, "upgrade_gpu_driver", variables, back,
                    book="gpu_driver", after=after)
    planes = [n.name for n in ctx.cluster.control_planes if n.name in todo]
    workers = [n.name for n in ctx.cluster.workers if n.name in todo]
    for name in planes:
        drained(ctx, [name], work)
    groups = worker_batches(workers, options.parallel if options else Batch(), canary=options.canary)
    since_pause = 0
    for index, group in enumerate(groups):
        drained(ctx, group, work)
        since_pause += len(group)
        left = [name for later in groups[index + 1:] for name in later]
        if options.pause_after is not None and since_pause >= options.pause_after and left:
            question = f"driver {branch} on {', '.join(n for g in groups[:index + 1] for n in g)}; {', '.join(left)} left"
            if options.confirm is None or not options.confirm(f"{question}: go on?"):
                raise UpgradePaused(f"paused after {question} (--pause-after {options.pause_after}): check the GPU "
                                    "nodes, then run the same command again to go on")
            since_pause = 0
    moved = ", ".join(f"{name} ({todo[name] or 'none'} -> {branch})" for name in [*planes, *workers])
    return f"NVIDIA driver on {moved}, container toolkit {ctx.settings.gpu.container_toolkit_version}; GPUs allocatable"


PHASE = Phase("upgrade_gpu_driver", "the NVIDIA driver and container toolkit on each GPU node, under drain", check,
              playbook="gpu_driver_read.yml", limit=limit, needs=("kubeconfig",), skip_reason=skip_reason)
