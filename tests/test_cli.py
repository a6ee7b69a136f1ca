"""What users of kubectl- and kubeadm-style tools expect of the command line: --version, shell completion,
`init` that writes a starting inventory and settings, one JSON document with --output json, and usage
errors in one line like every other refusal."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision import __version__
from provision.inputs.sources import PROFILES
from provision.inputs.validation import load_cluster
from tests.support.keys import write_private_key


def bootstrap(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provision", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env=(os.environ | (env or {})))


def test_version_is_printed() -> None:
    result = bootstrap("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"bootstrap (cluster-bootstrap) {__version__}"


@pytest.mark.parametrize(("args", "expected"), [
    (["up"], "Missing option '--inventory'"),
    (["up", "--inventory", "x", "--bogus"], "No such option: --bogus"),
    (["nosuchcommand"], "No such command 'nosuchcommand'"),
    (["init", "--gpu", "maybe"], "'maybe' is not one of 'auto', 'true', 'false'"),
    (["completion", "tcsh"], "'tcsh' is not one of 'bash', 'zsh', 'fish'"),
    (["up", "-i"], "Option '-i' requires an argument"),
])
def test_usage_errors_are_one_line_with_exit_code_2(args: list[str], expected: str) -> None:
    result = bootstrap(*args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert "--help" in lines[0] and result.stdout == ""


def test_no_arguments_shows_the_help() -> None:
    result = bootstrap()
    assert result.returncode == 0 and "Usage: bootstrap" in result.stdout + result.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_name_the_completion_variable(shell: str) -> None:
    result = bootstrap("completion", shell)
    assert result.returncode == 0 and "_BOOTSTRAP_COMPLETE" in result.stdout


def test_bash_completion_offers_commands_and_options(tmp_path: Path) -> None:
    script = tmp_path / "completion.bash"
    script.write_text(bootstrap("completion", "bash").stdout)
    shim = tmp_path / "bin" / "bootstrap"
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m provision \"$@\"\n")
    shim.chmod(0o755)
    probe = (f"source {script}; COMP_WORDS=(bootstrap pre); COMP_CWORD=1; _bootstrap_completion bootstrap; "
             "echo ${COMPREPLY[@]}; COMP_WORDS=(bootstrap up --fr); COMP_CWORD=2; _bootstrap_completion bootstrap; "
             "echo ${COMPREPLY[@]}")
    result = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60,
                            env=os.environ | {"PATH": f"{shim.parent}:{os.environ['PATH']}"})
    assert result.stdout.splitlines() == ["preflight prepare", "--from"], result.stderr


def test_init_writes_an_inventory_and_settings_that_validate(tmp_path: Path) -> None:
    key = write_private_key(tmp_path / "id_ed25519")
    result = bootstrap("init", "--control-plane", "10.0.0.10", "--workers", "10.0.0.11,10.0.0.12",
                       "--workers", "10.0.0.13", "--user", "ubuntu", "--key", str(key), "--profile", "cn",
                       "--gpu", "true", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    cluster, settings = load_cluster(tmp_path / "hosts.ini", tmp_path / "cluster.yaml")
    assert [(n.name, n.address, n.role) for n in cluster.nodes] == [
        ("control-plane-1", "10.0.0.10", "control_plane"), ("worker-1", "10.0.0.11", "worker"),
        ("worker-2", "10.0.0.12", "worker"), ("worker-3", "10.0.0.13", "worker")]
    assert {(n.user, n.key_file, n.gpu) for n in cluster.nodes} == {("ubuntu", key, "true")}
    assert settings.mirrors.profile == "cn" and "cn" in PROFILES
    assert (tmp_path / "hosts.ini").read_text().startswith("# ")
    assert (tmp_path / "cluster.yaml").read_text().startswith("# ")
    assert "bootstrap up --inventory" in result.stderr


def test_init_never_overwrites_and_a_refused_init_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text("mine: true\n")
    result = bootstrap("init", "--control-plane", "10.0.0.10", cwd=tmp_path)
    assert result.returncode == 2 and "cluster.yaml exists" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.yaml"]
    assert (tmp_path / "cluster.yaml").read_text() == "mine: true\n"

    empty = tmp_path / "empty"
    empty.mkdir()
    for args in (["--key", str(tmp_path / "missing-key")], ["--workers", "10.0.0.11,,10.0.0.12"], []):
        result = bootstrap("init", *(["--control-plane", "10.0.0.10"] if args else []), *args, cwd=empty)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert list(empty.iterdir()) == []


def test_config_validate_and_show_print_one_json_document(tmp_path: Path) -> None:
    assert bootstrap("init", "--control-plane", "10.0.0.10", "--workers", "10.0.0.11", cwd=tmp_path).returncode == 0
    result = bootstrap("config", "validate", "-i", "hosts.ini", "-c", "cluster.yaml", "--output", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["valid"] is True and [n["name"] for n in document["nodes"]] == ["control-plane-1", "worker-1"]
    shown = json.loads(bootstrap("config", "show", "-c", "cluster.yaml", "-o", "json", cwd=tmp_path).stdout)
    assert shown["kubernetes"]["version"] == yaml.safe_load((tmp_path / "cluster.yaml").read_text())["kubernetes"]["version"]
    assert "resolved_sources" in shown


def test_a_state_dir_that_cannot_be_one_is_refused_before_anything(tmp_path: Path) -> None:
    assert bootstrap("init", "--control-plane", "10.0.0.10", cwd=tmp_path).returncode == 0
    blocker = tmp_path / "file"
    blocker.write_text("")
    for how in (["--state-dir", str(blocker / "sub")], []):
        env = {} if how else {"BOOTSTRAP_STATE_DIR": str(blocker)}
        result = bootstrap(*how, "up", "-i", "hosts.ini", cwd=tmp_path, env=env)
        assert result.returncode == 2 and "is not a directory" in result.stderr, result.stderr
