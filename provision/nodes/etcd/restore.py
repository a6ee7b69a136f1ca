"""Restoring an etcd snapshot: the refusals a restore makes before it changes anything, the plan each member
follows, and the judge of the restored cluster. Pure: a snapshot's record and the probe's survey in, named
problems or a plan out (provision/phases/etcd_restore.py runs it).

What a restore does (docs/etcd.md): the API servers and etcd stop on every control plane (kubeadm's static pods
moved out of the manifests directory; a systemd etcd stopped); on each member the snapshot is restored into a
new data directory with the member's own name and peer URL, every member listed, and a new cluster token, and
put in place of the old one, which is kept aside as <data dir>.cb-before-<restore id>; etcd starts, the members
find each other, and the restored store must hold the snapshot's keys on every member before the API servers
come back. Where etcdutl can, the revision is raised by a billion and marked compacted, as the Kubernetes and
etcd docs advise, so that no client's watch or cache mistakes the restored past for the present.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from provision.nodes.etcd.report import LAYOUT, EtcdReport, EtcdSurvey
from provision.nodes.etcd.results import StagedCopy
from provision.nodes.etcd.snapshot import LocalSnapshot, identity_problems, space_problem

# The revision jump (etcdutl snapshot restore --bump-revision, with --mark-compacted): Kubernetes' and etcd's own
# advice for restores under Kubernetes, larger than any number of writes a cluster makes between snapshots.
BUMP_REVISION = 1_000_000_000
# Room the restored data directory needs beyond the database (the first WAL segment is 64 MiB, preallocated).
WAL_MARGIN = 64 << 20


@dataclass(frozen=True)
class MemberPlan:
    """What one member does in the restore."""

    node: str  # node name
    name: str  # its etcd member name
    peer_urls: str
    data_dir: str
    restore_argv: list[str]
    uid: int
    gid: int
    kind: str  # static_pod or systemd


@dataclass(frozen=True)
class RestorePlan:
    snapshot: LocalSnapshot
    restore_id: str
    members: list[MemberPlan]
    # Control planes whose etcd and API server stop although they are not restored (--survivors left them out:
    # they rejoin with `bootstrap node replace`).
    stopped_only: list[str] = field(default_factory=list)
    bump_revision: int = 0

    @property
    def token(self) -> str:
        return f"cb-restore-{self.restore_id}"

    @property
    def initial_cluster(self) -> str:
        return ",".join(f"{m.name}={m.peer_urls}" for m in self.members)

    @property
    def staged(self) -> str:
        """Where the snapshot is copied on each member."""
        return f"{LAYOUT.staging_dir}/{self.snapshot.record.name}"

    @property
    def kind(self) -> str:
        return self.members[0].kind

    @property
    def nodes(self) -> list[str]:
        return [m.node for m in self.members]

    @property
    def expected_revision(self) -> int:
        return self.snapshot.revision + self.bump_revision

    def member_arguments(self) -> dict[str, dict[str, object]]:
        """cb_etcd_restore's arguments for each member, by node name."""
        return {m.node: {"restore_argv": m.restore_argv, "snapshot": self.staged, "sha256": self.snapshot.record.sha256,
                         "data_dir": m.data_dir,
                         "name": m.name, "initial_cluster": self.initial_cluster, "peer_urls": m.peer_urls,
                         "token": self.token, "restore_id": self.restore_id, "bump_revision": self.bump_revision,
                         "uid": m.uid, "gid": m.gid} for m in self.members}


def new_restore_id(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")


def restore_id_for(unfinished: Mapping[str, str] | None, snapshot: LocalSnapshot) -> str | None:
    """The id a restore of `snapshot` carries on under: the unfinished restore's (recorded in the cluster's state)
    when it restored this very snapshot (the same SHA-256), else None: a new restore. A record of another snapshot
    (or one from before records named their snapshot's SHA-256) is not carried on: what that restore left on the
    members is moved aside like any data in place."""
    if unfinished and unfinished.get("sha256") == snapshot.record.sha256 and unfinished.get("id"):
        return unfinished["id"]
    return None


def restore_refusals(snapshot: LocalSnapshot, survey: EtcdSurvey, targets: list[str]) -> list[str]:
    """Why this snapshot cannot be restored onto these control planes now, each with its fix; empty: it can.
    Checked before anything changes: every target answers and runs etcd of one kind with the configuration a
    restore needs and a tool to restore with; the snapshot is this cluster's; there is room for it."""
    record = snapshot.record
    problems = []
    unreachable = [name for name in targets if name not in survey.reports]
    for name in unreachable:
        left = [n for n in targets if n not in unreachable]
        rest = (f"or restore onto the ones left with --survivors {','.join(left)} (the others then rejoin with "
                "`bootstrap node replace NAME`)") if left else "then run the restore again"
        problems.append(f"{name} does not answer ({survey.unreachable.get(name, 'no report')}): a restore rewrites "
                        f"every member; bring it back, {rest}")
    reports = {name: survey.reports[name] for name in targets if name in survey.reports}
    for name, report in reports.items():
        problems += [f"{name}: {p}" for p in _member_problems(report)]
        needed_staging = space_problem(f"{name}:{LAYOUT.staging_dir}", report.free_bytes.snapshot_dir,
                                       record.size + WAL_MARGIN)
        data_dir = report.data_dir.path or "etcd's data directory"
        data_need = record.total_size + WAL_MARGIN
        if report.free_bytes.data_dir is not None and report.free_bytes.data_dir == report.free_bytes.snapshot_dir:
            data_need += record.size  # one file system holds both the staged copy and the restored data
        needed_data = space_problem(f"{name}:{data_dir}", report.free_bytes.data_dir, data_need)
        problems += [p for p in (needed_staging, needed_data) if p]
    kinds = {report.kind for report in reports.values() if report.kind != "none"}
    if len(kinds) > 1:
        each = ", ".join(f"{n}: {r.kind}" for n, r in reports.items())
        problems.append(f"etcd runs as a static pod on some control planes and under systemd on others ({each}): "
                        "make them alike first")
    cas = {report.ca_sha256 for report in reports.values() if report.ca_sha256}
    if len(cas) > 1:
        problems.append("the control planes trust different etcd CAs (/etc/kubernetes/pki/etcd/ca.crt differs): "
                        "they are not one cluster; fix the inventory")
    problems += [f"{snapshot.path.name}: {p}: restore a snapshot of this cluster (`bootstrap etcd snapshots`)"
                 for p in identity_problems(record, cas)]
    return problems


def _member_problems(report: EtcdReport) -> list[str]:
    if report.kind == "none":
        return ["no etcd found there (no static pod manifest, no etcd.service): nothing to restore"]
    missing = [flag for flag in ("name", "data-dir", "initial-advertise-peer-urls") if not report.flags.get(flag)]
    problems = [f"etcd's configuration ({report.source}) has no --{flag}" for flag in missing]
    if report.flags.get("wal-dir"):
        problems.append(f"etcd keeps its WAL apart (--wal-dir {report.flags['wal-dir']}), which the restore does "
                        "not handle: restore by hand (docs/etcd.md)")
    if report.restore_argv() is None:
        problems.append(f"no etcdutl to restore with (etcd {report.version}: etcdctl lost `snapshot restore` in "
                        f"3.6); put etcdutl {report.version} on PATH there")
    return problems


def plan_restore(snapshot: LocalSnapshot, survey: EtcdSurvey, targets: list[str], restore_id: str) -> RestorePlan:
    """The plan for a restore restore_refusals let through."""
    members = []
    for name in targets:
        report = survey.reports[name]
        argv = report.restore_argv()
        assert argv is not None and report.data_dir.path is not None
        if report.data_dir.exists and report.data_dir.uid is not None and report.data_dir.gid is not None:
            uid, gid = report.data_dir.uid, report.data_dir.gid
        elif report.user_ids is not None:
            uid, gid = report.user_ids.uid, report.user_ids.gid
        else:
            uid, gid = 0, 0
        members.append(MemberPlan(node=name, name=str(report.name), peer_urls=str(report.peer_urls),
                                  data_dir=report.data_dir.path, restore_argv=argv, uid=uid, gid=gid,
                                  kind=report.kind))
    # One revision on every member: bump only where every member's etcdutl can.
    bumps = all(survey.reports[name].tools.restore_bumps and survey.reports[name].tools.etcdutl for name in targets)
    stopped_only = [name for name in survey.order if name not in targets and name in survey.reports
                    and survey.reports[name].kind != "none"]
    return RestorePlan(snapshot, restore_id, members, stopped_only, BUMP_REVISION if bumps else 0)


def stopped_problems(plan: RestorePlan, survey: EtcdSurvey) -> list[str]:
    """After the stop: etcd runs on none of the control planes the plan stops."""
    problems = []
    for name in [*plan.nodes, *plan.stopped_only]:
        report = survey.reports.get(name)
        if report is None:
            problems.append(f"{name} did not answer after its etcd was stopped ({survey.unreachable.get(name)})")
        elif report.running:
            problems.append(f"etcd still runs on {name} after {report.how_stopped()}: see `crictl ps -a --name etcd` "
                            "and the kubelet's log there, or `systemctl status etcd`")
    return problems


def restored_problems(plan: RestorePlan, survey: EtcdSurvey) -> list[str]:
    """After the start: every member healthy, the members exactly the plan's, one cluster, and on every member the
    snapshot's keys at (at least) its revision."""
    expected = sorted(m.name for m in plan.members)
    record = plan.snapshot.record
    problems, clusters = [], set()
    for member in plan.members:
        report = survey.reports.get(member.node)
        if report is None or report.member is None:
            problems.append(f"{member.node} did not answer after the restore "
                            f"({survey.unreachable.get(member.node, 'no member state')})")
            continue
        state = report.member
        if not state.healthy:
            problems.append(f"etcd on {member.node} is not healthy after the restore "
                            f"({state.health.error if state.health else '; '.join(state.errors)})")
            continue
        names = sorted(m.name for m in state.members or [])
        if names != expected:
            problems.append(f"etcd on {member.node} lists the members {', '.join(names) or 'none'}, not "
                            f"{', '.join(expected)}")
        clusters.add(state.cluster_id)
        if record.live_keys is not None and state.keys != record.live_keys:
            problems.append(f"etcd on {member.node} holds {state.keys} keys, the snapshot {record.live_keys}")
        if state.revision is not None and state.revision < plan.expected_revision:
            problems.append(f"etcd on {member.node} is at revision {state.revision}, before the snapshot's "
                            f"{plan.expected_revision}")
    if len(clusters) > 1:
        problems.append(f"the members formed {len(clusters)} clusters, not one")
    return problems


def api_problems(namespaces: Iterable[str], served: Iterable[str], held: list[str] | None,
                 inventory: Iterable[str]) -> tuple[list[str], list[str]]:
    """After the API servers are back: what they fail to serve of what the restored store holds (the namespace
    kube-system, every Node the snapshot holds), and the inventory's nodes the snapshot does not hold (they joined
    after it; their kubelet registers them again when restarted). `held` None: the store's Nodes were not read,
    and only kube-system is asked for."""
    problems = []
    if "kube-system" not in set(namespaces):
        problems.append("does not serve the namespace kube-system")
    if held is None:
        return problems, []
    serving = set(served)
    missing = [name for name in held if name not in serving]
    if missing:
        problems.append(f"does not serve the Nodes the snapshot holds: {', '.join(missing)}")
    return problems, [name for name in inventory if name not in held]


def staging_problems(plan: RestorePlan, readings: Mapping[str, StagedCopy | None],
                     causes: Mapping[str, str]) -> list[str]:
    """Each member's reading of its staged copy (cb_etcd_snapshot_status, by node name) against the snapshot's
    record: the file the plan staged, its size and SHA-256, and what `snapshot status` read from it (revision, keys,
    hash, database size). A member without a reading is named, with its cause where the playbook gave one."""
    record = plan.snapshot.record
    expected = {"path": plan.staged, "size": record.size, "sha256": record.sha256, "revision": record.revision,
                "keys": record.total_key, "hash": record.hash, "database size": record.total_size}
    problems = []
    for name in plan.nodes:
        copy = readings.get(name)
        if copy is None:
            problems.append(f"{name} sent no reading of its copy ({causes.get(name, 'no report')})")
            continue
        read = {"path": copy.path, "size": copy.size, "sha256": copy.sha256, "revision": copy.status.revision,
                "keys": copy.status.total_key, "hash": copy.status.hash, "database size": copy.status.total_size}
        differ = [f"{what} {read[what]!r}, the record's {expected[what]!r}" for what in expected
                  if read[what] != expected[what]]
        if differ:
            problems.append(f"the copy on {name} is not the snapshot its record describes ({'; '.join(differ)})")
    return problems
