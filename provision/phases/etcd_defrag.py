"""etcd_defrag (`bootstrap etcd defrag`): every member defragmented one at a time, the leader last, through one
healthy member (provision/nodes/etcd/maintenance.py); where NOSPACE is raised, etcd's own recovery (compact,
defragment, disarm once under the quota). Refused while a member is down."""
from __future__ import annotations

from typing import Any

from provision.errors import BootstrapError
from provision.nodes.documents import module_documents
from provision.nodes.etcd.maintenance import DefragPlan, defrag_problems, plan_defrag
from provision.nodes.etcd.report import LAYOUT, read_survey
from provision.phases.engine import Phase, PhaseContext
from provision.render.playbook_vars import etcd_defrag_vars

RESULT_KEY = "cb_etcd_defrag"
TIMEOUT_S = 300


def plan(ctx: PhaseContext) -> DefragPlan:
    survey = ctx.results.etcd
    if survey is None:
        raise BootstrapError("internal: etcd_defrag runs after etcd_probe")
    problems = defrag_problems(survey)
    if problems:
        raise BootstrapError(f"etcd defrag refused, nothing changed: {'; '.join(problems)}")
    return plan_defrag(survey)


def refuse(ctx: PhaseContext) -> None:
    """Before the playbook: a member down refuses the defragmentation, nothing changed."""
    plan(ctx)


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    return etcd_defrag_vars(LAYOUT.as_dict(), plan(ctx).as_dict(TIMEOUT_S))


def _mib(size: object) -> str:
    return f"{int(size) / (1 << 20):.1f} MiB" if isinstance(size, int) else "?"


def check(ctx: PhaseContext) -> str:
    found = plan(ctx)
    host = ctx.cluster.node(found.through).host
    document = module_documents(ctx.playbook_results[-1].run_dir, RESULT_KEY).get(host)
    if not isinstance(document, dict):
        raise BootstrapError(f"etcd defrag: {found.through} sent no report of the defragmentation; run it again")
    survey = read_survey(ctx.playbook_results[-1], ctx.cluster)
    report = survey.reports.get(found.through)
    still = [a.alarm for a in (report.member.alarms or [])] if report and report.member else []
    sizes = ", ".join(f"{name} {_mib(m.get('before'))} -> {_mib(m.get('after'))}"
                      for name, m in zip(found.order, document.get("members") or [], strict=False))
    if "NOSPACE" in still:
        raise BootstrapError(f"etcd defrag: {sizes}; NOSPACE stays raised: a database is still at its quota "
                             f"({_mib(found.quota_bytes)}): delete what fills it or raise --quota-backend-bytes, then "
                             "run it again")
    disarmed = "; NOSPACE disarmed" if document.get("disarmed") else ""
    return f"defragmented one at a time, {found.order[-1]} (the leader) last: {sizes}{disarmed}"


PHASE = Phase("etcd_defrag", "defragment every member, the leader last, and disarm NOSPACE", check,
              playbook="etcd_defrag.yml", extra_vars=extra_vars, limit=lambda ctx: [plan(ctx).through],
              needs=("etcd",), before=refuse)
