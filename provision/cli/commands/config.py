"""`bootstrap config show|validate`: the effective settings, and a check of inventory + settings."""
from __future__ import annotations

import typer
import yaml
from rich.syntax import Syntax
from rich.table import Table

from provision.cli.options import ConfigOption, InventoryOption, Output, OutputOption
from provision.cli.support import echo_json
from provision.cli.views import literal_console
from provision.inputs.settings import load_settings
from provision.inputs.sources import resolve_sources
from provision.inputs.validation import load_cluster


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Inspect and check cluster settings and inventories.", no_args_is_help=True)

    @config_app.command("show")
    def show(config: ConfigOption = None, output: OutputOption = Output.text) -> None:
        """Print the effective settings (defaults filled in) and the package and image sources they resolve to."""
        settings = load_settings(config)
        document = settings.model_dump(mode="json") | {"resolved_sources": resolve_sources(settings).as_dict()}
        if output is Output.json:
            echo_json(document)
            return
        text = yaml.safe_dump(document, sort_keys=False)
        console = literal_console()
        if console.is_terminal:
            console.print(Syntax(text, "yaml"))
        else:
            typer.echo(text, nl=False)

    @config_app.command("validate")
    def validate(inventory: InventoryOption, config: ConfigOption = None, output: OutputOption = Output.text) -> None:
        """Check the inventory and settings without connecting to any node; print the nodes it describes."""
        cluster, settings = load_cluster(inventory, config)
        if output is Output.json:
            echo_json({
                "valid": True, "inventory": str(inventory), "config": str(config) if config else None,
                "nodes": [{"name": n.name, "role": n.role, "address": n.address, "port": n.port, "user": n.user,
                           "gpu": n.gpu} for n in cluster.nodes],
                "kubernetes": {"version": settings.kubernetes.version, "pod_cidr": settings.kubernetes.pod_cidr,
                               "service_cidr": settings.kubernetes.service_cidr},
                "mirrors": settings.mirrors.profile,
            })
            return
        table = Table(title=f"{inventory}: valid", title_justify="left")
        for column in ("node", "role", "address", "user", "gpu"):
            table.add_column(column)
        for node in cluster.nodes:
            table.add_row(node.name, node.role.replace("_", "-"), f"{node.address}:{node.port}", node.user, node.gpu)
        literal_console().print(table)
        typer.echo(f"Kubernetes {settings.kubernetes.version}, pods {settings.kubernetes.pod_cidr}, "
                   f"services {settings.kubernetes.service_cidr}, mirrors: {settings.mirrors.profile}")

    app.add_typer(config_app, name="config")
