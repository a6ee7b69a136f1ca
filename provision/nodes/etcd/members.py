"""Replacing a control plane's etcd member (`bootstrap node replace NAME`): which member is the node's, whether
etcd can still change its membership (a quorum of its voting members answers), which member does the work, and
the plan and the judge of a member rejoining with an empty data directory. Pure: the probe's survey in, named
problems or plans out (provision/phases/etcd_member_remove.py and etcd_member_join.py run them).

A member is removed through a healthy one, so it can be removed while its machine is dead or unreachable (the
case kubespray's recover-control-plane cannot handle). With quorum lost (a majority gone), membership cannot
change: the way back is a restore onto the ones left (`bootstrap etcd restore SNAPSHOT --survivors ...`), then a
replace of each of the others.
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from provision.inputs.inventory import Node
from provision.nodes.etcd.report import LAYOUT, EtcdReport, EtcdSurvey, Member

# kubeadm's peer port: a member added for a node without its own configuration to read listens there.
PEER_PORT = 2380


def members_of(node: Node, members: list[Member]) -> list[Member]:
    """The node's members: named after it, or not started yet (no name) with a peer URL on its address."""
    addresses = {a for a in (node.address, node.cluster_address) if a}
    return [m for m in members if m.name == node.name
            or (not m.name and any(urlsplit(u).hostname in addresses for u in m.peer_urls))]


def quorum_problem(survey: EtcdSurvey, leaving: str) -> str | None:
    """Why etcd cannot change its membership now (None: it can): a majority of its voting members must answer
    healthy. Without one, the members that still answer for themselves are the ones to restore onto."""
    members = survey.members()
    left = survey.answering(exclude=(leaving,))
    way_back = (f"restore a snapshot onto the ones left (`bootstrap etcd restore SNAPSHOT --survivors "
                f"{','.join(left) or 'NAME,...'}`, docs/etcd.md), then replace the others")
    if not members:
        return (f"etcd has no quorum: no member can list its members (answering for themselves: "
                f"{', '.join(left) or 'none'}), so etcd cannot change them; {way_back}")
    voting = [m for m in members if not m.learner]
    healthy = set(survey.healthy(exclude=(leaving,)))
    up = [m.name for m in voting if m.name in healthy]
    needed = len(voting) // 2 + 1
    if len(up) >= needed:
        return None
    answering = [m.name for m in voting if m.name in left]
    return (f"etcd has lost its quorum: {len(answering)} of its {len(voting)} voting members answer "
            f"({', '.join(answering) or 'none'}), {len(up)} healthy, and {needed} are needed to change its members: "
            f"{way_back}")


def replace_problems(survey: EtcdSurvey, leaving: str, *, first: bool, endpoint: str) -> list[str]:
    """Why `node replace` cannot take `leaving` out and join it again (empty: it can), judged before the drain.

    The first control plane is replaced like the others where etcd runs under systemd (etcd's own join), and under
    kubeadm where the control-plane endpoint is a VIP: joins are minted on the next control plane and every node
    reaches the API through the VIP. Without a VIP the cluster reaches the API at the first control plane's own
    address (kubeadm's controlPlaneEndpoint and kube-public/cluster-info name it), which is gone while it is
    rebuilt; kubespray's way applies (docs/etcd.md)."""
    problems = []
    quorum = quorum_problem(survey, leaving)
    if quorum:
        problems.append(quorum)
    elif helper(survey, leaving) is None:
        problems.append("no other etcd member answers healthy to remove it through: bring one back first")
    if first and survey.kind() == "static_pod" and endpoint != "vip":
        problems.append(f"{leaving} is the first control plane and the API is reached at its own address (endpoint "
                        f"{endpoint}): list another control plane first in the inventory and run `bootstrap up "
                        f"--only control_plane`, then replace {leaving} (docs/etcd.md)")
    return problems


def helper(survey: EtcdSurvey, leaving: str) -> str | None:
    """The healthy member, other than the one leaving, through which the membership changes (inventory order)."""
    return next((name for name in survey.healthy(exclude=(leaving,)) if survey.reports[name].etcdctl), None)


@dataclass(frozen=True)
class JoinPlan:
    """A member rejoining with an empty data directory: added as a learner through `helper`, started with the
    current members and `existing` state, promoted once it has caught up."""

    node: str
    helper: str
    name: str
    peer_urls: str
    initial_cluster: str
    data_dir: str
    uid: int
    gid: int
    # The member already added by an earlier run that did not finish (its id), else None: add one.
    existing_id: str | None
    helper_etcdctl: list[str]
    backup: str

    def as_dict(self, host: str, helper_host: str) -> dict[str, object]:
        return {"node": host, "helper": helper_host, "name": self.name, "peer_urls": self.peer_urls,
                "initial_cluster": self.initial_cluster, "data_dir": self.data_dir, "uid": self.uid, "gid": self.gid,
                "existing_id": self.existing_id, "helper_etcdctl": self.helper_etcdctl, "backup": self.backup,
                "join_env": (f"ETCD_INITIAL_CLUSTER={self.initial_cluster}\nETCD_INITIAL_CLUSTER_STATE=existing\n")}


def join_problems(node: Node, survey: EtcdSurvey, helper_name: str | None) -> list[str]:
    """Why `node` cannot rejoin etcd as a fresh member now (its machine must answer and run etcd under systemd;
    under kubeadm's static pods the join is kubeadm's)."""
    report = survey.reports.get(node.name)
    if report is None:
        return [f"{node.name} does not answer ({survey.unreachable.get(node.name, 'no report')}): bring the fresh "
                f"machine up at {node.address} (change ansible_host in the inventory if its address changed), then "
                f"run `bootstrap node replace {node.name}` again"]
    problems = []
    if report.kind != "systemd":
        problems.append(f"{node.name} runs no etcd.service to rejoin with ({report.kind}): install and configure etcd "
                        "there first")
    missing = [flag for flag in ("name", "data-dir", "initial-advertise-peer-urls") if not report.flags.get(flag)]
    problems += [f"{node.name}: etcd's configuration ({report.source}) has no --{flag}" for flag in missing]
    if helper_name is None:
        problems.append("no other etcd member answers healthy to add it through")
    return problems


def plan_join(node: Node, survey: EtcdSurvey, helper_name: str, join_id: str) -> JoinPlan:
    report: EtcdReport = survey.reports[node.name]
    helper_report = survey.reports[helper_name]
    members = survey.members()
    mine = members_of(node, members)
    peer_urls = str(report.peer_urls)
    others = [f"{m.name}={','.join(m.peer_urls)}" for m in members if m not in mine and m.name]
    data_dir = str(report.data_dir.path)
    if report.user_ids is not None:
        uid, gid = report.user_ids.uid, report.user_ids.gid
    else:
        uid, gid = 0, 0
    assert helper_report.etcdctl is not None
    return JoinPlan(node=node.name, helper=helper_name, name=str(report.name), peer_urls=peer_urls,
                    initial_cluster=",".join([*others, f"{report.name}={peer_urls}"]), data_dir=data_dir,
                    uid=uid, gid=gid, existing_id=mine[0].id if mine else None, helper_etcdctl=helper_report.etcdctl,
                    backup=f"{data_dir.rstrip('/')}.cb-replaced-{join_id}")


def joined_problems(plan: JoinPlan, survey: EtcdSurvey) -> list[str]:
    """After the join: the node a healthy voting member, and every member started and named."""
    report = survey.reports.get(plan.node)
    if report is None or report.member is None or not report.healthy:
        state = report.member if report else None
        error = state.health.error if state and state.health else survey.unreachable.get(plan.node, "no answer")
        return [f"etcd on {plan.node} is not healthy after it joined ({error}): see `journalctl -u "
                f"{LAYOUT.unit}` there"]
    members = report.member.members or []
    problems = []
    if any(m.learner for m in members if m.name == plan.name):
        problems.append(f"{plan.node} is still a learner (not promoted): run `bootstrap node replace {plan.node}` "
                        "again")
    unstarted = [m.id for m in members if not m.name]
    if unstarted:
        problems.append(f"etcd has members that never started ({', '.join(unstarted)})")
    return problems
