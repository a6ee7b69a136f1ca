"""A refused command creates nothing, for every command of the tool and not only `up`: no state directory, nothing
in HOME (no ~/.ansible), nothing in the working folder. Here the refusal comes after the command line was read (a
bad inventory, bad settings, an offline source that cannot serve the run), when Ansible has read the inventory
in this process; tests/test_bad_input_options.py holds the same for every option refused as it is read.

A few commands run as a fresh process too (`python -m provision`), with a fresh HOME: what importing Ansible or
reading an inventory writes on its own (~/.ansible/tmp) would show there.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision.cli import option_table as table
from tests.support.refusal import run_main

BAD_INVENTORY = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.300\n"
GOOD_INVENTORY = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2\n"
# The positional arguments a command needs to reach its body.
POSITIONAL = {"node add": ["w1"], "node remove": ["w1"], "node replace": ["cp1"], "addons install": ["volcano"],
              "addons remove": ["volcano"], "etcd restore": ["snap.db"]}
NODE_COMMANDS = sorted(c for c, d in table.COMMANDS.items() if "--ask-become-pass" in d.options)


def _site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inventory: str, settings: str = "") -> tuple[Path, ...]:
    home, work, state = tmp_path / "home", tmp_path / "work", tmp_path / "state" / "not-yet"
    home.mkdir()
    work.mkdir()
    (tmp_path / "hosts.ini").write_text(inventory)
    (tmp_path / "cluster.yaml").write_text(settings or "{}\n")
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    return home, work, state


def _nothing_created(home: Path, work: Path, state: Path) -> None:
    assert not state.parent.exists(), sorted(state.parent.rglob("*"))
    assert os.listdir(home) == [] and os.listdir(work) == []


def test_every_command_that_reaches_nodes_is_swept() -> None:
    assert len(NODE_COMMANDS) >= 20 and {"up", "etcd snapshot", "support-bundle", "upgrade", "doctor"} <= set(
        NODE_COMMANDS)


@pytest.mark.parametrize("command", NODE_COMMANDS)
def test_a_command_refused_for_its_inventory_creates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             command: str) -> None:
    home, work, state = _site(tmp_path, monkeypatch, BAD_INVENTORY)
    outcome = run_main("--state-dir", str(state), *command.split(), "-i", str(tmp_path / "hosts.ini"),
                       *POSITIONAL.get(command, []))
    assert outcome.code == 2 and len(outcome.lines) == 1 and "10.0.0.300" in outcome.lines[0], outcome
    _nothing_created(home, work, state)


@pytest.mark.parametrize("command", NODE_COMMANDS)
def test_a_command_refused_for_its_settings_creates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            command: str) -> None:
    """offline.bundle_fingerprint without offline.source: docs/settings.md says the source must then be a bundle."""
    home, work, state = _site(tmp_path, monkeypatch, GOOD_INVENTORY,
                              "offline:\n  bundle_fingerprint: " + "A" * 40 + "\n")
    outcome = run_main("--state-dir", str(state), *command.split(), "-i", str(tmp_path / "hosts.ini"), "-c",
                       str(tmp_path / "cluster.yaml"), *POSITIONAL.get(command, []))
    assert outcome.code == 2 and len(outcome.lines) == 1, outcome
    assert "offline.bundle_fingerprint" in outcome.lines[0] and "offline.source is not set" in outcome.lines[0]
    _nothing_created(home, work, state)


def test_a_local_offline_source_without_the_layout_is_refused_before_preflight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "offline"
    (source / "kubernetes").mkdir(parents=True)
    home, work, state = _site(tmp_path, monkeypatch, GOOD_INVENTORY, f"offline:\n  source: {source}\n")
    outcome = run_main("--state-dir", str(state), "up", "-i", str(tmp_path / "hosts.ini"), "-c",
                       str(tmp_path / "cluster.yaml"))
    assert outcome.code == 2 and len(outcome.lines) == 1, outcome
    line = outcome.lines[0]
    assert "is not a bundle and lacks what docs/offline.md's layout holds" in line
    assert "/deb or /rpm (the Kubernetes packages) is missing" in line and "Calico's manifest" in line
    _nothing_created(home, work, state)


@pytest.mark.parametrize("command", ["up", "etcd snapshot", "support-bundle", "doctor"])
def test_a_fresh_process_refused_for_its_inventory_leaves_no_ansible_folder(tmp_path: Path, command: str) -> None:
    home, work, state = tmp_path / "home", tmp_path / "work", tmp_path / "state" / "not-yet"
    home.mkdir()
    work.mkdir()
    (tmp_path / "hosts.ini").write_text(BAD_INVENTORY)
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("ANSIBLE_", "BOOTSTRAP_", "XDG_"))} | {"HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "provision", "--state-dir", str(state), *command.split(), "-i",
                           str(tmp_path / "hosts.ini")], capture_output=True, text=True, cwd=work, env=environment,
                          timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done
    assert "Traceback" not in done.stderr and done.stdout == ""
    _nothing_created(home, work, state)
