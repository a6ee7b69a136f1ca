"""The one description of every command's options (provision/cli/option_table.py) and the command line itself are
the same thing: every command described, every option of it in the table with the kind its value is parsed by, and
every kind's parser, given any text at all, answers with a value or one line (ValueError), never anything else.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provision.cli import option_table as table
from provision.cli.app import app
from provision.inputs import local_paths
from provision.inputs.shapes import WholeNumber


def _leaves(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
    found = [(" ".join(path) or "bootstrap", command)]
    for name, sub in sorted((getattr(command, "commands", None) or {}).items()):
        found += _leaves(sub, (*path, name))
    return found


def _described(param: Any) -> str | None:
    if param.name == "help":
        return None
    if getattr(param, "param_type_name", "") == "argument":
        return str(param.name).upper()
    return next(opt for opt in param.opts if opt.startswith("--"))


COMMANDS = [(path, command) for path, command in _leaves(typer.main.get_command(app))
            if not getattr(command, "commands", None) or path == "bootstrap"]


def test_every_command_is_described_once_and_the_table_names_no_other() -> None:
    assert {path for path, _ in COMMANDS} == set(table.COMMANDS)


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[p for p, _ in COMMANDS])
def test_a_commands_options_are_the_tables(path: str, command: Any) -> None:
    described = table.COMMANDS[path]
    params = {name: param for param in command.params if (name := _described(param))}
    assert set(params) == set(described.options), path
    for name, param in params.items():
        assert bool(getattr(param, "is_flag", False)) == (described.options[name] is table.FLAG), (path, name)
    if path != "bootstrap":
        # The combinations are checked before its body: it runs through option_table.checked.
        assert getattr(command.callback, "__option_table__", None) == path


def test_every_rule_names_options_of_its_command() -> None:
    for described in table.COMMANDS.values():
        for rule in described.rules:
            assert {rule.option, rule.other} <= set(described.options), (described.command, rule)


def test_the_table_imports_nothing_heavy() -> None:
    """`bootstrap --help` reads the table: it imports the standard library only (each parser is imported when its
    option is first given)."""
    import subprocess
    import sys

    code = ("import sys; import provision.cli.option_table; "
            "print(sorted(m for m in ('pydantic', 'yaml', 'ansible', 'kubernetes', 'rich') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parent.parent)
    assert done.stdout.strip() == "[]"


KINDS = sorted({kind for c in table.COMMANDS.values() for kind in c.options.values() if kind.module},
               key=lambda k: (k.name, k.arguments))


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=80) | st.sampled_from(["~", "~/x", "/", "/etc", "..", "-1", "1", "٣", "1.36", "$X"]))
def test_any_text_gives_a_value_or_one_line(kind: table.Kind, text: str) -> None:
    try:
        kind.parse(text)
    except ValueError as exc:
        message = str(exc)
        assert message and "\n" not in message and "Traceback" not in message, message


@given(text=st.text(max_size=12))
@settings(max_examples=300, deadline=None)
def test_a_whole_number_is_ascii_digits_within_bounds_and_nothing_else(text: str) -> None:
    number = WholeNumber(1, 100)
    expected = text.isascii() and text.isdigit() and not (len(text) > 1 and text[0] == "0") and 1 <= int(text) <= 100
    try:
        assert number(text) == int(text) and expected
    except ValueError:
        assert not expected


@pytest.mark.parametrize("spelled", ["+2", " 2", "2 ", "2_0", "2.0", "２", "٢", "0x2", "02", "2e0", "-0", "True"])
def test_spellings_pythons_int_takes_are_refused(spelled: str) -> None:
    with pytest.raises(ValueError, match="whole number from 1 to 100"):
        WholeNumber(1, 100)(spelled)


def test_an_output_folder_is_new_empty_or_marked_as_this_tools(tmp_path: Path) -> None:
    assert local_paths.output_directory(str(tmp_path / "new")) == tmp_path / "new"
    assert not (tmp_path / "new").exists()  # judging creates nothing
    (tmp_path / "empty").mkdir()
    assert local_paths.output_directory(str(tmp_path / "empty")) == tmp_path / "empty"
    full = tmp_path / "full"
    full.mkdir()
    (full / "thesis.tex").write_text("years of work\n")
    with pytest.raises(ValueError, match="files in it"):
        local_paths.output_directory(str(full))
    (full / ".build").mkdir()
    assert local_paths.output_directory(str(full), own_mark=".build") == full


@pytest.mark.parametrize("where", ["/etc", "/usr/lib/x", "/", "/var/lib", "/proc/x", "/home", "HOME"])
def test_an_output_folder_is_never_a_system_folder_or_a_home(where: str, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ValueError):
        local_paths.output_directory(str(tmp_path) if where == "HOME" else where)


def test_a_link_is_judged_where_it_leads(tmp_path: Path) -> None:
    (tmp_path / "etc-link").symlink_to("/etc")
    with pytest.raises(ValueError, match=r"leads to /etc"):
        local_paths.store_directory(str(tmp_path / "etc-link" / "cb"))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine-link").symlink_to(tmp_path / "mine")
    assert local_paths.store_directory(str(tmp_path / "mine-link"))


@pytest.mark.parametrize(("text", "says"), [
    ("$HOME/out", "shell would have expanded"), ("`id`/out", "shell would have expanded"),
    ("out*", "shell would have expanded"), ("/srv/~/out", "'~' inside it"), ("~no-such-user-cb/x", "no such user"),
    ("out\u2028x", "control characters"), ("out\udcff", "control characters"), ("a" * 256, "255 bytes"),
])
def test_a_spelling_a_shell_or_python_would_expand_is_refused(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        local_paths.new_file(text)


def test_a_leading_tilde_is_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert local_paths.output_directory("~/results") == tmp_path / "results"
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(("option", "setting"), [("--gpus", "gpus"), ("--nodes", "nodes"), ("--epochs", "epochs"),
                                                 ("--timeout", "timeout_s")])
def test_an_option_that_stands_for_a_setting_has_the_settings_bounds(option: str, setting: str) -> None:
    from pydantic_core import PydanticUndefined

    from provision.inputs.settings import SmokeTestSettings

    bounds = dict(table.COMMANDS["smoke-test"].options[option].arguments)
    metadata = SmokeTestSettings.model_fields[setting].metadata
    low = next(m.ge for m in metadata if getattr(m, "ge", None) is not None)
    high = next(m.le for m in metadata if getattr(m, "le", None) is not None)
    assert (bounds["low"], bounds["high"]) == (low, high) and low is not PydanticUndefined
