"""`bootstrap config show|validate`: the effective settings, and a check of inventory + settings."""
from __future__ import annotations

import typer
import yaml
from rich.syntax import Syntax
from rich.table import Table

from provision.cli import invocation
from provision.cli.options import ConfigOption, InventoryOption, Output, OutputOption
from provision.cli.support import echo_json, warn
from provision.cli.views import literal_console
from provision.inputs import versions
from provision.inputs.settings import Settings, load_settings
from provision.inputs.sources import resolve_sources
from provision.inputs.validation import load_cluster, settings_warnings


def resolved_versions(settings: Settings) -> dict[str, object]:
    """What the versions table chose for these settings, beyond the values the settings show themselves."""
    release = versions.kubernetes_release(settings.kubernetes.minor_number)
    return {
        "kubeadm_api": versions.KUBEADM_API_VERSION,
        "sandbox_image": f"{resolve_sources(settings).image_repository}/pause:{release.pause}",
        "containerd": f"{versions.shown_version(release.containerd_minimum)} or newer"
                      + (f" ({versions.shown_version(release.containerd_warn_below)}+ recommended)"
                         if release.containerd_minimum < release.containerd_warn_below else ""),
        # A smoke_test.image set in cluster.yaml is used whatever the GPUs; left out, it follows the oldest GPU.
        "smoke_image_per_generation": {g.name: settings.smoke_test.image if "image" in settings.smoke_test.model_fields_set
                                       else versions.smoke_image_for([g.name]) for g in versions.GPU_GENERATIONS},
        "checked_on": versions.CHECKED_ON.isoformat(),
    }


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Inspect and check cluster settings and inventories.", no_args_is_help=True)

    @config_app.command("show")
    def show(config: ConfigOption = None, output: OutputOption = Output.text) -> None:
        """Print the effective settings (defaults filled in), the package and image sources they resolve to, and
        what the versions table chose for them."""
        invocation.remember(config=config)
        settings = load_settings(config)
        warn(settings_warnings(settings))
        document = settings.model_dump(mode="json") | {"resolved_sources": resolve_sources(settings).as_dict(),
                                                       "resolved_versions": resolved_versions(settings)}
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
        invocation.remember(inventory=inventory, config=config)
        cluster, settings = load_cluster(inventory, config)
        warn([*cluster.warnings, *settings_warnings(settings)])
        if output is Output.json:
            echo_json({
                "valid": True, "inventory": str(inventory), "config": str(config) if config else None,
                "warnings": list(cluster.warnings),
                "nodes": [{"name": n.name, "host": n.host, "role": n.role, "address": n.address, "ip": n.ip,
                           "port": n.port, "user": n.user, "gpu": n.gpu} for n in cluster.nodes],
                "kubernetes": {"version": settings.kubernetes.version, "pod_cidr": settings.kubernetes.pod_cidr,
                               "service_cidr": settings.kubernetes.service_cidr},
                "mirrors": settings.mirrors.profile,
            })
            return
        table = Table(title=f"{inventory}: valid", title_justify="left")
        for column in ("node", "role", "address", "user", "gpu"):
            table.add_column(column)
        for node in cluster.nodes:
            # The inventory's host name beside the node's name where they differ (k8s_nodename).
            named = node.name if node.name == node.host else f"{node.name} ({node.host})"
            table.add_row(named, node.role.replace("_", "-"), f"{node.address}:{node.port}", node.user, node.gpu)
        literal_console().print(table)
        typer.echo(f"Kubernetes {settings.kubernetes.version}, pods {settings.kubernetes.pod_cidr}, "
                   f"services {settings.kubernetes.service_cidr}, mirrors: {settings.mirrors.profile}")

    app.add_typer(config_app, name="config")
