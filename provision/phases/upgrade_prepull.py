"""upgrade_prepull (`bootstrap upgrade`, each step, after its repository and release are chosen, before any node is
drained): every node of the step gets kubeadm of the release (kubeadm-upgrade.md upgrades kubeadm first, before the
drain) and pulls the release's images through the CRI: those its kubeadm lists (`kubeadm config images list`, from
the cluster's image repository: every one on a control plane, kube-proxy, CoreDNS and pause elsewhere) and Calico
of the step's pairing, as kubespray's download play pulls before its upgrade. A node's drain window then holds the
upgrade alone; a registry that does not answer stops the step before anything was drained."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from provision.nodes.documents import read_documents
from provision.phases.engine import Phase, PhaseContext
from provision.phases.node_upgrade import running
from provision.render.playbook_vars import upgrade_prepull_vars


class Prepulled(BaseModel):
    """What a node pulled (the role's kubernetes_upgrade_prepulled)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    pulled: list[str]


def limit(ctx: PhaseContext) -> list[str]:
    step, _, _ = running(ctx)
    return list(step.nodes)


def skip_reason(ctx: PhaseContext) -> str | None:
    step, _, _ = running(ctx)
    return None if step.nodes else "no node in this step"


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    return upgrade_prepull_vars(ctx.settings)


def check(ctx: PhaseContext) -> str:
    _, release, _ = running(ctx)
    reports = read_documents(ctx.playbook_results[-1], [ctx.cluster.node(name) for name in limit(ctx)],
                             "kubernetes_upgrade_prepulled", Prepulled, "the images it pulled")
    count = sum(len(report.pulled) for report in reports.values())
    return (f"images of {release} on {len(limit(ctx))} nodes before any drain: {count} pulled, the others there "
            "already")


PHASE = Phase("upgrade_prepull", "the step's images pulled on its nodes before any drain", check,
              playbook="upgrade_prepull.yml", limit=limit, extra_vars=extra_vars, skip_reason=skip_reason)
