"""etcd_member_join (`bootstrap node replace NAME`, etcd under systemd): the fresh machine's etcd joins as a new
member: its old data moved aside, added as a learner through a healthy member, started with the current members
and `existing` state, promoted once it has caught up, then judged healthy and voting
(provision/nodes/etcd/members.py). Under kubeadm's static pods `kubeadm join --control-plane` does this instead
(`node replace` runs the join phases)."""
from __future__ import annotations

from typing import Any

from provision.errors import BootstrapError
from provision.nodes.etcd.members import JoinPlan, helper, join_problems, joined_problems, plan_join
from provision.nodes.etcd.report import LAYOUT, read_survey
from provision.nodes.etcd.restore import new_restore_id
from provision.phases.engine import Phase, PhaseContext
from provision.phases.etcd_replace_check import leaving
from provision.render.playbook_vars import etcd_member_join_vars


def plan(ctx: PhaseContext) -> JoinPlan:
    survey = ctx.results.etcd
    assert survey is not None
    node = ctx.cluster.node(leaving(ctx))
    through = helper(survey, node.name)
    problems = join_problems(node, survey, through)
    if problems or through is None:
        raise BootstrapError(f"node replace {node.name}: {'; '.join(problems)}")
    return plan_join(node, survey, through, new_restore_id())


def skip_reason(ctx: PhaseContext) -> str | None:
    survey = ctx.results.etcd
    report = survey.reports.get(leaving(ctx)) if survey is not None else None
    members = survey.members() if survey is not None else []
    if report is not None and report.healthy and any(m.name == report.name and not m.learner for m in members):
        return f"{leaving(ctx)} is a healthy etcd member already"
    return None


def before(ctx: PhaseContext) -> None:
    """The join decided once, before the playbook (a machine that cannot join is refused here)."""
    ctx.results.etcd_join = plan(ctx)


def joining(ctx: PhaseContext) -> JoinPlan:
    if ctx.results.etcd_join is None:
        raise BootstrapError("internal: etcd_member_join's plan is made before its playbook")
    return ctx.results.etcd_join


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    found = joining(ctx)
    return etcd_member_join_vars(LAYOUT.as_dict(), found.as_dict(ctx.cluster.node(found.node).host,
                                                                  ctx.cluster.node(found.helper).host))


def limit(ctx: PhaseContext) -> list[str]:
    found = joining(ctx)
    return [found.node, found.helper]


def check(ctx: PhaseContext) -> str:
    found = joining(ctx)
    survey = read_survey(ctx.playbook_results[-1], ctx.cluster)
    problems = joined_problems(found, survey)
    if problems:
        raise BootstrapError(f"node replace {found.node}: {'; '.join(problems)}")
    report = survey.reports[found.node]
    assert report.member is not None
    names = sorted(m.name for m in report.member.members or [])
    kept = f"; its old data kept as {found.backup}" if found.backup in report.backups else ""
    return (f"{found.node} joined etcd through {found.helper} (learner, then promoted): members {', '.join(names)}, "
            f"all healthy{kept}")


PHASE = Phase("etcd_member_join", "join the fresh machine's etcd as a new member", check,
              playbook="etcd_member_join.yml", extra_vars=extra_vars, limit=limit, needs=("etcd",),
              skip_reason=skip_reason, before=before)
