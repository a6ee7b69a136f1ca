"""`bootstrap addons list|install|remove`: the cluster add-ons (inputs/addons.py's table: Volcano, the Kubeflow
training operators, KServe, Pipelines, GPU labels and metrics, ...) on a running cluster, through the same phases
`up` runs for the ones in `addons.enabled`."""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from provision.cli import complete, invocation
from provision.cli.commands.reset import confirm
from provision.cli.option_table import checked, options_of
from provision.cli.options import ConfigOption, NodeOptions, Output, OutputOption, YesOption, node_options
from provision.errors import InputError
from provision.inputs.addons import ADDON_ORDER, ADDONS, AddonName

if TYPE_CHECKING:
    from provision.inputs.inventory import Cluster
    from provision.inputs.settings import Settings

# Every add-on of the table, by title (the group's help, and `bootstrap --help`'s line for it).
ADDONS_SUMMARY = f"The cluster add-ons ({', '.join(ADDONS[name].title for name in ADDON_ORDER)}) on a running cluster."

NamesArgument = Annotated[list[str], options_of("addons install").argument(
    "NAMES", help=f"Add-ons: {', '.join(ADDON_ORDER)}.", show_default=False, metavar="NAME...",
    autocompletion=complete.addons)]
LIST = options_of("addons list")


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


def _cluster_statuses(cluster: Cluster | None, settings: Settings) -> dict[str, Any] | None:
    """What the cluster runs of each add-on, asked through the API; None without a cluster to ask."""
    if cluster is None:
        return None
    from provision.kube.kubeconfig import admin_kubeconfig_path

    kubeconfig = admin_kubeconfig_path(cluster)
    if not kubeconfig.exists():
        return None
    from provision.kube.addons import installed_addons
    from provision.kube.client import load_api_client

    return {s.name: s for s in installed_addons(load_api_client(kubeconfig), settings)}


def _with_enabled(settings: Settings, names: list[AddonName]) -> Settings:
    """The settings with these add-ons enabled, checked as addons.enabled is (an add-on that does not run on this
    Kubernetes, or whose requirements are missing, is refused here as it would be in cluster.yaml, before any
    play)."""
    from provision.inputs.settings import with_overrides

    enabled = [name for name in ADDON_ORDER if name in names or name in settings.addons.enabled]
    return with_overrides(settings, {"addons.enabled": (f"addons install {' '.join(names)}", enabled)})


@checked("addons list")
def list_addons(inventory: Annotated[Path | None, LIST.option(
                    "--inventory", "-i", envvar="BOOTSTRAP_INVENTORY", show_default=False,
                    help="The cluster's inventory: adds what the cluster runs (through the API), once it is "
                         "formed. Without it, the pinned releases and what the settings enable.")] = None,
                config: ConfigOption = None, output: OutputOption = Output.text) -> None:
    """Each add-on: its pinned release, whether `up` installs it, and what the cluster runs (through the API)."""
    from rich.table import Table
    from rich.text import Text

    from provision.cli.console import console, echo_json, warn
    from provision.inputs.settings import load_settings
    from provision.inputs.validation import load_cluster, settings_warnings

    invocation.remember(inventory=inventory, config=config)
    if inventory is not None:
        cluster, settings = load_cluster(inventory, config)
        warn([*cluster.warnings, *settings_warnings(settings)])
    else:
        cluster, settings = None, load_settings(config)
        warn(settings_warnings(settings))
    statuses = _cluster_statuses(cluster, settings)
    rows: list[dict[str, Any]] = []
    for name in ADDON_ORDER:
        found = statuses.get(name) if statuses is not None else None
        rows.append({"name": name, "title": ADDONS[name].title, "pinned": settings.addons.version(name),
                     "enabled": name in settings.addons.enabled,
                     # None: no cluster asked (no inventory, or none formed from it yet).
                     "installed": found.installed if found else None if statuses is None else False,
                     "version": found.version if found else None,
                     "ok": bool(found and found.installed and found.ok),
                     "problems": [p.describe() for p in found.problems] if found and found.installed else []})
    if output is Output.json:
        echo_json({"addons": rows, "cluster": statuses is not None})
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("add-on", "pinned", "in addons.enabled", "cluster runs", "state"):
        table.add_column(column)
    for row in rows:
        state = (Text("-", style="dim") if row["installed"] is None else Text("ok", style="green") if row["ok"]
                 else Text(row["problems"][0], style="red") if row["installed"]
                 else Text("not installed", style="dim"))
        table.add_row(f"{row['name']} ({row['title']})", str(row["pinned"]), "yes" if row["enabled"] else "no",
                      str(row["version"] or "-"), state)
    console.print(table)
    if statuses is None:
        why = (f"no cluster formed from {inventory} yet" if inventory is not None
               else "no --inventory: the cluster was not asked")
        console.print(f"{why}; `bootstrap addons install NAME...` installs one on a running cluster",
                      style="dim", soft_wrap=True)


@checked("addons install")
@node_options
def install(nodes: NodeOptions, names: NamesArgument, output: OutputOption = Output.text) -> None:
    """Install add-ons from their pinned releases and wait until their CRDs are Established and their
    controllers Available (whether or not `addons.enabled` lists them)."""
    from provision.cli.support import load_inputs, run_pipeline, warn
    from provision.inputs.validation import addon_warnings

    chosen = addon_names(names)
    cluster, settings = load_inputs(nodes)
    enabled = _with_enabled(settings, chosen)
    _require_cluster(cluster, str(nodes.inventory))
    # The ones addons.enabled lists were warned about with the settings.
    warn(addon_warnings(settings, [name for name in chosen if name not in settings.addons.enabled]))
    run_pipeline(chosen, cluster, enabled, nodes, output=output,
                 title=f"bootstrap addons install {' '.join(chosen)}")


@checked("addons remove")
@node_options
def remove(nodes: NodeOptions, names: NamesArgument, yes: YesOption = False,
           output: OutputOption = Output.text) -> None:
    """Delete add-ons: their controllers, CRDs (with every object of theirs) and namespaces."""
    from provision.cli.support import load_inputs, run_pipeline

    chosen = addon_names(names)
    cluster, settings = load_inputs(nodes)
    _require_cluster(cluster, str(nodes.inventory))
    namespaces = ", ".join(ADDONS[name].namespace for name in chosen)
    confirm(f"Delete {', '.join(chosen)}: controllers, CRDs and every object of theirs, namespaces {namespaces}?",
            yes)
    run_pipeline([f"remove_{name}" for name in reversed(chosen)], cluster, settings, nodes, output=output,
                 title=f"bootstrap addons remove {' '.join(chosen)}")


def register(app: typer.Typer) -> None:
    addons_app = typer.Typer(help=ADDONS_SUMMARY, no_args_is_help=True)
    addons_app.command("list")(list_addons)
    addons_app.command("install")(install)
    addons_app.command("remove")(remove)
    app.add_typer(addons_app, name="addons")
