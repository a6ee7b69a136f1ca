"""`bootstrap config show|validate|check-sources`: the effective settings, a check of inventory + settings, and the
sources proven from the nodes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from provision.cli import invocation
from provision.cli.option_table import checked, options_of
from provision.cli.options import ConfigOption, InventoryOption, NodeOptions, Output, OutputOption, node_options
from provision.errors import BootstrapError

if TYPE_CHECKING:
    from provision.inputs.settings import Settings


def resolved_versions(settings: Settings) -> dict[str, object]:
    """What the versions table chose for these settings, beyond the values the settings show themselves."""
    from provision.inputs import versions
    from provision.inputs.sources import resolve_sources

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


@checked("config show")
def show(config: ConfigOption = None, output: OutputOption = Output.text) -> None:
    """Print the effective settings (defaults filled in), the package and image sources they resolve to, and
    what the versions table chose for them."""
    import yaml

    from provision.cli.console import echo_json, literal_console, warn
    from provision.inputs.settings import load_settings
    from provision.inputs.sources import resolve_sources
    from provision.inputs.validation import settings_warnings

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
        from rich.syntax import Syntax

        console.print(Syntax(text, "yaml"))
    else:
        typer.echo(text, nl=False)


@checked("config validate")
def validate(inventory: InventoryOption, config: ConfigOption = None, output: OutputOption = Output.text) -> None:
    """Check the inventory and settings without connecting to any node; print the nodes it describes."""
    from provision.bundle.check import check_offline_bundle
    from provision.cli.console import echo_json, warn
    from provision.inputs.validation import load_cluster, settings_warnings

    invocation.remember(inventory=inventory, config=config)
    cluster, settings = load_cluster(inventory, config)
    warn([*cluster.warnings, *settings_warnings(settings)])
    check_offline_bundle(settings, cluster)
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
    from rich.table import Table

    from provision.cli.console import literal_console

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


@checked("config check-sources")
@node_options
def check_sources_command(nodes: NodeOptions, output: OutputOption = Output.text) -> None:
    """Request, from every node (the path their packages will take), the index of each package repository
    and manifest `up` would fetch: Release/InRelease for apt, repomd.xml for dnf, Calico's and the enabled
    add-ons' manifests on the first control plane. Each one that fails is named with the setting that changes
    it. Reads only; nothing is changed on the nodes."""
    from provision.cli.support import ask_become_password, echo_json, load_inputs
    from provision.nodes.preflight.run import run_preflight
    from provision.nodes.sources_check import check_sources

    cluster, settings = load_inputs(nodes)
    become_password = ask_become_password(nodes.ask_become_pass)
    report = run_preflight(cluster, settings, become_password=become_password)
    found = check_sources(cluster, settings, report.sources_targets, become_password=become_password)
    # A node preflight could not read (unreachable, or a refused system) cannot be asked either.
    unasked = [f"{n.name}: not asked ({n.status} in preflight: `bootstrap preflight` says why)"
               for n in report.nodes if n.sources_target is None]
    lines = found.lines() + unasked
    if output is Output.json:
        echo_json({"ok": not lines, "problems": lines,
                   "nodes": {name: [{"name": a.index.name, "url": a.index.url, "setting": a.index.setting,
                                     "ok": a.ok, "detail": a.detail} for a in answers]
                             for name, answers in found.answers.items()}})
    else:
        for name, answers in found.answers.items():
            for answer in answers:
                typer.echo(f"{'ok  ' if answer.ok else 'FAIL'} {name}: {answer.index.name} {answer.index.url}: "
                           f"{answer.detail}")
    if lines:
        count = len(lines)
        raise BootstrapError(f"{count} source{'s' if count > 1 else ''} cannot be used from the nodes:\n"
                             + "\n".join(lines))


@checked("config schema")
def schema(out: Annotated[Path | None, options_of("config schema").option(
        "--out", "-o", metavar="FILE", show_default=False,
        help="Write it to this new file (never over one that exists; editors read it through init's "
             "yaml-language-server modeline) instead of stdout.")] = None) -> None:
    """Print the JSON Schema of cluster.yaml, made from the settings models: every key, its type, its default,
    what it accepts; editors with the YAML language server complete and check cluster.yaml with it."""
    document = json.dumps(settings_schema(), indent=2) + "\n"
    if out is None:
        typer.echo(document, nl=False)
        return
    from provision.cli.console import console

    write_schema(out)
    console.print(f"wrote {out}")


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Inspect and check cluster settings and inventories.", no_args_is_help=True)
    config_app.command("show")(show)
    config_app.command("validate")(validate)
    config_app.command("check-sources")(check_sources_command)
    config_app.command("schema")(schema)
    app.add_typer(config_app, name="config")


def settings_schema() -> dict[str, object]:
    """cluster.yaml's JSON Schema (draft 2020-12, as pydantic writes it), from the settings models themselves."""
    from provision.inputs.settings import Settings

    schema = Settings.model_json_schema(mode="validation")
    # A section whose keys are all commented out reads as null, which the settings take as all defaults
    # (parse_settings): the schema says so too.
    schema["properties"] = {name: {"anyOf": [section, {"type": "null"}]} if "$ref" in section else section
                            for name, section in schema["properties"].items()}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "cluster-bootstrap cluster.yaml",
            **{key: value for key, value in schema.items() if key != "title"}}


def write_schema(path: Path) -> None:
    """The schema into `path`, a new file (option_table's NEW_FILE: never over one that exists)."""
    with path.open("x") as handle:
        handle.write(json.dumps(settings_schema(), indent=2) + "\n")
