"""etcd_restore_check (`bootstrap etcd restore`): the refusals made before anything changes (a control plane that
does not answer, a snapshot of another cluster, a member without the configuration or the tool a restore needs,
no room for it; the snapshot itself was checked before any node was touched), then the plan each member follows
(provision/nodes/etcd/restore.py), recorded in the cluster's state with the snapshot's SHA-256: a restore of the
same snapshot killed midway and run again carries on under the same id; the record goes once the API servers run
again (etcd_restore_api; under systemd once etcd runs, etcd_restore_start)."""
from __future__ import annotations

from datetime import UTC, datetime

from provision.errors import BootstrapError
from provision.nodes.etcd.restore import RestorePlan, new_restore_id, plan_restore, restore_id_for, restore_refusals
from provision.phases.engine import Phase, PhaseContext


def targets(ctx: PhaseContext) -> list[str]:
    """The control planes restored: --survivors, else all (inventory order)."""
    chosen = ctx.etcd.survivors
    return [n.name for n in ctx.cluster.control_planes if chosen is None or n.name in chosen]


def plan(ctx: PhaseContext) -> RestorePlan:
    if ctx.results.etcd_restore is None:
        raise BootstrapError("internal: the restore's phases run after etcd_restore_check")
    return ctx.results.etcd_restore


def check(ctx: PhaseContext) -> str:
    snapshot, survey = ctx.etcd.restore, ctx.results.etcd
    if snapshot is None or survey is None:
        raise BootstrapError("internal: etcd_restore_check needs the snapshot and the probe")
    problems = restore_refusals(snapshot, survey, targets(ctx))
    if problems:
        raise BootstrapError(f"etcd restore refused, nothing changed: {'; '.join(problems)}")
    recorded = ctx.state.etcd_restore
    carried = restore_id_for(recorded, snapshot)
    unfinished = recorded if carried else None
    restore_id = carried or new_restore_id()
    ctx.results.etcd_restore = found = plan_restore(snapshot, survey, targets(ctx), restore_id)
    ctx.state.etcd_restore = {"id": restore_id, "snapshot": snapshot.record.name, "sha256": snapshot.record.sha256,
                              "started": unfinished["started"] if unfinished else datetime.now(UTC).isoformat()}
    ctx.state.save(ctx.cluster)
    resumed = f"carrying on with restore {restore_id} (started {unfinished['started']}): " if unfinished else ""
    if recorded and not unfinished:
        resumed = (f"restore {recorded.get('id')} of {recorded.get('snapshot')} did not finish; a new one, its data "
                   "moved aside like any other: ")
    also = f"; etcd stops on {', '.join(found.stopped_only)} too" if found.stopped_only else ""
    return (f"{resumed}{snapshot.record.name} (revision {snapshot.revision}) onto {', '.join(found.nodes)}{also}, "
            f"revision raised by {found.bump_revision:,}" if found.bump_revision else
            f"{resumed}{snapshot.record.name} (revision {snapshot.revision}) onto {', '.join(found.nodes)}{also}")


PHASE = Phase("etcd_restore_check", "refuse what cannot be restored, plan the restore", check, needs=("etcd",))
