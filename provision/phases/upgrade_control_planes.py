"""upgrade_control_planes (`bootstrap upgrade`, each step): one control plane at a time, the first control plane
first (`kubeadm upgrade plan` and `apply` there, `kubeadm upgrade node` on the others), each drained, upgraded,
its API server and etcd healthy again and its kubelet back on the release before the next one begins; then the
operator's admin kubeconfig takes the certificate kubeadm renewed."""
from __future__ import annotations

from provision.phases.engine import Phase, PhaseContext
from provision.phases.node_upgrade import certificates_note, finish_left_behind, nothing_to_do, running, upgrade_nodes


def skip_reason(ctx: PhaseContext) -> str | None:
    step, _, _ = running(ctx)
    return nothing_to_do(ctx, [n.name for n in ctx.cluster.control_planes], step.control_planes, "control plane")


def check(ctx: PhaseContext) -> str:
    step, release, _ = running(ctx)
    back = finish_left_behind(ctx, [n.name for n in ctx.cluster.control_planes])
    for name in step.control_planes:
        upgrade_nodes(ctx, [name])
    parts = []
    if step.control_planes:
        parts.append(f"{', '.join(step.control_planes)} at {release}, one at a time")
        parts.append(certificates_note(step.control_planes))
    if back:
        parts.append(f"{', '.join(back)} uncordoned (already at {release})")
    return "; ".join(parts)


PHASE = Phase("upgrade_control_planes", "each control plane: drain, kubeadm upgrade, kubelet, health, uncordon", check,
              needs=("kubeconfig",), skip_reason=skip_reason)
