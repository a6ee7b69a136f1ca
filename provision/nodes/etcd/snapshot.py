"""etcd snapshots on this machine: the record each one carries, where they are kept, and the checks.

A snapshot is taken on a control plane (module_utils/cb_etcd.py: take_snapshot), where `snapshot status` reads
its revision, key count and hash, and a record is written beside it with those, the file's size and SHA-256, and
the cluster's identity (the SHA-256 of its etcd CA certificate, and etcd's cluster id). The file is copied here
as `<name>.db.part` and becomes `<name>.db`, with the record as `<name>.json`, only once its size and SHA-256 are
the record's and the integrity hash etcd appends to every snapshot it streams (the SHA-256 of the database, in
the last 32 bytes; etcdutl checks it on restore) matches: a copy cut short is never named as complete. The
last `etcd.snapshot_keep` are kept.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from provision.errors import BootstrapError, InputError
from provision.inputs.files import shown
from provision.inputs.inventory import Cluster
from provision.inputs.state import ETCD_SNAPSHOTS_DIRNAME, cluster_dir, private_dir
from provision.nodes.etcd.report import LAYOUT, EtcdSurvey

DB_SUFFIX = ".db"
RECORD_SUFFIX = ".json"
PART_SUFFIX = ".part"
# The integrity hash etcd appends to the snapshot it streams: a SHA-256 after a database whose size is a
# multiple of bbolt's minimum page size (etcdutl's own test: size % 512 == 32).
TRAILER_BYTES = 32
PAGE_MULTIPLE = 512
# A record's name becomes a file name here: nothing that could climb out of the directory.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.db", re.ASCII)
SHA256_RE = re.compile(r"[0-9a-f]{64}", re.ASCII)
# Room a snapshot needs beyond its database's size (the database grows while it streams; a margin for the rest).
SPACE_MARGIN = 64 << 20


# A record comes from disks and other machines: read bounded (a record is a few hundred bytes), every value typed.
MAX_RECORD_BYTES = 64 << 10
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", re.ASCII)
_HEX_ID = re.compile(r"[0-9a-f]{1,16}", re.ASCII)
_ETCD_VERSION = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}", re.ASCII)
_UINT64 = 1 << 64


def _shaped(pattern: re.Pattern[str], what: str) -> Any:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{shown(value[:80])} is not {what}")
        return value
    return AfterValidator(check)


RecordName = Annotated[str, _shaped(_NAME, "a node or member name")]
Count = Annotated[int, Field(ge=0, lt=_UINT64, strict=True)]


class SnapshotRecord(BaseModel):
    """What a snapshot's record (`<name>.json`) says about it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: Literal[1] = Field(alias="schema")
    name: str
    cluster: RecordName
    node: RecordName | None = None  # the control plane it was taken on
    member: RecordName | None  # the etcd member that served it
    members: list[RecordName] = Field(max_length=100)  # etcd's members then
    # The cluster's identity: its etcd CA certificate's SHA-256.
    ca_sha256: Annotated[str, _shaped(SHA256_RE, "a SHA-256")] | None
    etcd_cluster_id: Annotated[str, _shaped(_HEX_ID, "an etcd cluster id")] | None
    etcd_version: Annotated[str, _shaped(_ETCD_VERSION, "an etcd version")] | None
    taken_at: datetime
    # What `snapshot status` read from it on the node.
    revision: Count
    total_key: Count
    hash: Count
    total_size: Count
    # The file.
    size: Count
    sha256: str
    # Keys in the store at the snapshot's revision (None when the member had compacted past it already).
    live_keys: Count | None

    @field_validator("name")
    @classmethod
    def _file_name(cls, value: str) -> str:
        if not NAME_RE.fullmatch(value):
            raise ValueError(f"{shown(value)} is not a snapshot's file name")
        return value

    @field_validator("sha256")
    @classmethod
    def _sha256(cls, value: str) -> str:
        if not SHA256_RE.fullmatch(value):
            raise ValueError("not a SHA-256")
        return value


@dataclass(frozen=True)
class LocalSnapshot:
    """A snapshot on this machine, its record beside it."""

    path: Path
    record: SnapshotRecord

    @property
    def revision(self) -> int:
        return self.record.revision

    @property
    def keys(self) -> int:
        return self.record.total_key

    @property
    def hash(self) -> int:
        return self.record.hash

    def summary(self) -> dict[str, object]:
        """The facts a caller shows or hands on (the JSON output, the upgrade's note of its snapshot)."""
        return {"path": str(self.path), "name": self.record.name, "cluster": self.record.cluster,
                "taken_at": self.record.taken_at.isoformat(), "revision": self.revision, "keys": self.keys,
                "hash": self.hash, "size": self.record.size, "sha256": self.record.sha256,
                "member": self.record.member, "etcd_version": self.record.etcd_version}


@dataclass(frozen=True)
class FileFacts:
    size: int
    sha256: str
    # The last 32 bytes are the SHA-256 of the rest, after a database of whole 512-byte multiples.
    trailer_ok: bool


def cluster_name(cluster: Cluster) -> str:
    """What a snapshot's name starts with: the first control plane's name (as this machine's context is named)."""
    return cluster.control_plane.name


def default_directory(cluster: Cluster) -> Path:
    return cluster_dir(cluster, create=False) / ETCD_SNAPSHOTS_DIRNAME


def record_path(db: Path) -> Path:
    return db.with_name(db.name[:-len(DB_SUFFIX)] + RECORD_SUFFIX)


def file_facts(path: Path) -> FileFacts:
    """The file's size and SHA-256, and whether it ends with the integrity hash etcd appends, in one read."""
    whole, body = hashlib.sha256(), hashlib.sha256()
    held = b""  # the last 32 bytes read so far: not part of the body until more follows
    size = 0
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            size += len(block)
            whole.update(block)
            joined = held + block
            body.update(joined[:-TRAILER_BYTES])
            held = joined[-TRAILER_BYTES:]
    trailer_ok = size % PAGE_MULTIPLE == TRAILER_BYTES and body.digest() == held
    return FileFacts(size, whole.hexdigest(), trailer_ok)


def snapshot_problems(record: SnapshotRecord, facts: FileFacts) -> list[str]:
    """Why a snapshot file does not pass its check against its record (empty: it does)."""
    problems = []
    if facts.size != record.size:
        problems.append(f"it is {facts.size} bytes and its record says {record.size}: the copy is incomplete")
    elif facts.sha256 != record.sha256:
        problems.append("its SHA-256 is not its record's: the file changed after it was taken")
    if not facts.trailer_ok:
        problems.append("it does not end with the integrity hash etcd appends to a snapshot, or the hash does not "
                        "match: damaged, or not written by `etcdctl snapshot save`")
    if record.size != record.total_size + TRAILER_BYTES:
        problems.append(f"`snapshot status` read a {record.total_size}-byte database from a {record.size}-byte "
                        "file: the record does not describe this snapshot")
    return problems


def record_problem(error: Any) -> str:
    """pydantic's first complaint in the tool's words: where, and what is wrong (no pydantic internals or links)."""
    where = ".".join(str(part) for part in error.get("loc", ())) or "the record"
    message = str(error.get("msg", "not valid")).removeprefix("Value error, ")
    return f"{where}: {message}"[:200]


def parse_record(text: bytes, where: Path | str) -> SnapshotRecord:
    """A record's bytes, judged whole: InputError in one line for any structure that is not a record."""
    try:
        document = json.loads(text.decode("utf-8"))
    except (ValueError, RecursionError):
        raise InputError(f"{where}: not a snapshot record (not JSON text): take a new snapshot with `bootstrap etcd "
                         "snapshot`") from None
    if not isinstance(document, dict):
        raise InputError(f"{where}: not a snapshot record (not a JSON object): take a new snapshot with `bootstrap "
                         "etcd snapshot`")
    try:
        return SnapshotRecord.model_validate(document)
    except ValidationError as exc:
        raise InputError(f"{where}: not a snapshot record this version reads ({record_problem(exc.errors()[0])}): "
                         "take a new snapshot with `bootstrap etcd snapshot`") from None
    except RecursionError:
        raise InputError(f"{where}: not a snapshot record (nested too deep)") from None


def read_record(path: Path) -> SnapshotRecord:
    """The record beside a snapshot, read bounded; InputError naming the file and the fix when it is missing, too
    large, or not a record."""
    where = record_path(path)
    if where.is_symlink() or not where.is_file():
        raise InputError(f"{path}: no record beside it ({where.name}): restore takes snapshots `bootstrap etcd "
                         "snapshot` made, whose record names the cluster they came from; take one with it")
    with where.open("rb") as handle:
        text = handle.read(MAX_RECORD_BYTES + 1)
    if len(text) > MAX_RECORD_BYTES:
        raise InputError(f"{where}: larger than a snapshot record ({MAX_RECORD_BYTES >> 10} KiB at most): take a new "
                         "snapshot with `bootstrap etcd snapshot`")
    record = parse_record(text, where)
    if record.name != path.name:
        raise InputError(f"{where}: records {record.name}, not {path.name}: a snapshot keeps the name it was "
                         "taken under (rename it back)")
    return record


def load_snapshot(path: Path) -> LocalSnapshot:
    """A snapshot the user named, checked against its record before any node is touched."""
    if not path.is_file():
        raise InputError(f"{path}: no such snapshot: name a .db file `bootstrap etcd snapshot` wrote "
                         "(`bootstrap etcd snapshots` lists them)")
    if not path.name.endswith(DB_SUFFIX):
        raise InputError(f"{path}: a snapshot is a .db file with its .json record beside it")
    record = read_record(path)
    # The size first: a file that is not the record's is refused before it is read whole.
    size = path.stat().st_size
    if size != record.size:
        raise InputError(f"{path} fails its check: it is {size} bytes and its record says {record.size}: the copy is "
                         "incomplete; restore another snapshot (`bootstrap etcd snapshots` lists them)")
    problems = snapshot_problems(record, file_facts(path))
    if problems:
        raise InputError(f"{path} fails its check: {'; '.join(problems)}; restore another snapshot "
                         "(`bootstrap etcd snapshots` lists them)")
    return LocalSnapshot(path.absolute(), record)


def local_snapshots(directory: Path) -> list[LocalSnapshot]:
    """The complete snapshots in a directory (a .db with a readable record), oldest first; not checked."""
    found: list[LocalSnapshot] = []
    if not directory.is_dir():
        return found
    for path in directory.glob(f"*{DB_SUFFIX}"):
        try:
            found.append(LocalSnapshot(path, read_record(path)))
        except InputError:
            continue
    return sorted(found, key=lambda s: (s.record.taken_at, s.record.name))


def clean_parts(directory: Path) -> list[Path]:
    """Remove copies a run killed midway left (`*.part`)."""
    removed = []
    for path in directory.glob(f"*{PART_SUFFIX}") if directory.is_dir() else ():
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def keep_newest(directory: Path, cluster: str, keep: int) -> list[Path]:
    """Keep the newest `keep` snapshots of this cluster in `directory` (others' are left alone); the removed."""
    mine = [s for s in local_snapshots(directory) if s.record.cluster == cluster]
    removed = []
    for snapshot in mine[:-keep] if keep > 0 else mine:
        for path in (snapshot.path, record_path(snapshot.path)):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def part_path(directory: Path, record: SnapshotRecord) -> Path:
    return directory / (record.name + PART_SUFFIX)


def store_fetched(record: SnapshotRecord, directory: Path, keep: int, node: str) -> LocalSnapshot:
    """The copy fetched into `<name>.db.part` checked against its record, then named: the record first, then the
    snapshot under its own name; the last `keep` of this cluster kept. A copy that fails its check is removed and
    the run fails."""
    part = part_path(directory, record)
    if not part.is_file():
        raise BootstrapError(f"etcd snapshot: the copy of {record.name} from {node} did not arrive at {part}")
    problems = snapshot_problems(record, file_facts(part))
    if problems:
        part.unlink(missing_ok=True)
        raise BootstrapError(f"etcd snapshot: the copy of {record.name} from {node} fails its check: "
                             f"{'; '.join(problems)}; run `bootstrap etcd snapshot` again")
    final = directory / record.name
    _write_private(record_path(final), json.dumps(record.model_dump(mode="json", by_alias=True), indent=2))
    part.chmod(0o600)
    os.replace(part, final)
    keep_newest(directory, record.cluster, keep)
    return LocalSnapshot(final, record)


def prepare_directory(directory: Path) -> Path:
    """The directory snapshots go to, created private (a snapshot holds every Secret of the cluster)."""
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{directory} is not a directory: name a directory for the snapshots")
    try:
        return private_dir(directory) if not directory.is_dir() else directory
    except OSError as exc:
        raise InputError(f"{directory}: cannot create it ({exc.strerror}): name a directory you can write") from None


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + PART_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def needed_bytes(db_size: int) -> int:
    """Room one snapshot of a database this size needs."""
    return db_size + db_size // 10 + SPACE_MARGIN


def free_bytes(directory: Path) -> int:
    """Free bytes on the file system that holds `directory` (or its nearest parent that exists)."""
    path = directory
    while not path.exists() and path != path.parent:
        path = path.parent
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def space_problem(where: str, free: int | None, needed: int) -> str | None:
    if free is None or free >= needed:
        return None
    return f"{where} has {_mib(free)} free and a snapshot needs {_mib(needed)}: free some space there"


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.0f} MiB"


def identity_problems(record: SnapshotRecord, cluster_ca: Iterable[str | None]) -> list[str]:
    """Whether a snapshot belongs to this cluster: its etcd CA is the one the control planes trust."""
    known = {ca for ca in cluster_ca if ca}
    if record.ca_sha256 is None:
        return ["its record names no etcd CA, so which cluster it came from is unknown"]
    if known and record.ca_sha256 not in known:
        return [f"it was taken from another cluster (its etcd CA sha256:{record.ca_sha256[:16]}..., this cluster's "
                f"sha256:{sorted(known)[0][:16]}...)"]
    return []


def listing(local: list[LocalSnapshot], survey: EtcdSurvey) -> dict[str, Any]:
    """What `bootstrap etcd snapshots` shows: this machine's snapshots, and each control plane's with its timer
    (or why it did not answer). Records a node holds that this version cannot read are left out."""
    nodes: dict[str, Any] = {}
    for name in survey.order:
        report = survey.reports.get(name)
        if report is None:
            nodes[name] = {"unreachable": survey.unreachable.get(name, "no report")}
            continue
        records = []
        for raw in report.snapshots:
            try:
                record = SnapshotRecord.model_validate(raw)
            except ValidationError:
                continue
            records.append(LocalSnapshot(Path(LAYOUT.snapshot_dir) / record.name, record).summary())
        nodes[name] = {"snapshots": records, "timer": report.timer.model_dump()}
    return {"here": [s.summary() for s in local], "nodes": nodes}
