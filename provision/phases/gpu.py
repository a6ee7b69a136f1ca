"""gpu: MIG instances laid out where gpu.mig asks for them, then the NVIDIA device plugin (with its configuration:
the MIG strategy, the sharing) and its RuntimeClass on the nodes where preflight found GPUs, those nodes labelled
with their oldest GPU generation, then what the plugin advertises checked against what preflight expected."""
from __future__ import annotations

from typing import Any

from provision.inputs import versions
from provision.inputs.versions import GPU_GENERATION_LABEL, oldest_generation
from provision.kube.verify import verify_cluster
from provision.phases.common import api, expectations, gpu_nodes
from provision.phases.engine import Phase, PhaseContext
from provision.render.manifests import device_plugin_manifest, gpu_node_labels, runtimeclass_manifest


def skip_reason(ctx: PhaseContext) -> str | None:
    return None if gpu_nodes(ctx) else "no GPU found by preflight"


def mig_layout(ctx: PhaseContext, nodes: list[str]) -> dict[str, Any]:
    """cb_mig: the inventory hosts whose GPUs are cut, the profile, and per host the instances one GPU of each
    PCI device id holds (the versions table's; preflight refused GPUs without the profile)."""
    mig = ctx.settings.gpu.mig
    if not mig.enabled or mig.profile is None:
        return {"hosts": [], "profile": "", "instances": {}}
    profile = mig.profile
    counts = {f"{device:04x}": product.profiles[profile]
              for product in versions.MIG_PRODUCTS if profile in product.profiles for device in product.device_ids}
    hosts = {ctx.cluster.node(name).host: counts for name in nodes}
    return {"hosts": sorted(hosts), "profile": profile, "instances": hosts}


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    nodes = sorted(gpu_nodes(ctx))
    generations = ctx.state.gpu_generations
    common = gpu_node_labels(ctx.settings)
    return {"cb_gpu_nodes": nodes,
            # The smoke test picks its image for the oldest generation among the nodes it runs on.
            "cb_gpu_node_labels": {name: common + ([f"{GPU_GENERATION_LABEL}={oldest_generation(generations[name])}"]
                                                   if generations.get(name) else []) for name in nodes},
            "cb_mig": mig_layout(ctx, nodes),
            "cb_device_plugin_manifest": device_plugin_manifest(ctx.settings),
            "cb_runtimeclass_manifest": runtimeclass_manifest()}


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
