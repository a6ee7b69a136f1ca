"""`bootstrap config show`: the effective settings after defaults, profile and overrides."""
from __future__ import annotations

import typer
import yaml
from rich.console import Console
from rich.syntax import Syntax

from provision.commands.options import ConfigOption
from provision.mirrors import resolve_sources
from provision.settings import load_settings


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Inspect cluster settings.", no_args_is_help=True)

    @config_app.command("show")
    def show(config: ConfigOption = None) -> None:
        """Print the effective settings (defaults filled in) and the package and image sources they resolve to."""
        settings = load_settings(config)
        document = settings.model_dump(mode="json") | {"resolved_sources": resolve_sources(settings).as_dict()}
        text = yaml.safe_dump(document, sort_keys=False)
        console = Console()
        if console.is_terminal:
            console.print(Syntax(text, "yaml"))
        else:
            typer.echo(text, nl=False)

    app.add_typer(config_app, name="config")
