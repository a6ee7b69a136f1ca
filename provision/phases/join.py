"""join: control planes one at a time, then workers, each with a join command (and for control planes a
certificate key) minted on this run; the endpoint's static pods laid down where they belong; then every node Ready
and the workers labelled."""
from __future__ import annotations

from typing import Any

from provision.kube.nodes import label_workers
from provision.kube.verify import verify_cluster
from provision.phases.common import api, expectations
from provision.phases.engine import Phase, PhaseContext
from provision.render.endpoint import endpoint_mode
from provision.render.playbook_vars import join_vars


def limit(ctx: PhaseContext) -> list[str] | None:
    if ctx.nodes is None:
        return None
    # A control plane added behind local proxies changes every node's proxy: all of them take part.
    adds_control_plane = any(ctx.cluster.node(name).is_control_plane for name in ctx.nodes)
    if adds_control_plane and endpoint_mode(ctx.cluster, ctx.settings) == "proxy":
        return None
    # One control plane mints the join command; only the named nodes join.
    return [minter(ctx), *ctx.nodes]


def minter(ctx: PhaseContext) -> str:
    """Where the joins are minted: the first control plane that is not joining itself in this run (the first one,
    but for `node replace` of the first one, which rejoins through the next)."""
    joining = set(ctx.nodes or ())
    return next((n.name for n in ctx.cluster.control_planes if n.name not in joining), ctx.cluster.control_plane.name)


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    return join_vars(ctx.cluster, ctx.settings, vip_interfaces=ctx.state.vip_interfaces, minter=minter(ctx))


def check(ctx: PhaseContext) -> str:
    client = api(ctx)
    report = verify_cluster(client, expectations(ctx, joined=True), checks=("nodes",),
                            timeout_s=ctx.settings.verify.timeout_s, on_message=ctx.say)
    report.raise_for_problems("join")
    workers = [n.name for n in ctx.cluster.nodes if not n.is_control_plane and n.name in ctx.target_nodes]
    labelled = label_workers(client, workers)
    return f"{len(report.ready_nodes)} nodes Ready" + (f", {len(labelled)} labelled worker" if labelled else "")


PHASE = Phase("join", "control planes, then workers, join with a freshly minted token", check, playbook="join.yml",
              extra_vars=extra_vars, limit=limit, needs=("kubeconfig", "vip_interfaces"))
