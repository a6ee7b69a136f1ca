"""etcd_snapshot (`bootstrap etcd snapshot`, and the first step of `bootstrap upgrade`): a snapshot taken on a
healthy control plane with the cluster's own etcd client certificates, checked there (`snapshot status`: revision,
keys, hash) and kept among the node's last N (playbooks/etcd_snapshot.yml), then streamed to this machine over SSH
as `<name>.db.part` and checked again against its record before it is named as complete
(provision/nodes/etcd/snapshot.py). Disk space is checked on both ends first.

Its result, `ctx.results.etcd_snapshot`, is the LocalSnapshot: path, revision, keys, hash.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from provision.errors import BootstrapError
from provision.nodes.documents import module_documents, validated
from provision.nodes.etcd.report import LAYOUT, EtcdReport
from provision.nodes.etcd.snapshot import (
    SnapshotRecord,
    clean_parts,
    cluster_name,
    default_directory,
    free_bytes,
    needed_bytes,
    part_path,
    prepare_directory,
    space_problem,
    store_fetched,
)
from provision.nodes.ssh import connect
from provision.phases.engine import Phase, PhaseContext
from provision.render.playbook_vars import etcd_snapshot_vars

RESULT_KEY = "cb_etcd_snapshot"


def source(ctx: PhaseContext) -> tuple[str, EtcdReport]:
    """The control plane the snapshot is taken on: the first healthy member, in inventory order, that can read a
    snapshot's status."""
    survey = ctx.results.etcd
    if survey is None:
        raise BootstrapError("internal: etcd_snapshot runs after etcd_probe")
    for name in survey.healthy():
        report = survey.reports[name]
        if report.status_argv() is not None and report.client is not None and report.tools.etcdctl:
            return name, report
    problems = [f"{name}: {why}" for name, why in survey.unreachable.items()]
    problems += [f"{name}: {_unfit(report)}" for name, report in survey.reports.items()]
    raise BootstrapError(f"etcd snapshot: no healthy etcd member to take it from ({'; '.join(problems)}); a snapshot "
                         "needs a member that answers: see `bootstrap etcd snapshots` and the etcd logs there")


def _unfit(report: EtcdReport) -> str:
    if report.kind == "none":
        return "no etcd found (no static pod manifest, no etcd unit)"
    if not report.running:
        return f"etcd is not running ({report.how_stopped()}?)"
    if not report.healthy:
        errors = report.member.errors if report.member else []
        health = report.member.health.error if report.member and report.member.health else None
        return f"etcd does not answer healthy ({health or '; '.join(errors) or 'no answer'})"
    return (f"no etcdutl to read a snapshot's status (etcd {report.version}: etcdctl lost `snapshot status` in 3.6); "
            f"put etcdutl {report.version} on PATH there")


def directory(ctx: PhaseContext) -> Path:
    return ctx.etcd.snapshot_dir or default_directory(ctx.cluster)


def before(ctx: PhaseContext) -> None:
    """Room for the snapshot on both ends, before anything is written."""
    name, report = source(ctx)
    size = (report.member.db_size if report.member else None) or report.data_dir.db_bytes or 0
    needed = needed_bytes(size)
    where = directory(ctx)
    problems = [space_problem(f"{name}:{LAYOUT.snapshot_dir}", report.free_bytes.snapshot_dir, needed),
                space_problem(f"this machine's {where}", free_bytes(where), needed)]
    found = [p for p in problems if p]
    if found:
        raise BootstrapError(f"etcd snapshot: {'; '.join(found)} (etcd's database is {size >> 20} MiB)")
    prepare_directory(where)
    clean_parts(where)


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    name, report = source(ctx)
    assert report.client is not None
    return etcd_snapshot_vars(LAYOUT.as_dict(), {
        "etcdctl": report.tools.etcdctl, "client": report.client.model_dump(), "status_argv": report.status_argv(),
        "directory": LAYOUT.snapshot_dir, "cluster": cluster_name(ctx.cluster), "node": name,
        "keep": ctx.settings.etcd.snapshot_keep})


def check(ctx: PhaseContext) -> str:
    name, _ = source(ctx)
    host = ctx.cluster.node(name).host
    record = validated(SnapshotRecord, module_documents(ctx.playbook_results[-1].run_dir, RESULT_KEY).get(host),
                       phase="etcd snapshot", who=name, what="its snapshot")
    part = part_path(directory(ctx), record)
    ctx.say(f"etcd_snapshot: copying {record.name} ({record.size >> 10} KiB) from {name}")
    with connect(ctx.cluster.node(name), ctx.settings.ssh, ctx.become_password) as shell, \
            os.fdopen(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as local:
        shell.fetch(f"{LAYOUT.snapshot_dir}/{record.name}", local, sudo=True)
    snapshot = store_fetched(record, directory(ctx), ctx.settings.etcd.snapshot_keep, name)
    ctx.results.etcd_snapshot = snapshot
    return (f"{snapshot.path} (revision {snapshot.revision}, {snapshot.keys} keys, hash {snapshot.hash:08x}, "
            f"{record.size >> 10} KiB, from {record.member or name})")


PHASE = Phase("etcd_snapshot", "a snapshot of etcd, checked, copied here and checked again", check,
              playbook="etcd_snapshot.yml", extra_vars=extra_vars, limit=lambda ctx: [source(ctx)[0]],
              needs=("etcd",), before=before)
