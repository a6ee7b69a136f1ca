"""etcd_replace_check (`bootstrap node replace NAME`): what a replace refuses before anything changes (before the
drain): etcd without its quorum (membership cannot change: the way back is a restore onto the survivors), no
other healthy member to change it through, and the first control plane under kubeadm without a VIP, which the
rest of the cluster reaches by its own address (provision/nodes/etcd/members.py: replace_problems)."""
from __future__ import annotations

from provision.errors import BootstrapError
from provision.nodes.etcd.members import helper, replace_problems
from provision.phases.engine import Phase, PhaseContext
from provision.render.endpoint import endpoint_mode


def leaving(ctx: PhaseContext) -> str:
    if ctx.etcd.replace is None:
        raise BootstrapError("internal: the replace's phases run for `node replace`")
    return ctx.etcd.replace


def check(ctx: PhaseContext) -> str:
    survey = ctx.results.etcd
    if survey is None:
        raise BootstrapError("internal: etcd_replace_check runs after etcd_probe")
    name = leaving(ctx)
    first = ctx.cluster.control_plane.name == name
    problems = replace_problems(survey, name, first=first, endpoint=endpoint_mode(ctx.cluster, ctx.settings))
    if problems:
        raise BootstrapError(f"node replace {name} refused, nothing changed: {'; '.join(problems)}")
    through = helper(survey, name)
    return (f"{name} is drained, its member removed through {through}, then it joins again"
            + (" (joins minted on the next control plane: it is the first)" if first else ""))


PHASE = Phase("etcd_replace_check", "refuse a replace that cannot finish, before anything changes", check,
              needs=("etcd",), read_only=True)
