"""The `bootstrap` command line: thin. It parses arguments, calls the library and renders what comes back."""
from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console
from rich.markup import escape

from provision.errors import BootstrapError

# One module per command under provision/commands/, each exposing register(app).
COMMAND_MODULES: tuple[str, ...] = ("config", "lab", "preflight", "prepare", "smoke_test", "up", "reset", "node")

HELP = """bootstrap: turn machines you can reach over SSH into a Kubernetes cluster with working NVIDIA GPUs.

It reads an Ansible inventory (--inventory) and optional settings (--config cluster.yaml), checks the
machines, prepares them, forms the cluster with kubeadm, installs Calico and the NVIDIA device plugin,
verifies every node and GPU, and proves the GPUs work with a CIFAR-10 training Job.

\b
Example usage:
    bootstrap preflight --inventory hosts.ini
    bootstrap up --inventory hosts.ini --config cluster.yaml
"""

app = typer.Typer(help=HELP, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]})
err_console = Console(stderr=True)

for _name in COMMAND_MODULES:
    importlib.import_module(f"provision.cli.commands.{_name}").register(app)


def main() -> None:
    try:
        app()
    except BootstrapError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("[red]interrupted[/]")
        sys.exit(130)
