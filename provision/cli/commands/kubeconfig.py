"""`bootstrap kubeconfig`: the cluster's admin kubeconfig, as `k0sctl kubeconfig` gives it: printed for a file or a
pipe, merged into ~/.kube/config under a named context, or its path."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from provision.cli import invocation
from provision.cli.option_table import checked, options_of
from provision.errors import InputError

# kubectl's default, where --merge writes (the KUBECONFIG variable names others; --into chooses).
DEFAULT_TARGET = Path("~/.kube/config")

OPTIONS = options_of("kubeconfig")

HELP = """Print the cluster's admin kubeconfig, or merge it into ~/.kube/config.

The admin kubeconfig is the one `bootstrap up` installed on this machine (in the state directory, mode 0600).
Printed on stdout only when stdout is a file or a pipe: it holds the cluster's admin key, which a terminal's
scrollback keeps. The cluster is the one the inventory forms; without --inventory, the only cluster this machine
formed.

\b
Example:
    bootstrap kubeconfig -i hosts.ini > admin.conf
    bootstrap kubeconfig -i hosts.ini --merge             # context bootstrap-<control plane>, made current
    bootstrap kubeconfig --path                           # where it is
"""


def admin_kubeconfig(inventory: Path | None) -> tuple[Path, str]:
    """The admin kubeconfig of the cluster the inventory forms (or of the only one formed here) and its default
    context name; InputError when there is none."""
    from provision.inputs.state import state_root
    from provision.kube.kubeconfig import admin_kubeconfig_path, default_context_name

    if inventory is not None:
        from provision.inputs.inventory import load_inventory

        cluster = load_inventory(inventory)
        path = admin_kubeconfig_path(cluster)
        if not path.is_file():
            raise InputError(f"no cluster formed from {inventory} yet (no admin kubeconfig at {path}): run "
                             "`bootstrap up` first")
        return path, default_context_name(cluster)
    found = sorted(state_root().glob("clusters/*/admin.conf"))
    if len(found) == 1:
        # The cluster's directory is <first control plane>@<address>: the context name follows the control plane.
        return found[0], f"bootstrap-{found[0].parent.name.rsplit('@', 1)[0]}"
    if not found:
        raise InputError(f"no cluster was formed from this machine yet (none under {state_root() / 'clusters'}): "
                         "`bootstrap up` forms one")
    raise InputError(f"{len(found)} clusters were formed from this machine: pass --inventory to choose one")


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def register(app: typer.Typer) -> None:
    @app.command("kubeconfig", help=HELP)
    @checked("kubeconfig")
    def kubeconfig(
        inventory: Annotated[Path | None, OPTIONS.option(
            "--inventory", "-i", envvar="BOOTSTRAP_INVENTORY", show_default=False,
            help="The cluster's inventory (default: the only cluster formed from this machine).")] = None,
        merge: Annotated[bool, OPTIONS.option(
            "--merge", help="Merge it into --into as context --context, made current, instead of printing it.")] = False,
        into: Annotated[Path, OPTIONS.option(
            "--into", help="The kubeconfig --merge writes (created mode 0600 if missing; other contexts kept).")]
            = DEFAULT_TARGET,
        context: Annotated[str | None, OPTIONS.option(
            "--context", metavar="NAME", help="The context name --merge writes (default: bootstrap-<control plane>).",
            show_default=False)] = None,
        path: Annotated[bool, OPTIONS.option("--path", help="Print where it is instead (no secret shown).")] = False,
    ) -> None:
        invocation.remember(inventory=inventory)
        source, default_context = admin_kubeconfig(inventory)
        if path:
            typer.echo(str(source))
            return
        if merge:
            from provision.cli.console import console
            from provision.kube.kubeconfig import merge_kubeconfig

            name = context or default_context
            merged = merge_kubeconfig(source, name, into)
            console.print(f"merged into {merged} as context '{name}' (now current)")
            return
        if stdout_is_terminal():
            raise InputError("the admin kubeconfig holds the cluster's admin key: redirect stdout to a file (say "
                             "admin.conf), or merge it with `bootstrap kubeconfig --merge`, or show where it is with "
                             "`bootstrap kubeconfig --path`")
        typer.echo(source.read_text(), nl=False)
