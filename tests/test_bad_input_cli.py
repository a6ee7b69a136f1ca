"""The command line itself: usage errors in the same one-line shape as every other refusal (exit code 2), user
text printed as written (no rich markup, no :emoji: codes), and a refused command changes nothing, here or on a
node: no state directory, no cluster directory, nothing outside the state directory.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.refusal import assert_refused, run_main, run_process, state_dir

GOOD_INI = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2\n"


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text(GOOD_INI)
    return path


# (id, arguments after `bootstrap` (INVENTORY is replaced by a good inventory), words the line names)
USAGE = [
    ("only-empty", ["up", "-i", "INVENTORY", "--only", ""], ["unknown phase ''", "phases are preflight"]),
    ("from-empty", ["up", "-i", "INVENTORY", "--from", ""], ["unknown phase ''"]),
    ("only-unknown", ["up", "-i", "INVENTORY", "--only", "netwrk"], ["unknown phase 'netwrk'"]),
    ("only-and-from", ["up", "-i", "INVENTORY", "--only", "gpu", "--from", "prepare"], ["exclude each other"]),
    ("only-empty-and-from", ["up", "-i", "INVENTORY", "--only", "", "--from", "prepare"], ["unknown phase ''"]),
    ("context-without-merge", ["up", "-i", "INVENTORY", "--context", "x"], ["--merge-kubeconfig"]),
    ("output-yaml", ["preflight", "-i", "INVENTORY", "--output", "yaml"], ["'yaml' is not one of", "--help"]),
    ("config-show-output-xml", ["config", "show", "-o", "xml"], ["'xml' is not one of"]),
    ("unknown-option", ["reset", "-i", "INVENTORY", "--bogus"], ["No such option: --bogus"]),
    ("missing-inventory", ["preflight"], ["Missing option '--inventory'"]),
    ("missing-value", ["up", "-i"], ["Option '-i' requires an argument"]),
    ("missing-node-name", ["node", "add", "-i", "INVENTORY"], ["Missing argument 'name'"]),
    ("extra-argument", ["node", "add", "-i", "INVENTORY", "w1", "w2"], ["unexpected extra argument"]),
    ("unknown-command", ["upp"], ["No such command 'upp'"]),
    ("unknown-subcommand", ["config", "check"], ["No such command 'check'"]),
    ("port-not-a-number", ["init", "--control-plane", "10.0.0.10", "--port", "twenty-two"], ["--port"]),
    ("gpu-choice", ["init", "--gpu", "maybe"], ["'maybe' is not one of"]),
    ("completion-shell", ["completion", "tcsh"], ["'tcsh' is not one of"]),
    ("lab-workers-negative", ["lab", "up", "--workers", "-1"], ["--workers"]),
    ("state-dir-without-value", ["--state-dir"], ["Option '--state-dir' requires an argument"]),
    ("unknown-host-to-reset", ["reset", "--yes", "-i", "INVENTORY", "nosuch"], ["no host named 'nosuch'", "cp1, w1"]),
    ("node-add-control-plane", ["node", "add", "-i", "INVENTORY", "cp1"], ["'cp1' is the first control plane"]),
    ("node-remove-unknown", ["node", "remove", "--yes", "-i", "INVENTORY", "w9"], ["no host named 'w9'"]),
    ("prepare-limit-unknown", ["prepare", "-i", "INVENTORY", "--limit", "w9"], ["no host named 'w9'"]),
]


def test_there_are_many_distinct_command_line_mistakes() -> None:
    assert len({c[0] for c in USAGE}) == len(USAGE) >= 20


@pytest.mark.parametrize(("case", "args", "expected"), USAGE, ids=[c[0] for c in USAGE])
def test_a_command_line_mistake_is_one_line_with_exit_code_2(inventory: Path, case: str, args: list[str],
                                                             expected: list[str]) -> None:
    args = [str(inventory) if arg == "INVENTORY" else arg for arg in args]
    assert_refused(run_main(*args), *expected)


def test_a_usage_error_has_the_same_shape_in_a_real_process(inventory: Path) -> None:
    line = assert_refused(run_process("up", "-i", str(inventory), "--output", "yaml"), "'yaml' is not one of")
    assert line.endswith("(see `bootstrap up --help`)")


# User text that rich would read as markup or emoji codes: (id, how it gets into the input, what must show).
LITERAL = [
    ("emoji-code-in-a-key", "cluster.yaml", "kubernetes:\n  ':rocket:': 1\n", ":rocket:"),
    ("markup-in-a-key", "cluster.yaml", "mirrors:\n  '[bold red]x[/]': 1\n", "[bold red]x[/]"),
    ("bracketed-address", "hosts.ini", GOOD_INI.replace("10.0.0.2", "[fd00::10]"), "[fd00::10]"),
    ("markup-in-a-variable", "hosts.ini", GOOD_INI.replace("10.0.0.2", "10.0.0.2 gpu=[red]yes[/red]"), "[red]yes[/red]"),
    ("emoji-code-in-a-user", "hosts.ini", GOOD_INI.replace("10.0.0.2", "10.0.0.2 ansible_user=:smile:"), ":smile:"),
]


@pytest.mark.parametrize(("case", "file_name", "content", "shown"), LITERAL, ids=[c[0] for c in LITERAL])
def test_user_text_is_printed_as_written(tmp_path: Path, inventory: Path, case: str, file_name: str, content: str,
                                         shown: str) -> None:
    path = tmp_path / file_name
    path.write_text(content)
    args = ["-c", str(path)] if file_name == "cluster.yaml" else []
    assert_refused(run_main("config", "validate", "-i", str(inventory if args else path), *args), str(path), shown)


def test_a_path_with_markup_and_emoji_codes_is_printed_as_written(tmp_path: Path) -> None:
    folder = tmp_path / "[bold]lab:rocket:"
    folder.mkdir()
    (folder / "hosts.ini").write_text(GOOD_INI)
    accepted = run_main("config", "validate", "-i", str(folder / "hosts.ini"))
    assert accepted.code == 0 and str(folder) in accepted.stdout.replace("\n", ""), accepted.stdout
    assert_refused(run_main("preflight", "-i", str(folder / "missing.ini")), f"{folder}/missing.ini")


# Refused commands that would otherwise reach nodes and write state: (id, arguments, inventory text).
NOTHING_CHANGED = [
    ("up-bad-address", ["up"], GOOD_INI.replace("10.0.0.2", "10.0.0.300")),
    ("preflight-bad-name", ["preflight"], GOOD_INI.replace("w1", "W1")),
    ("reset-bad-port", ["reset", "--yes"], GOOD_INI.replace("10.0.0.2", "10.0.0.2 ansible_port=22.5")),
    ("down-local-connection", ["down", "--yes"], GOOD_INI + "[all:vars]\nansible_connection=local\n"),
    ("node-add-bad-key", ["node", "add", "w1"], GOOD_INI + "[all:vars]\nansible_ssh_private_key_file=/nonexistent\n"),
    ("node-remove-ssh-args", ["node", "remove", "--yes", "w1"], GOOD_INI + "[all:vars]\nansible_ssh_args=-C\n"),
    ("prepare-ipv6", ["prepare"], GOOD_INI.replace("10.0.0.2", "fd00::2")),
    ("climbing-control-plane-address", ["reset", "--yes"], GOOD_INI.replace("10.0.0.1", "x/../../..")),
    ("climbing-control-plane-name", ["down", "--yes"], "[control_plane]\n../cp ansible_host=10.0.0.1\n"),
]


@pytest.mark.parametrize(("case", "args", "text"), NOTHING_CHANGED, ids=[c[0] for c in NOTHING_CHANGED])
def test_a_refused_command_creates_and_changes_nothing(tmp_path: Path, case: str, args: list[str], text: str) -> None:
    inventory = tmp_path / "work" / "hosts.ini"
    inventory.parent.mkdir()
    inventory.write_text(text)
    # A state directory that does not exist yet: a refused command must not create it.
    missing = tmp_path / "state" / "not-yet"
    outside = {p: p.stat().st_mode for p in (tmp_path, tmp_path / "work")}
    outcome = run_main("--state-dir", str(missing), *args, "-i", str(inventory))
    assert_refused(outcome, str(inventory))
    assert not missing.exists() and not (tmp_path / "state").exists()
    assert {p: p.stat().st_mode for p in outside} == outside
    assert not any(state_dir().iterdir())

