"""`bootstrap addons list|install|remove`: the cluster add-ons (Volcano, Kubeflow Training Operator v1, Kubeflow
Trainer v2) on a running cluster, through the same phases `up` runs for the ones in `addons.enabled`."""
from __future__ import annotations

import difflib
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from provision.cli.commands.reset import confirm
from provision.cli.option_table import checked, options_of
from provision.cli.options import NodeOptions, Output, OutputOption, YesOption, node_options
from provision.cli.support import echo_json, load_inputs, run_pipeline, warn
from provision.cli.views import console
from provision.errors import InputError
from provision.inputs.addons import ADDON_ORDER, ADDONS, AddonName
from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings, with_overrides
from provision.inputs.validation import addon_warnings

NamesArgument = Annotated[list[str], options_of("addons install").argument(
    "NAMES", help=f"Add-ons: {', '.join(ADDON_ORDER)}.", show_default=False, metavar="NAME...")]


def addon_names(names: list[str]) -> list[AddonName]:
    """The names given, validated, in the order the add-ons install in."""
    for name in names:
        if name not in ADDONS:
            close = difflib.get_close_matches(name, ADDON_ORDER, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"add-ons are {', '.join(ADDON_ORDER)}"
            raise InputError(f"unknown add-on '{name}': {hint}")
    return [name for name in ADDON_ORDER if name in names]


def _require_cluster(cluster: Cluster, inventory: str) -> None:
    from provision.kube.kubeconfig import admin_kubeconfig_path

    if not admin_kubeconfig_path(cluster).exists():
        raise InputError(f"no cluster formed from {inventory} yet (no admin kubeconfig on this machine): "
                         "run `bootstrap up` first")


def _with_enabled(settings: Settings, names: list[AddonName]) -> Settings:
    """The settings with these add-ons enabled, checked as addons.enabled is (an add-on that does not run on this
    Kubernetes, or whose requirements are missing, is refused here as it would be in cluster.yaml, before any
    play)."""
    enabled = [name for name in ADDON_ORDER if name in names or name in settings.addons.enabled]
    return with_overrides(settings, {"addons.enabled": (f"addons install {' '.join(names)}", enabled)})


def register(app: typer.Typer) -> None:
    addons_app = typer.Typer(help="The cluster add-ons (Volcano, Kubeflow Training Operator, Kubeflow Trainer) on a "
                                  "running cluster.", no_args_is_help=True)

    @addons_app.command("list")
    @checked("addons list")
    @node_options
    def list_addons(nodes: NodeOptions, output: OutputOption = Output.text) -> None:
        """Each add-on: its pinned release, whether `up` installs it, and what the cluster runs (through the API)."""
        from provision.kube.addons import installed_addons
        from provision.kube.client import load_api_client
        from provision.kube.kubeconfig import admin_kubeconfig_path

        cluster, settings = load_inputs(nodes)
        _require_cluster(cluster, str(nodes.inventory))
        statuses = installed_addons(load_api_client(admin_kubeconfig_path(cluster)), settings)
        rows: list[dict[str, Any]] = [{"name": s.name, "title": ADDONS[s.name].title, "pinned": settings.addons.version(s.name),
                 "enabled": s.name in settings.addons.enabled, "installed": s.installed, "version": s.version,
                 "ok": s.installed and s.ok, "problems": [p.describe() for p in s.problems] if s.installed else []}
                for s in statuses]
        if output is Output.json:
            echo_json({"addons": rows})
            return
        table = Table(box=None, pad_edge=False, header_style="bold")
        for column in ("add-on", "pinned", "in addons.enabled", "cluster runs", "state"):
            table.add_column(column)
        for row in rows:
            state = (Text("ok", style="green") if row["ok"] else
                     Text(row["problems"][0], style="red") if row["installed"] else Text("not installed", style="dim"))
            table.add_row(f"{row['name']} ({row['title']})", str(row["pinned"]), "yes" if row["enabled"] else "no",
                          str(row["version"] or "-"), state)
        console.print(table)

    @addons_app.command("install")
    @checked("addons install")
    @node_options
    def install(nodes: NodeOptions, names: NamesArgument, output: OutputOption = Output.text) -> None:
        """Install add-ons from their pinned releases and wait until their CRDs are Established and their
        controllers Available (whether or not `addons.enabled` lists them)."""
        chosen = addon_names(names)
        cluster, settings = load_inputs(nodes)
        enabled = _with_enabled(settings, chosen)
        _require_cluster(cluster, str(nodes.inventory))
        # The ones addons.enabled lists were warned about with the settings.
        warn(addon_warnings(settings, [name for name in chosen if name not in settings.addons.enabled]))
        run_pipeline(chosen, cluster, enabled, nodes, output=output,
                     title=f"bootstrap addons install {' '.join(chosen)}")

    @addons_app.command("remove")
    @checked("addons remove")
    @node_options
    def remove(nodes: NodeOptions, names: NamesArgument, yes: YesOption = False,
               output: OutputOption = Output.text) -> None:
        """Delete add-ons: their controllers, CRDs (with every object of theirs) and namespaces."""
        chosen = addon_names(names)
        cluster, settings = load_inputs(nodes)
        _require_cluster(cluster, str(nodes.inventory))
        namespaces = ", ".join(ADDONS[name].namespace for name in chosen)
        confirm(f"Delete {', '.join(chosen)}: controllers, CRDs and every object of theirs, namespaces {namespaces}?",
                yes)
        run_pipeline([f"remove_{name}" for name in reversed(chosen)], cluster, settings, nodes, output=output,
                     title=f"bootstrap addons remove {' '.join(chosen)}")

    app.add_typer(addons_app, name="addons")
