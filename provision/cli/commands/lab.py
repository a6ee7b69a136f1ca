"""`bootstrap lab up | down | status | ssh NAME`: a local cluster on Vagrant machines (see docs/lab.md)."""
from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from provision.cli import invocation
from provision.cli.option_table import checked, options_of
from provision.cli.options import ConfigOption, VerboseOption, YesOption
from provision.errors import BootstrapError, InputError
from provision.lab.boxes import lab_os_choices

if TYPE_CHECKING:
    from rich.text import Text

    from provision.lab.vagrant import LabFiles


def _base_settings(config: Path | None) -> dict[str, Any]:
    """The user's own cluster.yaml, checked, as the mapping the lab lays its keys over."""
    from provision.inputs.settings import parse_settings, read_settings_document

    if config is None:
        return {}
    document = read_settings_document(config)
    parse_settings(document, str(config))
    return document or {}


def _cluster_up(files: LabFiles, verbose: bool) -> Path:
    """The same pipeline as `bootstrap up` (imported late: the other lab commands do not need it); returns the
    admin kubeconfig it leaves on this machine."""
    from provision.cli.commands.up import run_up_command
    from provision.cli.options import NodeOptions
    from provision.inputs.inventory import load_inventory
    from provision.kube.kubeconfig import admin_kubeconfig_path

    # A failed run's resume hint names `bootstrap up` on the lab's own files.
    invocation.remember(inventory=files.inventory, config=files.settings)
    run_up_command(NodeOptions(inventory=files.inventory, config=files.settings, verbose=verbose))
    return admin_kubeconfig_path(load_inventory(files.inventory))


def _lab_line(text: str) -> Text:
    from rich.text import Text

    return Text.assemble(("lab:", "bold"), f" {text}")


def _vagrant_line(line: str) -> None:
    from rich.text import Text

    from provision.cli.console import console

    console.print(Text(f"  {line}", style="dim"), soft_wrap=True)


UP = options_of("lab up")
SSH = options_of("lab ssh")


@checked("lab up")
def up(
    workers: Annotated[int | None, UP.option("--workers", help="Workers besides the control plane (LAB_WORKERS).",
                                             show_default=False)] = None,
    cpus: Annotated[int | None, UP.option("--cpus", help="CPUs per machine (LAB_CPUS).", show_default=False)] = None,
    memory: Annotated[int | None, UP.option("--memory", help="Memory per machine in MiB (LAB_MEMORY).",
                                            show_default=False)] = None,
    os_name: Annotated[str | None, UP.option(
        "--os", help=f"{', '.join(lab_os_choices())} (LAB_OS).", show_default=False)] = None,
    box: Annotated[str | None, UP.option("--box", help="A box name that replaces the one --os picks (LAB_BOX).",
                                         show_default=False)] = None,
    provider: Annotated[str | None, UP.option("--provider", help="libvirt or virtualbox (LAB_PROVIDER).",
                                              show_default=False)] = None,
    libvirt_driver: Annotated[str | None, UP.option(
        "--libvirt-driver", help="kvm, or qemu on hosts without hardware virtualisation (LAB_LIBVIRT_DRIVER).",
        show_default=False)] = None,
    network: Annotated[str | None, UP.option(
        "--network", help="The private network, e.g. 192.168.56.0/24 (LAB_NETWORK).", show_default=False)] = None,
    config: ConfigOption = None,
    machines_only: Annotated[bool, UP.option(
        "--machines-only", help="Stop once the machines answer SSH: write the inventory and settings only.")] = False,
    verbose: VerboseOption = False,
) -> None:
    """Make the machines (`vagrant up`), write their inventory, then run `bootstrap up` on them (CPU smoke test)."""
    from provision.cli.console import console
    from provision.lab.vagrant import Lab, LabOptions

    options = LabOptions(workers=workers, cpus=cpus, memory_mb=memory, os=os_name, box=box, provider=provider,
                         libvirt_driver=libvirt_driver, network=network)
    base = _base_settings(config)
    lab = Lab()
    console.print(_lab_line("vagrant up (the first run downloads the box)"))
    files = lab.up(options, base, on_line=_vagrant_line)
    console.print(_lab_line(f"machines answer SSH; inventory {files.inventory}, settings {files.settings}"),
                  soft_wrap=True)
    if machines_only:
        chosen = replace(invocation.given(), inventory=files.inventory, config=files.settings)
        console.print(f"next: {invocation.complete('bootstrap up', chosen)}", soft_wrap=True)
        return
    kubeconfig = _cluster_up(files, verbose)
    # The API server listens on the control plane's private address, which this machine reaches directly.
    console.print(_lab_line(f"the cluster is up. From this machine:\n"
                            f"  export KUBECONFIG={shlex.quote(str(kubeconfig))}\n  kubectl get nodes -o wide\n"
                            f"  {invocation.complete('bootstrap lab ssh lab-control-plane')}     # log in to a machine\n"
                            f"  {invocation.complete('bootstrap lab down --yes')}                # destroy the "
                            "machines and the lab's files"),
                  soft_wrap=True)


@checked("lab down")
def down(yes: YesOption = False) -> None:
    """Destroy the lab's machines and remove its inventory, known_hosts and settings."""
    from provision.cli.console import console
    from provision.lab.vagrant import Lab

    if not yes and not typer.confirm("Destroy the lab machines?", default=False):
        raise typer.Exit(1)
    Lab().down(on_line=_vagrant_line)
    console.print(_lab_line("machines destroyed, generated files removed"))


@checked("lab status")
def status() -> None:
    """Each lab machine's state (as Vagrant reports it) and private address."""
    from rich.table import Table

    from provision.cli.console import console
    from provision.lab.vagrant import Lab

    table = Table(box=None, pad_edge=False)
    for column in ("machine", "state", "address"):
        table.add_column(column)
    for machine in Lab().status():
        table.add_row(machine.name, machine.state, machine.address or "-")
    console.print(table)


@checked("lab ssh")
def ssh(ctx: typer.Context, name: Annotated[str, SSH.argument("NAME", help="A lab machine, e.g. lab-control-plane.")]
        ) -> None:
    """Log in to a lab machine (or run the command after NAME) with its recorded host key checked."""
    from provision.lab.vagrant import Lab

    argv = Lab().ssh_argv(name, list(ctx.args))
    if shutil.which(argv[0]) is None:
        raise InputError("ssh (the OpenSSH client) is not installed: install openssh-client")
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        raise BootstrapError(f"could not run ssh: {exc}") from None


def register(app: typer.Typer) -> None:
    lab_app = typer.Typer(help="A local cluster on Vagrant machines: made by the Vagrantfile, prepared by the "
                               "toolkit. Settings: lab.yml beside the Vagrantfile (see docs/lab.md).",
                          no_args_is_help=True)
    lab_app.command("up")(up)
    lab_app.command("down")(down)
    lab_app.command("status")(status)
    lab_app.command("ssh", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(ssh)
    app.add_typer(lab_app, name="lab")
