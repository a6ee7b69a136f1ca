"""`bootstrap etcd snapshot`: a snapshot of the cluster's etcd, taken on a healthy control plane, checked, copied
to this machine and checked again; `bootstrap etcd snapshots`: the snapshots here and on each control plane, and
the snapshot timers; `bootstrap etcd restore SNAPSHOT`: etcd restored on every control plane (docs/etcd.md)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from provision.cli.commands.reset import confirm
from provision.cli.option_table import checked, options_of
from provision.cli.options import NodeOptions, Output, OutputOption, YesOption, node_options
from provision.errors import InputError

if TYPE_CHECKING:
    from provision.inputs.inventory import Cluster
    from provision.inputs.settings import Settings
    from provision.nodes.etcd.snapshot import LocalSnapshot
    from provision.phases import PhaseContext

SNAPSHOT = options_of("etcd snapshot")
SNAPSHOTS = options_of("etcd snapshots")
RESTORE = options_of("etcd restore")
DEFRAG = options_of("etcd defrag")


def _snapshot_document(ctx: PhaseContext) -> dict[str, Any]:
    snapshot = ctx.results.etcd_snapshot
    return {"snapshot": snapshot.summary() if snapshot else None}


@checked("etcd snapshot")
@node_options
def snapshot(
    nodes: NodeOptions,
    directory: Annotated[Path | None, SNAPSHOT.option(
        "--dir", help="Where the snapshot goes, a folder of your own (default: the cluster's state directory on "
                      "this machine).",
        show_default=False)] = None,
    output: OutputOption = Output.text,
) -> None:
    """Take a snapshot of etcd on a healthy control plane, check it (revision, keys, hash), keep it among the
    node's last etcd.snapshot_keep, copy it here and check the copy; here too the last etcd.snapshot_keep are
    kept. The snapshot holds every Secret of the cluster: it is written readable by you only."""
    from provision.cli.console import console
    from provision.cli.support import load_inputs, run_pipeline
    from provision.phases import ETCD_SNAPSHOT_PHASES
    from provision.phases.engine import EtcdOptions

    cluster, settings = load_inputs(nodes)
    if settings.etcd.pki_key_file is not None:
        from provision.nodes.etcd.offsite import read_passphrase

        read_passphrase(Path(settings.etcd.pki_key_file).expanduser())  # refused here, before any node
    ctx = run_pipeline(ETCD_SNAPSHOT_PHASES, cluster, settings, nodes, title="bootstrap etcd snapshot",
                       output=output, extra=_snapshot_document,
                       etcd=EtcdOptions(snapshot_dir=directory))
    taken = ctx.results.etcd_snapshot
    if taken is not None and output is Output.text:
        console.print(f"snapshot: {taken.path}", soft_wrap=True)


@checked("etcd snapshots")
@node_options
def snapshots(
    nodes: NodeOptions,
    directory: Annotated[Path | None, SNAPSHOTS.option(
        "--dir", help="Also where `etcd snapshot --dir` put them (default: the cluster's state directory).",
        show_default=False)] = None,
    output: OutputOption = Output.text,
) -> None:
    """List the snapshots on this machine and on each control plane, and each control plane's snapshot timer."""
    from provision.cli.support import load_inputs, run_pipeline
    from provision.nodes.etcd.snapshot import default_directory, listing, local_snapshots
    from provision.phases import ETCD_LIST_PHASES

    cluster, settings = load_inputs(nodes)
    where = directory or default_directory(cluster)

    def listed(ctx: PhaseContext) -> dict[str, Any]:
        survey = ctx.results.etcd
        return listing(local_snapshots(where), survey) if survey is not None else {}

    ctx = run_pipeline(ETCD_LIST_PHASES, cluster, settings, nodes, title="bootstrap etcd snapshots",
                       output=output, extra=listed)
    if output is Output.text:
        print_listing(listed(ctx), where)


@checked("etcd restore")
@node_options
def restore(
    nodes: NodeOptions,
    snapshot: Annotated[str | None, RESTORE.argument(
        "SNAPSHOT", help="A snapshot `bootstrap etcd snapshot` took: its path, or its name in the cluster's state directory.",
        show_default=False)] = None,
    source: Annotated[str | None, RESTORE.option(
        "--from", help="Bring the snapshot from the store first: s3://BUCKET/PREFIX/NAME.db (etcd.s3_endpoint "
                       "and the AWS credentials say how); its certificates go back where there are none.",
        show_default=False)] = None,
    survivors: Annotated[Any, RESTORE.option(
        "--survivors", help="Restore onto these control planes only (comma-separated): quorum lost, the ones "
                            "left; the others rejoin with `bootstrap node replace NAME`.", show_default=False)] = None,
    yes: YesOption = False,
    output: OutputOption = Output.text,
) -> None:
    """Restore etcd from a snapshot on every control plane: the API servers and etcd stop, each member's data is
    restored (the old kept aside) with a new cluster token, etcd starts, the snapshot's keys are checked on
    every member, then the API servers come back. Everything written after the snapshot is lost. Refused,
    before any change, for a snapshot that fails its check or is another cluster's, and for a control plane
    that does not answer. Re-run after an interruption, it finishes."""
    from provision.cli.support import load_inputs, run_pipeline
    from provision.nodes.etcd.snapshot import default_directory, load_snapshot
    from provision.phases import ETCD_RESTORE_FROM_PHASES, ETCD_RESTORE_PHASES
    from provision.phases.engine import EtcdOptions

    if snapshot is None and source is None:
        raise InputError("etcd restore: name the snapshot (a path or a name in the state directory) or --from "
                         "s3://..., one of the two")
    cluster, settings = load_inputs(nodes)
    chosen = parse_survivors(cluster, survivors)
    pki = None
    if source is not None:
        taken, pki = fetch_from_store(cluster, settings, source)
    else:
        assert snapshot is not None
        path = Path(snapshot).expanduser()
        if not path.exists() and "/" not in snapshot:
            path = default_directory(cluster) / snapshot
        taken = load_snapshot(path)
    where = ", ".join(chosen or [n.name for n in cluster.control_planes])
    confirm(f"Restore etcd on {where} from {taken.record.name} (revision {taken.revision}, taken "
            f"{taken.record.taken_at:%Y-%m-%d %H:%M} UTC)? The API servers stop meanwhile and everything written "
            "since the snapshot is lost.", yes)
    run_pipeline(ETCD_RESTORE_FROM_PHASES if pki is not None else ETCD_RESTORE_PHASES, cluster, settings, nodes,
                 title=f"bootstrap etcd restore {taken.record.name}", output=output,
                 etcd=EtcdOptions(restore=taken, survivors=chosen, pki_archive=pki))


@checked("etcd defrag")
@node_options
def defrag(nodes: NodeOptions, output: OutputOption = Output.text) -> None:
    """Defragment every etcd member one at a time, the leader last, giving back the space deleted keys left;
    where the NOSPACE alarm is raised, compact first and disarm it once every database is under its quota.
    Refused while a member is down."""
    from provision.cli.support import load_inputs, run_pipeline
    from provision.phases import ETCD_DEFRAG_PHASES

    cluster, settings = load_inputs(nodes)
    run_pipeline(ETCD_DEFRAG_PHASES, cluster, settings, nodes, title="bootstrap etcd defrag", output=output)


def register(app: typer.Typer) -> None:
    etcd_app = typer.Typer(help="Snapshots of the cluster's etcd, and restoring one.", no_args_is_help=True)
    etcd_app.command("snapshot")(snapshot)
    etcd_app.command("snapshots")(snapshots)
    etcd_app.command("restore")(restore)
    etcd_app.command("defrag")(defrag)
    app.add_typer(etcd_app, name="etcd")


def fetch_from_store(cluster: Cluster, settings: Settings, url: str) -> tuple[LocalSnapshot, bytes | None]:
    """`--from s3://BUCKET/PREFIX/NAME.db` (its shape judged by the option table): the key read, then the
    snapshot's objects brought into the cluster's snapshot directory and checked as any snapshot here; its
    certificates opened with the operator's key (None: it was sent without them)."""
    from provision.inputs.files import shown
    from provision.nodes.etcd.offsite import PKI_SUFFIX, S3Location, Store, download, read_passphrase, unseal
    from provision.nodes.etcd.snapshot import NAME_RE, default_directory, load_snapshot, prepare_directory

    location = S3Location.parse(url, "--from")
    folder, _, name = location.key.rpartition("/")
    if not NAME_RE.fullmatch(name):
        raise InputError(f"--from: {shown(url)} does not end with a snapshot's name (<cluster>-<time>-r<revision>.db): "
                         "name the snapshot's .db in the store")
    key_file = settings.etcd.pki_key_file
    passphrase = read_passphrase(Path(key_file).expanduser()) if key_file else None
    store = Store(S3Location(location.bucket, folder), settings.etcd.s3_endpoint, settings.etcd.s3_region)
    directory = prepare_directory(default_directory(cluster))
    written = download(store, name, directory)
    taken = load_snapshot(directory / name)
    sealed = [path for path in written if path.name.endswith(PKI_SUFFIX)]
    if not sealed:
        return taken, None
    if passphrase is None:
        raise InputError(f"--from: {name} came with its certificates, sealed: set etcd.pki_key_file to the file of "
                         "the passphrase they were sealed with")
    return taken, unseal(sealed[0].read_bytes(), passphrase, name)


def parse_survivors(cluster: Cluster, given: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """--survivors (node names, each once: option_kinds.node_names): control planes of the inventory."""
    from provision.inputs.files import shown

    if given is None:
        return None
    names = list(given)
    planes = {n.name for n in cluster.control_planes}
    for name in names:
        if name not in planes:
            raise InputError(f"--survivors: {shown(name)} is not a control plane of {cluster.inventory_path} "
                             f"(they are {', '.join(sorted(planes))})")
    if len(set(names)) != len(names):
        raise InputError("--survivors names a control plane twice")
    return tuple(n.name for n in cluster.control_planes if n.name in names)


def print_listing(found: dict[str, Any], here: Path) -> None:
    from rich.table import Table

    from provision.cli.console import console

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("where", "snapshot", "taken (UTC)", "revision", "keys", "size"):
        table.add_column(column, justify="right" if column in ("revision", "keys", "size") else "left")
    rows = [("here", s) for s in found.get("here", [])]
    rows += [(name, s) for name, node in found.get("nodes", {}).items() for s in node.get("snapshots", [])]
    for where, snapshot in rows:
        table.add_row(where, snapshot["name"], snapshot["taken_at"][:19].replace("T", " "), str(snapshot["revision"]),
                      str(snapshot["keys"]), f"{snapshot['size'] >> 10} KiB")
    console.print(table if rows else "no snapshots", soft_wrap=True)
    console.print(f"here: {here}", soft_wrap=True)
    for name, node in found.get("nodes", {}).items():
        if "unreachable" in node:
            console.print(f"{name}: did not answer ({node['unreachable']})", soft_wrap=True)
            continue
        timer = node["timer"]
        state = ("on" if timer["enabled"] and timer["active"] else "installed, not running" if timer["installed"]
                 else "off")
        last = f", last run {timer['last_run']} ({timer['last_result']})" if timer.get("last_run") else ""
        console.print(f"{name}: snapshot timer {state}{last}", soft_wrap=True)
