"""Options shared by several commands, declared once so every command spells them the same."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

InventoryOption = Annotated[Path, typer.Option(
    "--inventory", "-i", help="Ansible inventory (INI or YAML) with [control_plane] and [workers] groups.",
    envvar="BOOTSTRAP_INVENTORY", show_default=False)]
ConfigOption = Annotated[Path | None, typer.Option(
    "--config", "-c", help="Cluster settings (cluster.yaml); every setting has a working default.",
    envvar="BOOTSTRAP_CONFIG", show_default=False)]
VerboseOption = Annotated[bool, typer.Option(
    "--verbose", "-v", help="Show Ansible's own output instead of the live progress view.")]
AcceptHostKeysOption = Annotated[bool, typer.Option(
    "--accept-new-host-keys",
    help="Trust and record host keys of nodes seen for the first time (changed keys are still refused).")]
AskBecomePassOption = Annotated[bool, typer.Option(
    "--ask-become-pass", "-K", help="Ask for the sudo password instead of requiring passwordless sudo.")]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
