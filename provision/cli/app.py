"""The `bootstrap` command line: thin. It parses arguments, calls the library and renders what comes back."""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text
from typer import _click as click  # Typer (pinned to 0.29.x) carries its own copy of Click
from typer._completion_classes import completion_init

from provision import __version__
from provision.cli import invocation
from provision.cli.option_table import STATE_DIRECTORY
from provision.cli.views import literal_console
from provision.errors import BootstrapError
from provision.inputs.state import STATE_DIR_ENV

# One module per command under provision/cli/commands/, each exposing register(app).
COMMAND_MODULES: tuple[str, ...] = ("init", "config", "lab", "preflight", "prepare", "smoke_test", "up", "reset", "bundle",
                                    "node", "addons", "etcd", "upgrade", "certs", "doctor", "support_bundle",
                                    "completion")

HELP = """bootstrap: turn machines you can reach over SSH into a Kubernetes cluster with working NVIDIA GPUs.

It reads an Ansible inventory (--inventory) and optional settings (--config cluster.yaml), checks the
machines, prepares them, forms the cluster with kubeadm, installs Calico and the NVIDIA device plugin,
verifies every node and GPU, and proves the GPUs work with a CIFAR-10 training Job.

\b
Example usage:
    bootstrap init --control-plane 10.0.0.10 --workers 10.0.0.11,10.0.0.12 --user ubuntu --key ~/.ssh/id_ed25519
    bootstrap preflight --inventory hosts.ini
    bootstrap up --inventory hosts.ini --config cluster.yaml
"""

app = typer.Typer(help=HELP, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]})
err_console = literal_console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"bootstrap (cluster-bootstrap) {__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.", callback=_print_version, is_eager=True)] = False,
    state_dir: Annotated[Path | None, typer.Option(
        "--state-dir", envvar=STATE_DIR_ENV, show_default=False, parser=STATE_DIRECTORY.parse,
        help="Where cluster state (admin kubeconfigs) and run logs are kept "
             "(default: $XDG_STATE_HOME/cluster-bootstrap or ~/.local/state/cluster-bootstrap).")] = None,
) -> None:
    if state_dir is not None:
        # Judged as it was read (option_table.STATE_DIRECTORY). The library reads the state directory from the
        # environment: one mechanism for the flag and the variable.
        os.environ[STATE_DIR_ENV] = str(state_dir)
    # Commands printed for the user to run carry it (and the options each command adds).
    invocation.start(state_dir)


# Shell completion (`bootstrap completion bash`) answers through Typer's completion classes.
completion_init()

for _name in COMMAND_MODULES:
    importlib.import_module(f"provision.cli.commands.{_name}").register(app)
invocation.set_root(lambda: typer.main.get_command(app))


def _print_error(message: str, *, line_per_node: bool = False) -> None:
    """The one line a refusal prints: user text as written (a newline in it would make it two). A failure of
    several nodes keeps its one line per node, each of which is one line already."""
    text = invocation.carry(message if line_per_node else " ".join(message.splitlines()))
    err_console.print(Text.assemble(("error:", "bold red"), " ", text), soft_wrap=True)


def main() -> None:
    try:
        # Not standalone: Click would print its usage errors in three lines of its own shape and exit itself.
        # The program's name, also under `python -m provision` (usage lines, the completion variable).
        code = app(standalone_mode=False, prog_name="bootstrap")
    except BootstrapError as exc:
        _print_error(str(exc), line_per_node=len(exc.nodes) > 1)
        sys.exit(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
        sys.exit(0)
    except typer.Abort:
        err_console.print(Text("aborted", style="red"))
        sys.exit(1)
    except click.exceptions.ClickException as exc:
        # Usage errors in the same one-line shape as every other refusal (Click's own is three lines).
        usage = isinstance(exc, click.exceptions.UsageError)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path if ctx else 'bootstrap'} --help`)" if usage else ""
        _print_error(exc.format_message().replace("Value error, ", "") + hint)
        sys.exit(2 if usage else exc.exit_code)
    except KeyboardInterrupt:
        err_console.print(Text("interrupted", style="red"))
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
