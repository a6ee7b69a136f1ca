"""Options shared by several commands, declared once so every command spells them the same.

The options every command that reaches nodes takes (--inventory, --config, --verbose, --accept-new-host-keys,
--ask-become-pass) are added by `node_options`, which hands them to the command as one NodeOptions.
"""
from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from provision.cli import invocation
from provision.cli.option_table import INPUT_FILE

InventoryOption = Annotated[Path, typer.Option(
    "--inventory", "-i", help="Ansible inventory (INI or YAML) with [control_plane] and [workers] groups.",
    envvar="BOOTSTRAP_INVENTORY", show_default=False, parser=INPUT_FILE.parse)]
ConfigOption = Annotated[Path | None, typer.Option(
    "--config", "-c", help="Cluster settings (cluster.yaml); every setting has a working default.",
    envvar="BOOTSTRAP_CONFIG", show_default=False, parser=INPUT_FILE.parse)]
VerboseOption = Annotated[bool, typer.Option(
    "--verbose", "-v", help="Show Ansible's own output instead of the live progress view.")]
AcceptHostKeysOption = Annotated[bool, typer.Option(
    "--accept-new-host-keys",
    help="Trust and record host keys of nodes seen for the first time (changed keys are still refused).")]
AskBecomePassOption = Annotated[bool, typer.Option(
    "--ask-become-pass", "-K", help="Ask for the sudo password instead of requiring passwordless sudo.")]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]


class Output(StrEnum):
    text = "text"
    json = "json"


OutputOption = Annotated[Output, typer.Option(
    "--output", "-o", help="text (tables, for people) or json (one document on stdout, for programs).",
    case_sensitive=False)]


@dataclass(frozen=True)
class NodeOptions:
    """How a command reaches the nodes: the inventory, the settings, and the connection choices."""

    inventory: Path
    config: Path | None = None
    verbose: bool = False
    accept_new_host_keys: bool = False
    ask_become_pass: bool = False


_NODE_PARAMETERS = (
    inspect.Parameter("inventory", inspect.Parameter.KEYWORD_ONLY, annotation=InventoryOption),
    inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, annotation=ConfigOption, default=None),
    inspect.Parameter("verbose", inspect.Parameter.KEYWORD_ONLY, annotation=VerboseOption, default=False),
    inspect.Parameter("accept_new_host_keys", inspect.Parameter.KEYWORD_ONLY, annotation=AcceptHostKeysOption,
                      default=False),
    inspect.Parameter("ask_become_pass", inspect.Parameter.KEYWORD_ONLY, annotation=AskBecomePassOption,
                      default=False),
)

F = TypeVar("F", bound=Callable[..., Any])


def node_options(command: F) -> F:
    """Give a command the shared node options; it declares `nodes: NodeOptions` instead of the five options.

    Typer reads a command's options from its signature, so the wrapper shows Typer the command's own parameters
    followed by the shared ones, and folds the shared ones back into one NodeOptions when called.
    """
    signature = inspect.signature(command)
    # Resolved in the command's own module: its annotations may name things only that module imports.
    hints = typing.get_type_hints(command, include_extras=True)
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(p.name, p.annotation))
           for p in signature.parameters.values() if p.name != "nodes"]
    parameters = [*own, *_NODE_PARAMETERS]
    names = {p.name for p in _NODE_PARAMETERS}

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        shared = {name: kwargs.pop(name) for name in names}
        # What commands printed for the user to run must carry (verbose only changes what is shown).
        invocation.remember(**{name: value for name, value in shared.items() if name != "verbose"})
        return command(nodes=NodeOptions(**shared), **kwargs)

    # Typer must read the new signature, not follow __wrapped__ back to the command's own.
    del wrapper.__wrapped__
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
    return wrapper  # type: ignore[return-value]
