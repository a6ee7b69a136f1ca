"""The doctor on etcd: every control plane's etcd read with the etcd commands' own probe (module_utils/cb_etcd.py's
`probe`, the cb_etcd_probe module's code, run over SSH with the node's python3), then judged from what etcd itself
says: its members against the control planes (a stale member, a control plane without one or with two), its
alarms (NOSPACE: etcd takes only reads and deletes, so the API cannot write), and each member's database against
its quota. A plug-in of the doctor: `read_etcd` gives a survey, `judge_etcd` findings; nothing here writes.
"""
from __future__ import annotations

import json
import shlex
from collections.abc import Callable

from provision.errors import BootstrapError
from provision.findings import Finding, Status
from provision.inputs.inventory import Cluster, Node
from provision.inputs.settings import Settings
from provision.nodes.etcd.members import members_of
from provision.nodes.etcd.report import ETCD_REPORT_KEY, LAYOUT, EtcdReport, EtcdSurvey, parse_report
from provision.nodes.probe import NodeProbe, Reading, probe_nodes
from provision.nodes.ssh import Shell
from provision.resources import PLAYBOOKS_DIR

PROBE_TIMEOUT_S = 60
# Where the doctor speaks, as a share of the member's quota.
QUOTA_WARN, QUOTA_FAIL = 0.80, 0.95
# A database this much larger than what it holds (and at least this large) is worth a defragmentation.
DEFRAG_WORTH_BYTES = 64 << 20
PROBE_SOURCE = PLAYBOOKS_DIR / "module_utils" / "cb_etcd.py"
END_MARK = "CB_ETCD_PROBE_SOURCE"


def probe_command() -> str:
    """The probe as one shell command: cb_etcd.py fed to the node's python3 on stdin, the layout as its argument."""
    source = PROBE_SOURCE.read_text()
    if f"\n{END_MARK}\n" in source:
        raise BootstrapError(f"internal: {PROBE_SOURCE} holds the here-document's end mark")
    params = {"manifests_dir": LAYOUT.manifests_dir, "stopped_dir": LAYOUT.stopped_dir, "unit": LAYOUT.unit,
              "tools_dir": LAYOUT.tools_dir, "snapshot_dir": LAYOUT.snapshot_dir, "timer_unit": LAYOUT.timer_unit,
              "ask": True, "nodes": False}
    return f"python3 - probe {shlex.quote(json.dumps(params))} <<'{END_MARK}'\n{source}\n{END_MARK}\n"


def parse_probe(reading: Reading) -> EtcdReport:
    """The probe's one line of JSON, validated as the etcd commands validate their reports; ValueError (the
    runner's finding) where it is not one."""
    if not reading.result.ok:
        raise ValueError(f"the probe failed: {reading.result.first_error_line()}")
    try:
        document = json.loads(reading.stdout.strip().splitlines()[-1])[ETCD_REPORT_KEY]
    except (ValueError, IndexError, KeyError, TypeError):
        raise ValueError("the probe wrote no report") from None
    try:
        return parse_report(reading.node.name, document)
    except BootstrapError as exc:
        raise ValueError(str(exc)) from None


def etcd_probe() -> NodeProbe[EtcdReport]:
    """The etcd commands' own probe as a plug-in of the one probe runner (nodes/probe.py)."""
    command = probe_command()
    return NodeProbe("etcd_probe", lambda node: command, parse_probe, timeout_s=PROBE_TIMEOUT_S,
                     unprobed="etcd not checked: ")


def read_etcd(cluster: Cluster, settings: Settings, become_password: str | None = None,
              shell_for: Callable[[Node], Shell] | None = None) -> EtcdSurvey:
    """Every control plane probed at once, through the one probe runner."""
    probed = probe_nodes(cluster.control_planes, etcd_probe(), settings.ssh, become_password=become_password,
                         shell_for=shell_for)
    survey = EtcdSurvey(order=[n.name for n in cluster.control_planes])
    for name, outcome in probed.items():
        if outcome.value is not None:
            survey.reports[name] = outcome.value
        else:
            survey.unreachable[name] = "; ".join(f.detail for f in outcome.problems) or "no report"
    return survey


def _finding(check: str, subject: str, status: Status, detail: str, fix: str = "") -> Finding:
    return Finding(check, subject, status, detail, fix if status in ("warn", "fail") else "")


def _etcdctl(survey: EtcdSurvey) -> str:
    """etcdctl as a healthy member runs it (its endpoint and certificates), for the fixes."""
    for name in [*survey.healthy(), *survey.answering()]:
        argv = survey.reports[name].etcdctl
        if argv:
            return f"on {name}: `{shlex.join(argv)}"
    return "on a control plane: `etcdctl"


def check_members(survey: EtcdSurvey, cluster: Cluster) -> list[Finding]:
    """etcd's members as etcd lists them, against the control planes: one each, none other."""
    kinds = {r.kind for r in survey.reports.values()}
    if survey.reports and kinds == {"none"}:
        return [_finding("etcd_members", "cluster", "skip", "not checked: no etcd on the control planes (external "
                         "etcd?)")]
    members = survey.members()
    if not members:
        why = "; ".join(f"{n}: {w}" for n, w in survey.unreachable.items()) or "no member lists them"
        return [_finding("etcd_members", "cluster", "fail", f"no etcd member lists the members ({why})",
                         "bring etcd back on the control planes (`journalctl -u etcd` or `crictl logs` of etcd); "
                         "without a quorum follow docs/etcd.md, \"Quorum lost\"")]
    findings = []
    claimed: set[str] = set()
    for node in cluster.control_planes:
        mine = members_of(node, members)
        claimed.update(m.id for m in mine)
        if not mine:
            findings.append(_finding("etcd_members", node.name, "fail", f"no etcd member for {node.name} (etcd "
                                     f"lists {', '.join(m.name or m.id for m in members)}): its API server has no "
                                     "etcd of its own", f"`bootstrap node replace {node.name}`"))
        elif len(mine) > 1:
            ids = ", ".join(f"{m.id} ({m.name or 'never started'})" for m in mine)
            findings.append(_finding("etcd_members", node.name, "warn", f"{len(mine)} etcd members for {node.name}: "
                                     f"{ids}: each counts in the quorum", f"{_etcdctl(survey)} member remove ID` "
                                     "for the one that never started, or `bootstrap node replace "
                                     f"{node.name}`"))
    stale = [m for m in members if m.id not in claimed]
    for member in stale:
        what = (f"etcd member {member.id} was added but never started (peer {', '.join(member.peer_urls)})"
                if not member.name else f"etcd member {member.name} ({member.id}, peer "
                f"{', '.join(member.peer_urls)}) is no control plane of the inventory")
        findings.append(_finding("etcd_members", "cluster", "warn", f"{what}: it counts in the quorum, so fewer "
                                 "control planes may be lost", f"{_etcdctl(survey)} member remove {member.id}`"))
    if not findings:
        findings.append(_finding("etcd_members", "cluster", "ok", f"{len(members)} members, one per control plane"))
    return findings


def check_alarms(survey: EtcdSurvey) -> list[Finding]:
    """The cluster's alarms, as any member that answers lists them."""
    for name in [*survey.healthy(), *survey.answering()]:
        member = survey.reports[name].member
        if member is None or member.alarms is None:
            continue
        ids = {m.id: m.name or m.id for m in member.members or []}
        findings = []
        for alarm in member.alarms:
            who = ids.get(alarm.member_id, alarm.member_id)
            if alarm.alarm == "NOSPACE":
                findings.append(_finding("etcd_alarm", "cluster", "fail", f"etcd's NOSPACE alarm is raised (member "
                                         f"{who}): its database reached its quota, etcd takes only reads and deletes "
                                         "and the API cannot write", "`bootstrap etcd defrag` (each member in turn, "
                                         "the leader last; it disarms the alarm once every database is under its "
                                         "quota), or raise --quota-backend-bytes"))
            else:
                findings.append(_finding("etcd_alarm", "cluster", "fail", f"etcd's {alarm.alarm} alarm is raised "
                                         f"(member {who})", f"the member's data is damaged: `bootstrap node replace "
                                         f"{who}` (docs/etcd.md)"))
        return findings or [_finding("etcd_alarm", "cluster", "ok", "no alarm")]
    return [_finding("etcd_alarm", "cluster", "skip", "not checked: no etcd member answered")]


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.0f} MiB"


def check_db_size(name: str, report: EtcdReport) -> Finding:
    """A member's database against its quota; room a defragmentation would give back."""
    member = report.member
    size = member.db_size if member is not None else None
    if size is None:
        return _finding("etcd_db", name, "skip", "not checked: the member did not answer")
    quota = report.quota_bytes
    in_use = member.db_size_in_use if member is not None else None
    spare = size - in_use if in_use is not None else 0
    share = size / quota
    detail = f"database {_mib(size)} of its {_mib(quota)} quota ({share:.0%})"
    if spare >= DEFRAG_WORTH_BYTES:
        detail += f", {_mib(spare)} of it free inside"
    fix = (f"`bootstrap etcd defrag` gives back the {_mib(spare)} free inside; " if spare >= DEFRAG_WORTH_BYTES
           else "") + "delete what fills it (events, old objects), or raise --quota-backend-bytes"
    if share >= QUOTA_FAIL:
        return _finding("etcd_db", name, "fail", f"{detail}: at the quota etcd raises NOSPACE and stops writes", fix)
    if share >= QUOTA_WARN:
        return _finding("etcd_db", name, "warn", detail, fix)
    return _finding("etcd_db", name, "ok", detail)


def judge_etcd(survey: EtcdSurvey, cluster: Cluster) -> list[Finding]:
    if not survey.reports:
        # Each control plane's own finding says why it was not reached.
        return [_finding("etcd", "cluster", "skip", "not checked: no control plane answered")]
    findings = [*check_members(survey, cluster), *check_alarms(survey)]
    for name in survey.order:
        report = survey.reports.get(name)
        if report is not None and report.kind != "none":
            findings.append(check_db_size(name, report))
    return findings


def run_etcd_checks(cluster: Cluster, settings: Settings, become_password: str | None = None) -> list[Finding]:
    """The doctor's etcd checks: read, then judged."""
    return judge_etcd(read_etcd(cluster, settings, become_password), cluster)
