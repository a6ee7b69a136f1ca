"""etcd_member_remove (`bootstrap node replace NAME`): the replaced control plane's etcd member removed through a
healthy member, once the node is drained, so it works while the machine is dead or unreachable (etcd_replace_check
refused a replace without quorum before the drain; provision/nodes/etcd/members.py)."""
from __future__ import annotations

from typing import Any

from provision.errors import BootstrapError
from provision.nodes.etcd.members import helper, members_of
from provision.nodes.etcd.report import LAYOUT, Member, read_survey
from provision.phases.engine import Phase, PhaseContext
from provision.phases.etcd_replace_check import leaving
from provision.render.playbook_vars import etcd_member_remove_vars


def found(ctx: PhaseContext) -> list[Member]:
    survey = ctx.results.etcd
    return members_of(ctx.cluster.node(leaving(ctx)), survey.members()) if survey is not None else []


def skip_reason(ctx: PhaseContext) -> str | None:
    survey = ctx.results.etcd
    if survey is not None and survey.members() and not found(ctx):
        return f"{leaving(ctx)} is not an etcd member"
    return None


def through(ctx: PhaseContext) -> str:
    survey = ctx.results.etcd
    assert survey is not None
    name = helper(survey, leaving(ctx))
    if name is None:
        raise BootstrapError(f"node replace {leaving(ctx)}: no other etcd member answers healthy")
    return name


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    survey = ctx.results.etcd
    assert survey is not None
    etcdctl = survey.reports[through(ctx)].etcdctl
    assert etcdctl is not None  # helper() picks a member with one
    return etcd_member_remove_vars(LAYOUT.as_dict(), etcdctl=etcdctl, ids=[m.id for m in found(ctx)])


def check(ctx: PhaseContext) -> str:
    survey = read_survey(ctx.playbook_results[-1], ctx.cluster)
    name = through(ctx)
    report = survey.reports.get(name)
    members = report.member.members if report is not None and report.member is not None else None
    if members is None:
        raise BootstrapError(f"node replace {leaving(ctx)}: {name} did not list etcd's members after the removal")
    left = members_of(ctx.cluster.node(leaving(ctx)), members)
    if left:
        raise BootstrapError(f"node replace {leaving(ctx)}: etcd still lists its member {left[0].id}")
    removed = ", ".join(m.id for m in found(ctx))
    return (f"{leaving(ctx)}'s etcd member ({removed}) removed through {name}: "
            f"{', '.join(m.name or m.id for m in members)} remain")


PHASE = Phase("etcd_member_remove", "remove the replaced control plane's etcd member", check,
              playbook="etcd_member_remove.yml", extra_vars=extra_vars, limit=lambda ctx: [through(ctx)],
              needs=("etcd",), skip_reason=skip_reason)
