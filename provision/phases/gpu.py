"""gpu: MIG instances laid out where gpu.mig asks for them, then the NVIDIA device plugin (with its configuration:
the MIG strategy, the sharing) and its RuntimeClass on the nodes where preflight found GPUs, those nodes labelled
with their oldest GPU generation, then what the plugin advertises checked against what preflight expected."""
from __future__ import annotations

from typing import Any

from provision.kube.verify import verify_cluster
from provision.phases.common import api, expectations, gpu_nodes
from provision.phases.engine import Phase, PhaseContext
from provision.render.playbook_vars import gpu_vars


def skip_reason(ctx: PhaseContext) -> str | None:
    return None if gpu_nodes(ctx) else "no GPU found by preflight"


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    return gpu_vars(ctx.settings, ctx.cluster, sorted(gpu_nodes(ctx)), ctx.state.gpu_generations)


def check(ctx: PhaseContext) -> str:
    report = verify_cluster(api(ctx), expectations(ctx, sorted(gpu_nodes(ctx))), checks=("gpus",),
                            timeout_s=ctx.settings.verify.timeout_s, on_message=ctx.say)
    report.raise_for_problems("gpu")
    found = sum(f for _, f in report.gpus.values())
    gpu = ctx.settings.gpu
    plugin = gpu.device_plugin_version
    how = [f"MIG {gpu.mig.profile} ({gpu.mig.strategy})"] if gpu.mig.enabled else []
    how += [f"{gpu.sharing} x{gpu.replicas}"] if gpu.sharing != "none" else []
    what = f"{gpu.advertised_resource} ({', '.join(how)})" if how else "GPUs"
    return f"device plugin {plugin}: {found} {what} allocatable on {len(report.gpus)} nodes"


PHASE = Phase("gpu", "NVIDIA device plugin on GPU nodes", check, playbook="gpu_plugin.yml", extra_vars=extra_vars,
              needs=("gpus", "kubeconfig"), skip_reason=skip_reason)
