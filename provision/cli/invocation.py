"""Every `bootstrap ...` command the tool prints for the user to run carries the options this run was given.

A fix says "`bootstrap up --from join`"; the user ran `bootstrap --state-dir /srv/cb up -i lab.ini -c lab.yaml`.
Printed as written, the fix would run with the default state directory and settings, and no inventory: another
run. So every command the tool prints in backticks is completed here, at the one edge where text reaches the
user, with what this run was given: the state directory, the inventory, the settings, the kubeconfig and the
connection choices (-K, --accept-new-host-keys), each only where the printed command takes that option (read
from the command itself) and does not name it already. The library keeps writing plain commands; it does not
know how it was invoked.

Presentation choices (--verbose, --output) are not carried: they change what is shown, not what is done. Nor
are options set in the environment (BOOTSTRAP_STATE_DIR, BOOTSTRAP_INVENTORY, BOOTSTRAP_CONFIG, KUBECONFIG):
the command printed runs in that same environment.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from typer import _click as click
from typer._click.core import ParameterSource
from typer._click.globals import get_current_context

# A command in backticks: `bootstrap ...`.
_COMMAND = re.compile(r"`(bootstrap(?: [^`\n]*)?)`")


@dataclass(frozen=True)
class Given:
    """What this run was given that a printed command must carry to mean the same run."""

    state_dir: Path | None = None
    inventory: Path | None = None
    config: Path | None = None
    kubeconfig: Path | None = None
    ask_become_pass: bool = False
    accept_new_host_keys: bool = False

    def options(self) -> list[tuple[tuple[str, ...], str | None]]:
        """(the option's names, its value; None for a flag) for each option given, in the order printed."""
        found: list[tuple[tuple[str, ...], str | None]] = []
        if self.inventory is not None:
            found.append((("--inventory", "-i"), str(self.inventory)))
        if self.config is not None:
            found.append((("--config", "-c"), str(self.config)))
        if self.kubeconfig is not None:
            found.append((("--kubeconfig",), str(self.kubeconfig)))
        if self.ask_become_pass:
            found.append((("--ask-become-pass", "-K"), None))
        if self.accept_new_host_keys:
            found.append((("--accept-new-host-keys",), None))
        return found


# This invocation's (one per process: the CLI runs one command; tests start each anew).
_given = Given()
# What runs this tool, as the printed commands name it: `bootstrap`, or the path that works (set_program).
_program = "bootstrap"
_root: Callable[[], click.Command] | None = None
_root_command: click.Command | None = None


def set_root(build: Callable[[], click.Command]) -> None:
    """The command tree printed commands are read against (the CLI's app, registered by cli/app.py)."""
    global _root, _root_command
    _root, _root_command = build, None


def _root_tree() -> click.Command | None:
    global _root_command
    if _root_command is None and _root is not None:
        _root_command = _root()
    return _root_command


def _typed(name: str) -> bool:
    """Whether the running command's option `name` was typed on its command line. One set from the environment
    (BOOTSTRAP_STATE_DIR, BOOTSTRAP_INVENTORY, ...) is there still for the command printed, and one left at its
    default needs no carrying; an option the command does not have was chosen by the code, and is carried."""
    ctx = get_current_context(silent=True)
    source = ctx.get_parameter_source(name) if ctx is not None else None
    return source is None or source is ParameterSource.COMMANDLINE


def set_program(argv0: str) -> None:
    """How the commands this run prints name the tool: `bootstrap` when that is what was typed (the shell found it)
    or what PATH finds as this same program; else the path it was run by (`.venv-modern/bin/bootstrap` from a
    checkout whose venv is not on PATH: a hint naming `bootstrap` would be "command not found" in a new shell)."""
    global _program
    _program = "bootstrap"
    if Path(argv0).name != "bootstrap" or "/" not in argv0:
        return
    typed = Path(argv0).absolute()
    found = shutil.which("bootstrap")
    try:
        if found is not None and Path(found).samefile(typed):
            return
    except OSError:
        pass
    _program = str(typed)


def start(state_dir: Path | None) -> None:
    """A new invocation: forget the last one's options (tests run many in one process)."""
    global _given
    _given = Given(state_dir=state_dir if _typed("state_dir") else None)


def remember(**options: Any) -> None:
    """Options a command was given (Given's fields); None and False are not given."""
    global _given
    chosen = {key: value for key, value in options.items()
              if value is not None and value is not False and _typed(key)}
    _given = replace(_given, **chosen)


def given() -> Given:
    return _given


def complete(command: str, chosen: Given | None = None) -> str:
    """`command` (`bootstrap SUBCOMMAND ...`) with the options of `chosen` (default: this run's) that it takes and
    does not name; as it was when it is not a command of this tool."""
    chosen = chosen if chosen is not None else _given
    root = _root_tree()
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if root is None or not words or words[0] != "bootstrap":
        return command
    node, at, path = root, 1, list[str]()
    while at < len(words) and not words[at].startswith("-"):
        # A group (Typer's, carrying its own Click) finds its subcommands by name (the root loads them on demand).
        find = getattr(node, "get_command", None)
        sub = find(click.Context(node), words[at]) if find is not None else None
        if sub is None:
            break
        node, at, path = sub, at + 1, [*path, words[at]]
    if node is root:
        return command
    takes = {name for param in node.params for name in getattr(param, "opts", [])}
    named = {word.split("=", 1)[0] for word in words[at:] if word.startswith("-")}
    added: list[str] = []
    for names, value in chosen.options():
        if names[0] in takes and not named & set(names):
            added += [names[0]] if value is None else [names[0], value]
    # An option the command requires that this run was not given (`smoke-test` has no inventory; `up` needs one)
    # is printed as a placeholder to fill (`--inventory INVENTORY`), never left out: left out, the command as
    # printed fails.
    for param in node.params if not named & {"--help", "-h"} else ():
        opts = list(getattr(param, "opts", []))
        if (getattr(param, "param_type_name", "") == "option" and param.required and opts
                and not named & set(opts) and not set(added) & set(opts) and not _from_environment(param)):
            added += [max(opts, key=len), (param.name or "value").upper()]
    leading = ["--state-dir", str(chosen.state_dir)] if chosen.state_dir is not None and "--state-dir" not in words \
        else []
    return shlex.join([_program, *leading, *path, *added, *words[at:]])


def _from_environment(param: click.Parameter) -> bool:
    """Whether the option is set in this environment (BOOTSTRAP_INVENTORY), which the printed command runs in."""
    envvar = param.envvar
    names = [envvar] if isinstance(envvar, str) else list(envvar or [])
    return any(os.environ.get(str(name)) for name in names)


def carry(text: str, chosen: Given | None = None) -> str:
    """Every backticked `bootstrap ...` command in `text` completed with this run's options."""
    return _COMMAND.sub(lambda match: f"`{complete(match.group(1), chosen)}`", text)
