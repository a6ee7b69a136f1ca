"""prepare: packages, containerd, the kubelet and the NVIDIA stack on every node (playbooks/prepare.yml), then each
node's report checked. The NVIDIA stack goes where preflight found GPUs: `prepare` alone runs preflight first when
it has not run."""
from __future__ import annotations

from typing import Any

from provision.nodes.prepare import PrepareResult, check_prepared, kubernetes_version
from provision.phases.engine import Phase, PhaseContext
from provision.render.playbook_vars import prepare_vars


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    return prepare_vars(ctx.cluster, ctx.state.gpus or {}, ctx.state.gpu_generations)


def check(ctx: PhaseContext) -> str:
    result = ctx.playbook_results[-1]
    reports = check_prepared(result, ctx.cluster, ctx.settings, ctx.nodes)
    ctx.results.prepare = PrepareResult(result, reports)
    # Decided here, once: the release kubeadm init is given (the settings may name only the minor).
    ctx.state.kubernetes_version = kubernetes_version(reports, ctx.cluster) or ctx.state.kubernetes_version
    return f"{len(result.tally)} nodes ready for kubeadm, {sum(result.changed.values())} changes"


PHASE = Phase("prepare", "packages, containerd, kubelet, NVIDIA stack", check, playbook="prepare.yml",
              extra_vars=extra_vars, limit=lambda ctx: list(ctx.nodes) if ctx.nodes is not None else None,
              needs=("gpus",), provides=("kubernetes_version",), checks_playbook=True)
