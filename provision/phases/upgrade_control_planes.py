"""upgrade_control_planes (`bootstrap upgrade`, each step): one control plane at a time, the first control plane
first (`kubeadm upgrade plan` and `apply` there, `kubeadm upgrade node` on the others), each drained, upgraded,
its static pods checked at the release before its kubelet moves, its API server and etcd healthy again and its
kubelet back on the release before the next one begins; then the operator's admin kubeconfig takes the certificate
kubeadm renewed.

`kubeadm upgrade apply` is idempotent and runs again unless the cluster shows that all of it ran: the kubeadm-config
ConfigMap's kubernetesVersion (its upload-config phase) and kube-proxy's image (its addon phase, near the end) at
the release. A first control plane whose manifests already carry the release proves nothing: a run killed inside
apply leaves them so, and `kubeadm upgrade node` on the others would then read the old version from kubeadm-config
(cmd/kubeadm/app/cmd/upgrade/node.go) while their kubelets moved on."""
from __future__ import annotations

from provision.kube.upgrade import applied_config
from provision.phases.common import api
from provision.phases.engine import Phase, PhaseContext
from provision.phases.node_upgrade import certificates_note, finish_left_behind, nothing_to_do, running, upgrade_nodes


def skip_reason(ctx: PhaseContext) -> str | None:
    step, _, _ = running(ctx)
    return nothing_to_do(ctx, [n.name for n in ctx.cluster.control_planes], step.control_planes, "control plane")


def apply_needed(ctx: PhaseContext, release: str) -> list[str]:
    """Why `kubeadm upgrade apply v<release>` runs (again) on the first control plane; empty: all of it ran."""
    return applied_config(api(ctx)).behind(f"v{release}")


def check(ctx: PhaseContext) -> str:
    step, release, _ = running(ctx)
    first = ctx.cluster.control_plane.name
    back = finish_left_behind(ctx, [n.name for n in ctx.cluster.control_planes])
    applied = False
    for name in step.control_planes:
        apply = False
        if name == first:
            behind = apply_needed(ctx, release)
            apply = bool(behind)
            if apply:
                ctx.say(f"{first}: kubeadm upgrade apply v{release} ({'; '.join(behind)})")
        upgrade_nodes(ctx, [name], apply=apply)
        applied = applied or apply
    parts = []
    if step.control_planes:
        parts.append(f"{', '.join(step.control_planes)} at {release}, one at a time"
                     + (f" ({first}: kubeadm upgrade apply)" if applied else ""))
        parts.append(certificates_note(step.control_planes))
    if back:
        parts.append(f"{', '.join(back)} (already at {release})")
    return "; ".join(parts)


PHASE = Phase("upgrade_control_planes", "each control plane: drain, kubeadm upgrade, kubelet, health, uncordon", check,
              needs=("kubeconfig",), skip_reason=skip_reason)
