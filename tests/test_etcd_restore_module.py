"""The cb_etcd_restore module run as Ansible runs it on a member, with etcdutl, selinuxenabled and restorecon
stood in by scripts on its PATH that write what the real ones write and log how they were called: the restored
directory takes the data directory's place, the old one is moved aside, and where SELinux is on the restored
directory is relabeled (it was made beside the data directory and renamed, keeping its parent's label, not the
one the policy gives etcd's data: issue 30.2)."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.support.ansible_modules import run

ETCDUTL = """#!/usr/bin/env python3
import sys, pathlib
target = pathlib.Path(next(a for a in sys.argv if a.startswith("--data-dir=")).split("=", 1)[1])
(target / "member" / "snap").mkdir(parents=True)
(target / "member" / "wal").mkdir()
(target / "member" / "snap" / "db").write_text(open(sys.argv[3]).read())
(target / "member" / "wal" / "0.wal").write_text("wal")
"""


def script(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def arguments(tmp_path: Path, etcdutl: Path) -> dict[str, object]:
    snapshot = tmp_path / "staged.db"
    snapshot.write_text("snapshot data")
    return {"restore_argv": [str(etcdutl), "snapshot", "restore"], "snapshot": str(snapshot), "sha256": "a" * 64,
            "data_dir": str(tmp_path / "etcd"), "name": "n1", "initial_cluster": "n1=https://10.0.0.1:2380",
            "peer_urls": "https://10.0.0.1:2380", "token": "cb-restore-r1", "restore_id": "r1",
            "uid": os.getuid(), "gid": os.getgid()}


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    script(folder, "etcdutl", ETCDUTL)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    (tmp_path / "etcd" / "member").mkdir(parents=True)
    (tmp_path / "etcd" / "member" / "live").write_text("what etcd served")
    return folder


@pytest.mark.parametrize("selinux", ["enforcing or permissive", "disabled"])
def test_the_restored_directory_is_relabeled_where_selinux_is_on(tmp_path: Path, tools: Path, selinux: str) -> None:
    log = tmp_path / "restorecon.log"
    script(tools, "selinuxenabled", f"#!/bin/sh\nexit {0 if selinux != 'disabled' else 1}\n")
    script(tools, "restorecon", f"#!/bin/sh\necho \"$@\" >> {log}\n")
    result = run("cb_etcd_restore", arguments(tmp_path, tools / "etcdutl"), tmp_path)
    assert not result.get("failed"), result
    found = result["cb_etcd_restore"]
    assert (tmp_path / "etcd" / "member" / "snap" / "db").read_text() == "snapshot data"
    assert (tmp_path / "etcd.cb-before-r1" / "member" / "live").read_text() == "what etcd served"
    marker = json.loads((tmp_path / "etcd" / "cb-restore.json").read_text())
    assert (marker["restore_id"], json.loads(marker["arguments"])["sha256"]) == ("r1", "a" * 64)
    if selinux == "disabled":
        assert not log.exists() and found["relabeled"] is False
    else:
        assert log.read_text().split() == ["-R", str(tmp_path / "etcd")] and found["relabeled"] is True


def test_a_failed_relabel_fails_the_member_with_restorecons_words(tmp_path: Path, tools: Path) -> None:
    script(tools, "selinuxenabled", "#!/bin/sh\nexit 0\n")
    script(tools, "restorecon", "#!/bin/sh\necho 'restorecon: lstat(/var/lib/etcd) failed' >&2\nexit 255\n")
    result = run("cb_etcd_restore", arguments(tmp_path, tools / "etcdutl"), tmp_path)
    assert result["failed"] is True
    assert result["msg"] == (f"etcd restore on member n1 failed: restorecon -R {tmp_path / 'etcd'} failed: "
                             "restorecon: lstat(/var/lib/etcd) failed")
