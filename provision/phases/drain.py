"""drain (reset, down, node remove): the nodes cordoned, evicted and deleted through the API, when there is one."""
from __future__ import annotations

from provision.errors import BootstrapError
from provision.kube.drain import drain_and_delete
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.phases.common import api
from provision.phases.engine import Phase, PhaseContext


def check(ctx: PhaseContext) -> str:
    client = None
    if admin_kubeconfig_path(ctx.cluster).exists():
        try:
            client = api(ctx)
        except BootstrapError:
            client = None
    result = drain_and_delete(client, ctx.target_nodes)
    ctx.results.drain = result
    return result.summary()


PHASE = Phase("drain", "cordon, evict and delete through the API", check, undoes=True)
