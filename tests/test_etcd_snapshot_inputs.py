"""Snapshot records and the snapshot folder as untrusted input (issue 32.3 and 32.1): a record comes from disks and
other machines, so any structure, however nested, mistyped or large, is refused in one line in the tool's words
(never a traceback, never pydantic's links), a record too large is refused before it is parsed, and a snapshot whose
size is not its record's is refused before it is hashed; `etcd snapshot --dir` and `etcd snapshots --dir` are judged
before any node is asked."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provision.errors import InputError
from provision.nodes.etcd import snapshot as snapshots
from provision.nodes.etcd.snapshot import MAX_RECORD_BYTES, load_snapshot, parse_record, record_path
from tests.support.paths import REPO_ROOT
from tests.support.refusal import run_main

DATA = REPO_ROOT / "tests" / "data" / "etcd"
RECORD = json.loads((DATA / "snapshot-3.5.16.json").read_text())

json_values = st.recursive(st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.floats(allow_nan=False)
                           | st.text(max_size=40),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                        max_size=4), max_leaves=30)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(json_values, st.dictionaries(st.sampled_from(sorted(RECORD)), json_values).map(
    lambda changes: RECORD | changes)))
def test_any_structure_is_a_record_or_a_one_line_refusal(document: Any) -> None:
    try:
        record = parse_record(json.dumps(document).encode(), "x.json")
    except InputError as exc:
        message = str(exc)
        assert "\n" not in message and "pydantic" not in message and "https://" not in message, message
        assert message.startswith("x.json: not a snapshot record")
    else:
        assert record.name == document["name"]


@pytest.mark.parametrize(("field", "value"), [("cluster", "{{ lookup('pipe', 'id') }}"), ("node", "n1\nn2"),
                                              ("members", ["n1", "n\x1b[2J"]), ("revision", -1), ("size", True),
                                              ("etcd_version", "3.5.16; rm -rf /"), ("ca_sha256", "ab" * 40)])
def test_a_record_value_that_is_not_its_kind_is_named(field: str, value: object) -> None:
    with pytest.raises(InputError, match=rf"^x.json: not a snapshot record this version reads \({field}"):
        parse_record(json.dumps(RECORD | {field: value}).encode(), "x.json")


def test_deep_nesting_and_a_large_record_are_refused_cheaply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match="not a snapshot record"):
        parse_record(b"[" * 100_000 + b"]" * 100_000, "x.json")
    db = tmp_path / RECORD["name"]
    shutil.copy(DATA / "snapshot-3.5.16.db", db)
    record_path(db).write_text(json.dumps(RECORD | {"padding": "x" * MAX_RECORD_BYTES}))
    with pytest.raises(InputError, match="larger than a snapshot record"):
        load_snapshot(db)
    # A file whose size is not its record's is refused without being hashed.
    record_path(db).write_text(json.dumps(RECORD))
    with db.open("ab") as handle:
        handle.write(b"\0" * 4096)
    monkeypatch.setattr(snapshots, "file_facts", lambda path: pytest.fail("hashed before its size was checked"))
    with pytest.raises(InputError, match=f"it is {RECORD['size'] + 4096} bytes and its record says {RECORD['size']}"):
        load_snapshot(db)


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.0.0.1\n")
    return hosts


@pytest.mark.parametrize(("command", "folder"), [("snapshot", "/proc/self/x"), ("snapshot", "snaps\x1b[2J"),
                                                 ("snapshot", "FILE"), ("snapshots", "snaps\x1b[2J"),
                                                 ("snapshots", "FILE")])
def test_the_snapshot_folder_is_judged_before_any_node(inventory: Path, tmp_path: Path, command: str,
                                                       folder: str) -> None:
    """The option table's folder kinds (cli/option_table.py) judge --dir before the command's body."""
    (tmp_path / "file").write_text("mine")
    folder = {"FILE": str(tmp_path / "file")}.get(folder, folder)
    outcome = run_main("etcd", command, "--dir", folder, "--inventory", str(inventory))
    assert outcome.code == 2 and len(outcome.lines) == 1 and "--dir" in outcome.lines[0], outcome
    assert (tmp_path / "file").read_text() == "mine"


def test_the_three_etcd_lab_files_are_one_unit_of_work_under_xdist() -> None:
    """They share one etcd cluster (the session-scoped etcd_cluster): one worker runs them, building it once."""
    from types import SimpleNamespace

    from tests.lab.fixtures import shared_lab_scheduler

    config = SimpleNamespace(getoption=lambda name, default=None: "loadfile" if name == "dist" else default,
                             getvalue=lambda name: ["4*popen"] if name == "tx" else None)
    scheduler: Any = shared_lab_scheduler(config, None)  # type: ignore[arg-type]
    scopes = {scheduler._split_scope(f"tests/test_etcd_{name}_lab.py::test_x") for name in ("snapshot", "restore",
                                                                                           "recovery")}
    assert scopes == {"shared-lab:etcd_cluster"}
    assert scheduler._split_scope("tests/test_ha_lab.py::test_y") == "tests/test_ha_lab.py"
    other = SimpleNamespace(getoption=lambda name, default=None: "load")
    assert shared_lab_scheduler(other, None) is None  # type: ignore[arg-type]
