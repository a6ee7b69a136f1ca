"""`bootstrap etcd defrag`: which member does the work, in which order the members are defragmented (one at a time,
the leader last: a member answers nothing while it is defragmented, and the leader's pause would start an
election), and the judge afterwards. Pure: the probe's survey in, a plan or named problems out
(provision/phases/etcd_defrag.py runs it; module_utils/cb_etcd.py: defragment does it on the node)."""
from __future__ import annotations

from dataclasses import dataclass

from provision.nodes.etcd.report import EtcdSurvey


@dataclass(frozen=True)
class DefragPlan:
    through: str  # the control plane whose etcdctl does the work
    etcdctl: list[str]
    order: list[str]  # member names, the leader last
    endpoints: list[str]  # their client URLs, in that order
    quota_bytes: int

    def as_dict(self, timeout_s: int) -> dict[str, object]:
        return {"etcdctl": self.etcdctl, "endpoints": self.endpoints, "quota_bytes": self.quota_bytes,
                "timeout_s": timeout_s}


def defrag_problems(survey: EtcdSurvey) -> list[str]:
    """Why a defragmentation should not start now: every member must answer healthy (a member down is replaced
    first: `bootstrap node replace`)."""
    members = survey.members()
    if not members:
        return ["no etcd member lists the members: bring etcd back first (docs/etcd.md)"]
    healthy = set(survey.healthy())
    down = [m.name or m.id for m in members if m.name not in healthy]
    if down:
        return [f"etcd members {', '.join(down)} do not answer healthy: defragment with every member up (replace a "
                "dead one first: `bootstrap node replace NAME`)"]
    if not all(m.client_urls for m in members):
        return ["a member advertises no client URL"]
    return []


def plan_defrag(survey: EtcdSurvey) -> DefragPlan:
    """The plan for a survey defrag_problems let through."""
    members = survey.members()
    healthy = survey.healthy()
    leader_ids = set()
    for name in healthy:
        member = survey.reports[name].member
        status = member.status if member is not None else None
        if status and status.get("leader") is not None:
            leader_ids.add(f"{int(status['leader']):x}")
    rank = {name: index for index, name in enumerate(survey.order)}
    ordered = sorted(members, key=lambda m: (m.id in leader_ids, rank.get(m.name, len(rank)), m.name))
    through = next(name for name in healthy if survey.reports[name].etcdctl)
    report = survey.reports[through]
    assert report.etcdctl is not None
    return DefragPlan(through, list(report.etcdctl), [m.name for m in ordered],
                      [m.client_urls[0] for m in ordered], min(survey.reports[n].quota_bytes for n in healthy))
