"""network: Calico, applied from the first control plane through a kustomization, then that node Ready and the
system pods running."""
from __future__ import annotations

from typing import Any

from provision.kube.verify import verify_cluster
from provision.phases.common import api, expectations
from provision.phases.engine import Phase, PhaseContext
from provision.render.playbook_vars import network_vars


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    return network_vars(ctx.settings)


def check(ctx: PhaseContext) -> str:
    control_plane = ctx.cluster.control_plane.name
    report = verify_cluster(api(ctx), expectations(ctx, [control_plane]), checks=("nodes", "pods"),
                            timeout_s=ctx.settings.verify.timeout_s, on_message=ctx.say)
    report.raise_for_problems("network")
    return f"Calico {ctx.settings.calico.version} up, {control_plane} Ready"


PHASE = Phase("network", "Calico pod network", check, playbook="network.yml", extra_vars=extra_vars,
              needs=("kubeconfig",))
