"""A member's data directory through any sequence of restores, interrupted or not, repeated or not, of one
snapshot or of others, with etcd serving writes in between: the docs' promise is that the data from before each
restore is kept (docs/etcd.md, "Restore"). The node's own code runs here (module_utils/cb_etcd.py:
restore_data_dir, as the cb_etcd_restore module calls it) on a real directory, with etcdutl's restore stood in
by a function that writes what it writes (a member/ directory with its database and WAL), and the restore's id
chosen as etcd_restore_check chooses it from the record in the cluster's state (nodes/etcd/restore.py:
restore_id_for). A kill is an exception raised at the Nth file-system step the restore takes."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from provision.nodes.etcd.snapshot import LocalSnapshot, SnapshotRecord
from tests.support.ansible_modules import load
from tests.support.paths import REPO_ROOT

RECORD = json.loads((REPO_ROOT / "tests" / "data" / "etcd" / "snapshot-3.5.16.json").read_text())


def cb_etcd() -> ModuleType:
    load("cb_etcd_restore")  # registers module_utils/cb_etcd.py under Ansible's name, as a node imports it
    import ansible.module_utils.cb_etcd as shared

    return shared


class Killed(Exception):
    """The restore's process killed at this step."""


class Steps:
    """Counts the restore's file-system steps (renames, removals, etcdutl's run) and kills it at the Nth."""

    def __init__(self, kill_at: int | None) -> None:
        self.kill_at, self.taken = kill_at, 0

    def step(self) -> None:
        self.taken += 1
        if self.kill_at is not None and self.taken >= self.kill_at:
            raise Killed(f"killed at step {self.taken}")


class OsWithSteps:
    """The `os` module as cb_etcd sees it, each rename a step that may be the last."""

    def __init__(self, steps: Steps) -> None:
        self._steps = steps

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def rename(self, source: str, target: str) -> None:
        self._steps.step()
        os.rename(source, target)


def fake_etcdutl(steps: Steps, contents: dict[str, str]) -> Any:
    """etcdutl snapshot restore SNAPSHOT --data-dir=DIR ...: DIR/member/snap/db holds the snapshot's data (its
    content here: `contents[SNAPSHOT]`), DIR/member/wal/ its first WAL. Killed midway, it leaves DIR half written."""

    def run(argv: list[str], timeout: float = 60) -> Any:
        snapshot = argv[3]
        target = Path(next(a for a in argv if a.startswith("--data-dir=")).split("=", 1)[1])
        if target.exists():
            raise AssertionError(f"etcdutl refuses a data directory that exists: {target}")
        (target / "member" / "snap").mkdir(parents=True)
        steps.step()  # a kill here leaves a directory without its database
        (target / "member" / "snap" / "db").write_text(contents[snapshot])
        (target / "member" / "wal").mkdir()
        (target / "member" / "wal" / "0000000000000000-0000000000000000.wal").write_text("restored\n")

        class Done:
            returncode, stdout, stderr = 0, "", ""

        return Done()

    return run


def member_config(data_dir: Path, snapshot: str, sha256: str, restore_id: str) -> dict[str, Any]:
    return {"restore_argv": ["etcdutl", "snapshot", "restore"], "snapshot": snapshot, "sha256": sha256,
            "data_dir": str(data_dir), "name": "n1", "initial_cluster": "n1=https://10.88.1.11:2380",
            "peer_urls": "https://10.88.1.11:2380", "token": f"cb-restore-{restore_id}", "restore_id": restore_id,
            "bump_revision": 0, "uid": os.getuid(), "gid": os.getgid()}


def serve(data_dir: Path, value: str) -> None:
    """etcd runs on the directory and takes a write: its database gains `value` (a line), its WAL grows."""
    with (data_dir / "member" / "snap" / "db").open("a") as db:
        db.write(f"{value}\n")
    with (data_dir / "member" / "wal" / "0000000000000000-0000000000000000.wal").open("a") as wal:
        wal.write(f"put {value}\n")


def held(parent: Path, data_dir: Path) -> list[str]:
    """Every database on disk: the data directory's and those of every directory a restore put aside."""
    found = []
    for path in sorted(parent.iterdir()):
        if path == data_dir or path.name.startswith(data_dir.name + ".cb-"):
            db = path / "member" / "snap" / "db"
            if db.is_file():
                found.append(db.read_text())
    return found


def restore(module: ModuleType, monkeypatch: pytest.MonkeyPatch, data_dir: Path, snapshot: str, sha256: str,
            restore_id: str, contents: dict[str, str], kill_at: int | None = None) -> dict[str, Any] | None:
    """One run of the member's restore step; None when it was killed."""
    steps = Steps(kill_at)
    with monkeypatch.context() as patch:
        patch.setattr(module, "os", OsWithSteps(steps))
        patch.setattr(module, "run", fake_etcdutl(steps, contents))
        patch.setattr(module, "relabel", lambda path: False, raising=False)  # SELinux: tests/test_etcd_restore_module.py
        try:
            result: dict[str, Any] = module.restore_data_dir(member_config(data_dir, snapshot, sha256, restore_id))
        except Killed:
            return None
    return result


def test_a_second_restore_keeps_the_data_served_since_an_interrupted_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30.1: the first restore's record stays (its check failed after etcd ran again), and etcd served new
    writes; a second restore under that same id must not delete the directory in place."""
    module = cb_etcd()
    data_dir = tmp_path / "etcd"
    contents = {"/staged/a.db": "snapshot A\n", "/staged/b.db": "snapshot B\n"}
    (data_dir / "member" / "snap").mkdir(parents=True)
    (data_dir / "member" / "wal").mkdir()
    serve(data_dir, "before either")

    first = restore(module, monkeypatch, data_dir, "/staged/a.db", "a" * 64, "r1", contents)
    assert first is not None and first["moved_aside"] == f"{data_dir}.cb-before-r1"
    serve(data_dir, "written after the first restore")  # etcd runs on A's data and takes writes

    restore(module, monkeypatch, data_dir, "/staged/b.db", "b" * 64, "r1", contents)
    assert (data_dir / "member" / "snap" / "db").read_text() == "snapshot B\n"
    assert sorted(held(tmp_path, data_dir)) == ["before either\n", "snapshot A\nwritten after the first restore\n",
                                                "snapshot B\n"]


def test_a_rerun_of_the_same_restore_on_its_untouched_copy_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = cb_etcd()
    data_dir = tmp_path / "etcd"
    contents = {"/staged/a.db": "snapshot A\n"}
    (data_dir / "member" / "snap").mkdir(parents=True)
    (data_dir / "member" / "wal").mkdir()
    serve(data_dir, "live")
    first = restore(module, monkeypatch, data_dir, "/staged/a.db", "a" * 64, "r1", contents)
    again = restore(module, monkeypatch, data_dir, "/staged/a.db", "a" * 64, "r1", contents)
    assert first is not None and first["restored"]
    assert again is not None and (again["restored"], again["moved_aside"]) == (False, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["etcd", "etcd.cb-before-r1"]


def test_a_directory_named_after_a_backup_is_never_overwritten(tmp_path: Path) -> None:
    module = cb_etcd()
    taken = tmp_path / "etcd.cb-before-r1"
    taken.mkdir()
    (tmp_path / "etcd.cb-before-r1.2").mkdir()
    assert module.fresh_name(str(taken)) == f"{taken}.3"
    assert module.fresh_name(str(tmp_path / "free")) == str(tmp_path / "free")


SNAPSHOTS = ("a", "b", "c")


class RestoreSequences(RuleBasedStateMachine):
    """Restores of three snapshots in any order, each possibly killed at any step, with etcd serving writes
    between them (each kept in its database, as etcd's history is): every write etcd ever took is still on disk,
    where etcd reads it or in a directory a restore put aside."""

    def __init__(self) -> None:
        super().__init__()
        self.module = cb_etcd()
        self.patch = pytest.MonkeyPatch()
        self.root = Path(tempfile_dir())
        self.data_dir = self.root / "etcd"
        self.contents = {f"/staged/{name}.db": f"snapshot {name}\n" for name in SNAPSHOTS}
        # The cluster's state on the operator's machine: the unfinished restore, as etcd_restore_check records it.
        self.record: dict[str, str] | None = None
        self.served: list[str] = []
        self.writes = 0
        self.restores = 0

    @initialize()
    def a_member_with_data(self) -> None:
        (self.data_dir / "member" / "snap").mkdir(parents=True)
        (self.data_dir / "member" / "wal").mkdir()
        self.write()

    def write(self) -> None:
        self.writes += 1
        value = f"write {self.writes}"
        serve(self.data_dir, value)
        self.served.append(value)

    @precondition(lambda self: (self.data_dir / "member" / "snap" / "db").is_file())
    @rule()
    def etcd_serves_a_write(self) -> None:
        self.write()

    @rule(name=st.sampled_from(SNAPSHOTS), kill_at=st.one_of(st.none(), st.integers(1, 4)),
          api_back=st.booleans())
    def restore(self, name: str, kill_at: int | None, api_back: bool) -> None:
        from provision.nodes.etcd.restore import restore_id_for

        record = SnapshotRecord.model_validate(RECORD | {"sha256": name * 64})
        snapshot = LocalSnapshot(Path(f"/snapshots/{name}.db"), record)
        self.restores += 1
        restore_id = restore_id_for(self.record, snapshot) or f"r{self.restores}"
        self.record = {"id": restore_id, "snapshot": f"{name}.db", "sha256": record.sha256, "started": "t"}
        done = restore(self.module, self.patch, self.data_dir, f"/staged/{name}.db", record.sha256, restore_id,
                       self.contents, kill_at)
        if done is None:
            return
        # etcd starts on the restored data (its WAL grows); the record goes once the API servers run.
        with (self.data_dir / "member" / "wal" / "0000000000000000-0000000000000000.wal").open("a") as wal:
            wal.write("started\n")
        if api_back:
            self.record = None

    @invariant()
    def every_write_etcd_ever_took_is_still_on_disk(self) -> None:
        lines = {line for db in held(self.root, self.data_dir) for line in db.splitlines()}
        assert [value for value in self.served if value not in lines] == []

    def teardown(self) -> None:
        self.patch.undo()
        shutil.rmtree(self.root, ignore_errors=True)


def tempfile_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="cb-restore-sequences-")


TestRestoreSequences = RestoreSequences.TestCase
TestRestoreSequences.settings = settings(max_examples=150, stateful_step_count=12, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
