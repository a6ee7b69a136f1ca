"""`reset` removes the smoke test's data cache only where the smoke test marked it as its own: an unmarked folder
at smoke_test.cache_path (the user's, or one the smoke test refused to use) is kept, files and all, and the reset
phase names it. Runs the reset role's file step (roles/reset/tasks/0030-files.yml, as playbooks/reset.yml runs it)
on this machine over a local connection, on folders of the test's own, then the reset phase's check on that run;
tests/test_reset_lab.py runs the whole `bootstrap reset` on lab nodes."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from provision.inputs.inventory import load_inventory
from provision.inputs.settings import CACHE_MARKER, Settings
from provision.nodes.runner import run_playbook
from provision.phases import reset as reset_phase
from tests.support.paths import REPO_ROOT

PLAYBOOK = str(REPO_ROOT / "tests" / "playbooks" / "reset_files.yml")


def test_an_unmarked_folder_at_the_cache_path_is_kept_and_named_and_a_marked_one_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"[control_plane]\ncp1 ansible_host=127.0.0.11\n[all:vars]\n"
                         f"ansible_python_interpreter={sys.executable}\n")
    cluster = load_inventory(inventory)
    marked, theirs, left = tmp_path / "cache-marked", tmp_path / "cache-theirs", tmp_path / "etc-kubernetes"
    for folder in (marked, theirs, left):
        folder.mkdir()
    (marked / CACHE_MARKER).write_text("")
    (marked / "cifar-10-python.tar.gz").write_text("archive")
    (theirs / "thesis.tex").write_text("years of work\n")
    (left / "admin.conf").write_text("kubeconfig")
    cni = tmp_path / "cni"
    cni.mkdir()
    (cni / "10-calico.conflist").write_text("{}")

    result = run_playbook(PLAYBOOK, cluster, Settings(), phase="reset", extra_vars={
        "ansible_connection": "local", "reset_paths": [str(left)],
        "reset_cache_paths": [str(marked), str(theirs)], "reset_emptied_dirs": [str(cni)]})
    assert result.ok, [f.describe() for f in result.failures]
    assert not marked.exists() and not left.exists() and list(cni.iterdir()) == []
    assert sorted(p.name for p in theirs.iterdir()) == ["thesis.tex"]
    assert (theirs / "thesis.tex").read_text() == "years of work\n"

    said: list[str] = []
    ctx: Any = SimpleNamespace(playbook_results=[result], say=said.append)
    reset_phase.check(ctx)
    assert [line.split(":")[0:2] for line in said] == [["cp1", f" {theirs} left alone"]]
    assert "does not carry the smoke test's mark" in said[0] and str(marked) not in " ".join(said)
