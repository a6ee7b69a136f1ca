"""upgrade_workers (`bootstrap upgrade`, each step): the workers one at a time (or --parallel N together), each
cordoned and drained, `kubeadm upgrade node`, its kubelet and kubectl, the kubelet back on the release, uncordoned."""
from __future__ import annotations

from provision.phases.engine import Phase, PhaseContext
from provision.phases.node_upgrade import finish_left_behind, nothing_to_do, running, upgrade_nodes


def skip_reason(ctx: PhaseContext) -> str | None:
    step, _, _ = running(ctx)
    return nothing_to_do(ctx, [n.name for n in ctx.cluster.workers], step.workers, "worker")


def check(ctx: PhaseContext) -> str:
    step, release, _ = running(ctx)
    back = finish_left_behind(ctx, [n.name for n in ctx.cluster.workers])
    size = ctx.upgrade.parallel if ctx.upgrade else 1
    for start in range(0, len(step.workers), size):
        upgrade_nodes(ctx, step.workers[start:start + size])
    parts = []
    if step.workers:
        at_a_time = "one at a time" if size == 1 else f"{size} at a time"
        parts.append(f"{', '.join(step.workers)} at {release}, {at_a_time}")
    if back:
        parts.append(f"{', '.join(back)} uncordoned (already at {release})")
    return "; ".join(parts)


PHASE = Phase("upgrade_workers", "each worker: drain, kubeadm upgrade node, kubelet, uncordon", check,
              needs=("kubeconfig",), skip_reason=skip_reason)
