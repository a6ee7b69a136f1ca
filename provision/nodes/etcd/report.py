"""What a control plane says about its etcd (playbooks/library/cb_etcd_probe.py, under `cb_etcd`), validated,
and where etcd's files live on the nodes: decided here once and handed to every etcd role as `cb_etcd_layout`
(render/playbook_vars.py's etcd_probe_vars).

An EtcdSurvey is the probe of every control plane of one run: the reports of those that answered and why the
others did not. The judges (snapshot.py, restore.py, members.py) read surveys; nothing else asks etcd.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from provision.inputs.inventory import Cluster
from provision.inputs.versions import parse_version
from provision.nodes.documents import module_documents, validated
from provision.nodes.runner import PlaybookResult
from provision.render.node_paths import STATIC_POD_DIR

# The module's SCHEMA, bumped together with it; and the key its document comes back under.
ETCD_REPORT_SCHEMA = 1
ETCD_REPORT_KEY = "cb_etcd"
# etcd's --quota-backend-bytes when none is set.
DEFAULT_QUOTA_BYTES = 2 << 30


@dataclass(frozen=True)
class NodeLayout:
    """Where etcd's files are on a control plane (kubeadm's for the static pod; ours for the rest)."""

    manifests_dir: str = STATIC_POD_DIR
    # A restore moves the control plane's static pod manifests here while it works (the kubelet stops the pods),
    # and back when it is done; a restore killed midway finds them here and carries on.
    stopped_dir: str = "/etc/kubernetes/cb-stopped-manifests"
    # etcd run by systemd (Debian's etcd-server, kubespray's host etcd, the lab).
    unit: str = "etcd.service"
    # etcdctl and etcdutl copied out of the static pod's image, one directory per version.
    tools_dir: str = "/usr/local/lib/cluster-bootstrap/etcd"
    # The node's own snapshots (the timer's, and a copy of each `bootstrap etcd snapshot`), the last N kept.
    snapshot_dir: str = "/var/lib/etcd-snapshots"
    # Where a restore stages the snapshot on each member.
    staging_dir: str = "/var/lib/etcd-snapshots/restore"
    # kubeadm's certificates: copied off with each snapshot sent to a store, put back by a restore --from one.
    pki_dir: str = "/etc/kubernetes/pki"
    # The snapshot timer: its units, the script its service runs (module_utils/cb_etcd.py) and its configuration.
    timer_unit: str = "cb-etcd-snapshot.timer"
    service_unit: str = "cb-etcd-snapshot.service"
    script: str = "/usr/local/lib/cluster-bootstrap/cb_etcd.py"
    timer_config: str = "/etc/cluster-bootstrap/etcd-snapshot.json"
    # A systemd member that rejoins reads its join (initial cluster, state existing) from this file, which a
    # drop-in adds after the unit's own EnvironmentFile.
    join_env: str = "/etc/cluster-bootstrap/etcd-join.env"
    join_dropin: str = "/etc/systemd/system/etcd.service.d/50-cluster-bootstrap-join.conf"

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


LAYOUT = NodeLayout()


class _Document(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Member(_Document):
    id: str  # hex, as `member remove` takes it
    name: str  # "" for a member added but not started
    peer_urls: list[str]
    client_urls: list[str]
    learner: bool


class Alarm(_Document):
    member_id: str  # hex
    alarm: str  # NOSPACE, CORRUPT


class Health(_Document):
    healthy: bool
    error: str | None = None


class MemberState(_Document):
    """What the local member answered; a question that failed is None (its error in `errors`)."""

    status: dict[str, Any] | None = None  # `endpoint status -w json`'s Status
    members: list[Member] | None = None
    health: Health | None = None
    keys: int | None = None  # keys in its own store (serializable read)
    nodes: list[str] | None = None  # the Kubernetes Node objects in its store, when asked (after a restore)
    alarms: list[Alarm] | None = None  # the cluster's active alarms (`alarm list`)
    cluster_id: str | None = None
    member_id: str | None = None
    errors: list[str] = Field(default_factory=list)

    @property
    def revision(self) -> int | None:
        header = (self.status or {}).get("header") or {}
        return int(header["revision"]) if "revision" in header else None

    @property
    def db_size(self) -> int | None:
        size = (self.status or {}).get("dbSize")
        return int(size) if size is not None else None

    @property
    def db_size_in_use(self) -> int | None:
        size = (self.status or {}).get("dbSizeInUse")
        return int(size) if size is not None else None

    @property
    def is_leader(self) -> bool:
        header = (self.status or {}).get("header") or {}
        leader = (self.status or {}).get("leader")
        return leader is not None and leader == header.get("member_id")

    @property
    def version(self) -> str | None:
        version = (self.status or {}).get("version")
        return str(version) if version else None

    @property
    def healthy(self) -> bool:
        return self.health is not None and self.health.healthy


class Tools(_Document):
    etcdctl: str | None
    etcdutl: str | None
    etcdctl_version: str | None
    etcdutl_version: str | None
    restore_bumps: bool  # etcdutl can --bump-revision --mark-compacted


class Client(_Document):
    endpoint: str
    cacert: str | None
    cert: str | None
    key: str | None


class DataDir(_Document):
    path: str | None
    exists: bool
    member: bool  # a member/ directory: etcd has data here
    uid: int | None
    gid: int | None
    db_bytes: int | None


class FreeBytes(_Document):
    data_dir: int | None
    snapshot_dir: int | None


class Manifests(_Document):
    active: list[str]  # control-plane static pods in the manifests directory
    stopped: list[str]  # and those a restore moved aside


class Timer(_Document):
    installed: bool
    enabled: bool
    active: bool
    last_result: str | None
    last_run: str | None


class UserIds(_Document):
    uid: int
    gid: int


class EtcdReport(_Document):
    schema_version: Literal[1] = Field(alias="schema")
    python: str  # the interpreter the module ran under (the timer's service runs its script with it)
    kind: Literal["static_pod", "systemd", "none"]
    source: str | None  # the manifest or the unit file
    flags: dict[str, str]  # etcd's configuration, flag -> value
    image: str | None
    version: str | None  # of the image (static pod) or the etcd binary (systemd)
    running: bool
    user: str
    user_ids: UserIds | None
    errors: list[str]
    manifests: Manifests
    tools: Tools
    client: Client | None
    etcdctl: list[str] | None  # etcdctl with the local endpoint and the member's credentials
    member: MemberState | None  # None: not asked (etcd stopped, or no etcdctl)
    ca_sha256: str | None
    data_dir: DataDir
    backups: list[str]  # data directories a restore or a replace kept aside
    free_bytes: FreeBytes
    snapshots: list[dict[str, Any]]  # the node's snapshot records (snapshot.SnapshotRecord reads them)
    timer: Timer

    @property
    def name(self) -> str | None:
        return self.flags.get("name")

    @property
    def peer_urls(self) -> str | None:
        return self.flags.get("initial-advertise-peer-urls")

    @property
    def healthy(self) -> bool:
        return self.running and self.member is not None and self.member.healthy

    @property
    def server_version(self) -> tuple[int, ...]:
        """What the member runs: the version it answers with, else its image's or binary's."""
        member = self.member.version if self.member else None
        return parse_version(member or self.version or self.tools.etcdctl_version or "")

    def status_argv(self) -> list[str] | None:
        """How this node reads a snapshot's status: etcdutl, or etcdctl before 3.6 (3.6 removed it there)."""
        if self.tools.etcdutl:
            return [self.tools.etcdutl, "snapshot", "status"]
        if self.tools.etcdctl and parse_version(self.tools.etcdctl_version or "") < (3, 6):
            return [self.tools.etcdctl, "snapshot", "status"]
        return None

    def restore_argv(self) -> list[str] | None:
        """How this node restores a snapshot: etcdutl, or etcdctl before 3.6."""
        if self.tools.etcdutl:
            return [self.tools.etcdutl, "snapshot", "restore"]
        if self.tools.etcdctl and parse_version(self.tools.etcdctl_version or "") < (3, 6):
            return [self.tools.etcdctl, "snapshot", "restore"]
        return None

    @property
    def quota_bytes(self) -> int:
        """The member's --quota-backend-bytes, or etcd's default (2 GiB: etcd's docs, "Space quota")."""
        value = self.flags.get("quota-backend-bytes", "")
        return int(value) if value.isascii() and value.isdigit() and int(value) > 0 else DEFAULT_QUOTA_BYTES

    def how_stopped(self) -> str:
        return "its static pod's manifest moved aside" if self.kind == "static_pod" else f"`systemctl stop {LAYOUT.unit}`"


@dataclass
class EtcdSurvey:
    """Every control plane's etcd, as one run of the probe found it (node names, inventory order)."""

    reports: dict[str, EtcdReport] = field(default_factory=dict)
    # Control planes that did not answer: node name -> why (unreachable over SSH, the probe failed).
    unreachable: dict[str, str] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def healthy(self, exclude: tuple[str, ...] = ()) -> list[str]:
        return [name for name in self.order if name in self.reports and name not in exclude
                and self.reports[name].healthy]

    def members(self) -> list[Member]:
        """etcd's members as the first healthy member lists them, else as any member that answers lists them (a
        member without quorum still lists them); [] when none does."""
        answering = [*self.healthy(), *self.answering()]
        for name in answering:
            member = self.reports[name].member
            if member is not None and member.members is not None:
                return list(member.members)
        return []

    def answering(self, exclude: tuple[str, ...] = ()) -> list[str]:
        """Members whose etcd runs and answers for itself (its status), healthy or not: without a quorum no member
        is healthy, and these are the ones left."""
        found = []
        for name in self.order:
            report = self.reports.get(name)
            if report is not None and name not in exclude and report.running and report.member is not None \
                    and report.member.status is not None:
                found.append(name)
        return found

    def kind(self) -> Literal["static_pod", "systemd", "none"]:
        """How etcd runs in this cluster: as the reports that found one say (static pods win a disagreement)."""
        kinds = {r.kind for r in self.reports.values()}
        return "static_pod" if "static_pod" in kinds else "systemd" if "systemd" in kinds else "none"


def parse_report(host: str, document: Any) -> EtcdReport:
    return validated(EtcdReport, document, phase="etcd", who=host, what="its etcd")


def read_survey(playbook: PlaybookResult, cluster: Cluster) -> EtcdSurvey:
    """The probe's run read into a survey: a report from each control plane that sent one, and for the others
    (unreachable, or failed) their first cause."""
    sent_by = module_documents(playbook.run_dir, ETCD_REPORT_KEY)
    failed = playbook.failed_hosts
    survey = EtcdSurvey(order=[n.name for n in cluster.control_planes])
    for node in cluster.control_planes:
        if node.host in failed:
            # The cause alone: the judges put the node's name before it.
            survey.unreachable[node.name] = failed[node.host].describe().removeprefix(f"{node.host}: ")
        elif node.host in sent_by:
            survey.reports[node.name] = parse_report(node.host, sent_by[node.host])
        else:
            survey.unreachable[node.name] = "sent no report of its etcd"
    return survey


def survey_summary(survey: EtcdSurvey) -> str:
    """One line: how etcd runs, and each control plane's state."""
    states = []
    for name in survey.order:
        report = survey.reports.get(name)
        if report is None:
            states.append(f"{name} unreachable")
        elif report.healthy:
            states.append(f"{name} healthy")
        elif report.kind == "none":
            states.append(f"{name} has no etcd")
        else:
            states.append(f"{name} {'unhealthy' if report.running else 'stopped'}")
    versions = sorted({".".join(map(str, r.server_version)) for r in survey.reports.values() if r.server_version})
    kind = {"static_pod": "static pods", "systemd": "systemd", "none": "no etcd found"}[survey.kind()]
    return f"etcd {'/'.join(versions) or '?'} ({kind}): {', '.join(states)}"
