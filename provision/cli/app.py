"""The `bootstrap` command line: thin. It parses arguments, calls the library and renders what comes back."""
from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from typer import _click as click  # Typer (pinned to 0.29.x) carries its own copy of Click
from typer._completion_classes import completion_init
from typer.core import TyperGroup, _TyperParameter

from provision.cli import invocation
from provision.cli.option_table import STATE_DIRECTORY
from provision.errors import BootstrapError
from provision.inputs.addons import ADDON_ORDER, ADDONS

# The state directory's variable (provision.inputs.state.STATE_DIR_ENV, which tests/test_cli_startup.py holds
# equal): named here so that `--help` does not import the state module's models.
STATE_DIR_ENV = "BOOTSTRAP_STATE_DIR"


@dataclass(frozen=True)
class CommandEntry:
    """A command of `bootstrap`: the module under provision/cli/commands/ whose register(app) declares it, and the
    first line of its help (what `bootstrap --help` lists; tests/test_cli_startup.py holds it to the command's own)."""

    module: str
    summary: str


# Every command, in the order `bootstrap --help` lists them. A command's module is imported when the command is
# run, asked for its help or completed, never before: `bootstrap --help` imports none of them, and no command pays
# for another's imports (the kubernetes client, paramiko, Ansible, the settings models).
COMMANDS: dict[str, CommandEntry] = {
    "init": CommandEntry("init", "Write a commented hosts.ini and cluster.yaml for your machines, ready for `bootstrap up`."),
    "preflight": CommandEntry("preflight", "Run the pre-flight checks on every node in the inventory, without changing "
                                           "anything."),
    "prepare": CommandEntry("prepare", "Prepare the nodes for kubeadm; the first phase of `bootstrap up`, safe to run "
                                       "again at any time."),
    "up": CommandEntry("up", "Form the cluster: preflight, prepare, control plane, network, join, GPU, verify, smoke "
                             "test."),
    "status": CommandEntry("status", "The cluster as this machine knows it: nodes, versions, phases done, the last "
                                     "run."),
    "kubeconfig": CommandEntry("kubeconfig", "Print the cluster's admin kubeconfig, or merge it into ~/.kube/config."),
    "smoke-test": CommandEntry("smoke_test", "Train CIFAR-10 on the cluster's GPUs and judge the run: PASS with "
                                             "accuracy and time, or FAIL with the cause read from the API."),
    "reset": CommandEntry("reset", "Take nodes out of the cluster and wipe Kubernetes from them, leaving nothing "
                                   "behind."),
    "down": CommandEntry("reset", "Tear the whole cluster down: every node reset, this machine's kubeconfig and "
                                  "context removed."),
    "upgrade": CommandEntry("upgrade", "Upgrade the running cluster: control planes one at a time (kubeadm upgrade "
                                       "apply, then node), then each worker drained, upgraded and uncordoned; Calico, "
                                       "the device plugin and add-ons follow; verify and the smoke test close."),
    "doctor": CommandEntry("doctor", "Find what is wrong on a running cluster, without changing anything, and say the "
                                     "fix."),
    "support-bundle": CommandEntry("support_bundle", "Collect what a maintainer needs to tell what went wrong into "
                                                     "one archive, with every secret removed."),
    "completion": CommandEntry("completion", "Print the shell completion script."),
    "config": CommandEntry("config", "Inspect and check cluster settings and inventories."),
    "lab": CommandEntry("lab", "A local cluster on Vagrant machines: made by the Vagrantfile, prepared by the "
                               "toolkit."),
    "bundle": CommandEntry("bundle", "An offline bundle: build it, verify it, serve it to the nodes."),
    "node": CommandEntry("node", "Add a worker or control plane to a running cluster, or take one out."),
    "addons": CommandEntry("addons", f"The cluster add-ons ({', '.join(ADDONS[name].title for name in ADDON_ORDER)}) on "
                                     "a running cluster."),
    "etcd": CommandEntry("etcd", "Snapshots of the cluster's etcd, and restoring one."),
    "certs": CommandEntry("certs", "kubeadm's certificates on the control planes: their expiry, and their renewal."),
}
# The modules, each once (one may declare several commands: reset and down).
COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(entry.module for entry in COMMANDS.values()))


def _coerce_only_what_runs() -> None:
    """Typer coerces every parameter's value through a pydantic TypeAdapter, built (pydantic imported) on first
    use: for a value left at None too, and while the shell asks for completions. Neither needs it: None for a
    parameter that is neither required nor multi-valued stays None (Typer's coercion gives None back), and a
    completion (resilient parsing) reads the words as typed. So `bootstrap COMMAND --help` and a TAB answer without
    importing pydantic; a command that runs has its values coerced as Typer does (typer is pinned to 0.29.x)."""
    coerce = _TyperParameter.process_value

    def process_value(self: _TyperParameter, ctx: click.Context, value: Any) -> Any:
        if ctx.resilient_parsing:
            return value
        if value is None and not self.required and not self.multiple and self.nargs == 1:
            return self.callback(ctx, self, value) if self.callback is not None else None
        return coerce(self, ctx, value)

    _TyperParameter.process_value = process_value  # type: ignore[method-assign]


_coerce_only_what_runs()


class _Commands(dict[str, click.Command]):
    """The root's commands by name, each module imported when its command is first looked up; listed whole (a
    test walking the tree, `bootstrap <TAB>` with nothing typed), every module is."""

    def _load(self, name: str) -> None:
        if name in COMMANDS and not dict.__contains__(self, name):
            self.update(load_commands(COMMANDS[name].module))

    def _load_all(self) -> None:
        for name in COMMANDS:
            self._load(name)

    def get(self, name: str, default: Any = None) -> Any:
        self._load(name)
        return dict.get(self, name, default)

    def __getitem__(self, name: str) -> click.Command:
        self._load(name)
        return dict.__getitem__(self, name)

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self._load(name)
        return dict.__contains__(self, name)

    def __iter__(self) -> Any:
        self._load_all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._load_all()
        return dict.__len__(self)

    def keys(self) -> Any:
        self._load_all()
        return dict.keys(self)

    def values(self) -> Any:
        self._load_all()
        return dict.values(self)

    def items(self) -> Any:
        self._load_all()
        return dict.items(self)


class CommandGroup(TyperGroup):
    """`bootstrap`'s commands, each module imported on first use (COMMANDS)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        commands = _Commands()
        commands.update(dict.items(self.commands) if isinstance(self.commands, dict) else self.commands.items())
        self.commands = commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The summaries from the table: listing the commands imports none of them.
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, click.utils.make_default_short_help(entry.summary, limit)) for name, entry in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def load_commands(module: str) -> dict[str, click.Command]:
    """The commands `provision.cli.commands.<module>` declares, as Click commands."""
    declared = typer.Typer(rich_markup_mode=None, add_completion=False)
    importlib.import_module(f"provision.cli.commands.{module}").register(declared)
    return dict(typer.main.get_group(declared).commands)


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

app = typer.Typer(help=HELP, cls=CommandGroup, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]})


def _print_version(value: bool) -> None:
    if value:
        from provision import __version__

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

invocation.set_root(lambda: typer.main.get_command(app))


def _print_error(message: str, *, line_per_node: bool = False) -> None:
    """The one line a refusal prints: user text as written (a newline in it would make it two). A failure of
    several nodes keeps its one line per node, each of which is one line already."""
    from rich.text import Text

    from provision.cli.console import literal_console

    text = invocation.carry(message if line_per_node else " ".join(message.splitlines()))
    literal_console(stderr=True).print(Text.assemble(("error:", "bold red"), " ", text), soft_wrap=True)


def main() -> None:
    # The commands printed for the user name the tool as it can be run (cli/invocation.py).
    invocation.set_program(sys.argv[0])
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
        typer.secho("aborted", fg="red", err=True)
        sys.exit(1)
    except click.exceptions.ClickException as exc:
        # Usage errors in the same one-line shape as every other refusal (Click's own is three lines).
        usage = isinstance(exc, click.exceptions.UsageError)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path if ctx else 'bootstrap'} --help`)" if usage else ""
        _print_error(exc.format_message().replace("Value error, ", "") + hint)
        sys.exit(2 if usage else exc.exit_code)
    except KeyboardInterrupt:
        typer.secho("interrupted", fg="red", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
