"""What the etcd restore's modules report back (playbooks/module_utils/cb_etcd.py: file_status, restore_data_dir),
as the models nodes/documents.py reads them with."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Document(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class SnapshotStatus(_Document):
    """`etcdutl snapshot status` of a file."""

    hash: int
    revision: int
    total_key: int
    total_size: int


class StagedCopy(_Document):
    """cb_etcd_snapshot_status: a snapshot copied to a member, read there."""

    path: str
    size: int
    sha256: str
    status: SnapshotStatus


class RestoredDataDir(_Document):
    """cb_etcd_restore: the fresh data directory, and where the one it replaced was kept (None: there was none)."""

    data_dir: str
    backup: str | None = None
    moved_aside: str | None = None
