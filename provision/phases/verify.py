"""verify: through the API only (the admin kubeconfig, which names the control-plane endpoint): every node Ready,
the system pods and the endpoint's pods running, etcd's members, DNS from a pod, the GPUs allocatable."""
from __future__ import annotations

from provision.kube.verify import verify_cluster
from provision.phases.common import api, expectations
from provision.phases.engine import Phase, PhaseContext


def check(ctx: PhaseContext) -> str:
    client = api(ctx)
    report = verify_cluster(client, expectations(ctx, joined=True), timeout_s=ctx.settings.verify.timeout_s,
                            on_message=ctx.say)
    ctx.results.verify = report
    report.raise_for_problems()
    return f"{report.summary()}; API through {client.configuration.host}"


PHASE = Phase("verify", "nodes Ready, system pods, DNS, GPUs", check, needs=("gpus", "kubeconfig"), read_only=True)
