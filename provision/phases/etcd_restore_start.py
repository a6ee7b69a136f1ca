"""etcd_restore_start (`bootstrap etcd restore`): etcd started on every restored member (the static pod's manifest
moved back, or the unit started), each waited for until it answers healthy, then judged: the members exactly the
plan's, one cluster, and on every member the snapshot's keys at its revision (raised by the bump), before any API
server comes back. The staged copies are removed. With etcd under systemd (no API server stopped), the restore
ends here."""
from __future__ import annotations

from typing import Any

from provision.errors import BootstrapError
from provision.nodes.etcd.report import LAYOUT, read_survey
from provision.nodes.etcd.restore import restored_problems
from provision.phases.engine import Phase, PhaseContext
from provision.phases.etcd_restore_check import plan
from provision.render.playbook_vars import etcd_restore_start_vars


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    found = plan(ctx)
    return etcd_restore_start_vars(LAYOUT.as_dict(), staged=found.staged,
                                   kinds={ctx.cluster.node(m.node).host: m.kind for m in found.members})


def finish(ctx: PhaseContext) -> None:
    """The restore is over: the next one starts afresh."""
    ctx.state.etcd_restore = None
    ctx.state.save(ctx.cluster)


def check(ctx: PhaseContext) -> str:
    found = plan(ctx)
    if found.kind != "static_pod":
        # etcd runs again on the restored data (no API server was stopped): what it serves from now on is new data,
        # which a later restore moves aside, whatever this one's judge says.
        finish(ctx)
    survey = read_survey(ctx.playbook_results[-1], ctx.cluster)
    problems = restored_problems(found, survey)
    if problems:
        raise BootstrapError(f"etcd restore: {'; '.join(problems)}; the data from before is kept aside as "
                             f"<data dir>.cb-before-{found.restore_id}*: run the restore again")
    ctx.results.etcd = survey
    keys = found.snapshot.record.live_keys
    held = f"{keys} keys" if keys is not None else "the snapshot's keys"
    count = f"{len(found.members)} member{'s' if len(found.members) > 1 else ''}"
    return (f"{count} healthy ({', '.join(m.name for m in found.members)}), each holding {held} at revision "
            f"{found.expected_revision} or later")


PHASE = Phase("etcd_restore_start", "start etcd and check the restored members", check,
              playbook="etcd_restore_start.yml", extra_vars=extra_vars, limit=lambda ctx: plan(ctx).nodes)
