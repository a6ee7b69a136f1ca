"""etcd_restore_stage (`bootstrap etcd restore`): the snapshot copied to every member it is restored on
(playbooks/etcd_restore_stage.yml), and each copy read there (size, SHA-256, `snapshot status`) and compared with
the snapshot's record before etcd is stopped anywhere."""
from __future__ import annotations

from typing import Any

from provision.errors import BootstrapError
from provision.nodes.documents import sent
from provision.nodes.etcd.report import LAYOUT
from provision.nodes.etcd.results import StagedCopy
from provision.phases.engine import Phase, PhaseContext
from provision.phases.etcd_restore_check import plan
from provision.render.playbook_vars import etcd_restore_stage_vars

RESULT_KEY = "cb_etcd_snapshot_status"


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    found = plan(ctx)
    survey = ctx.results.etcd
    assert survey is not None
    return etcd_restore_stage_vars(
        LAYOUT.as_dict(), source=str(found.snapshot.path), staged=found.staged,
        status_argv={ctx.cluster.node(name).host: survey.reports[name].status_argv() for name in found.nodes})


def check(ctx: PhaseContext) -> str:
    found = plan(ctx)
    record = found.snapshot.record
    copies = sent(ctx.playbook_results[-1].run_dir, RESULT_KEY, StagedCopy, phase="etcd restore",
                  what="its copy of the snapshot")
    problems = []
    for name in found.nodes:
        copy = copies.get(ctx.cluster.node(name).host)
        if copy is None:
            problems.append(f"{name} did not read its copy of the snapshot")
            continue
        status = copy.status
        read = (copy.size, copy.sha256, status.revision, status.total_key, status.hash)
        if read != (record.size, record.sha256, record.revision, record.total_key, record.hash):
            problems.append(f"the copy on {name} is not the snapshot its record describes (size {copy.size}, "
                            f"revision {status.revision}, hash {status.hash})")
    if problems:
        raise BootstrapError(f"etcd restore stopped before etcd was touched: {'; '.join(problems)}; run it again")
    return f"{record.name} on {', '.join(found.nodes)} at {found.staged}, each copy read there and checked"


PHASE = Phase("etcd_restore_stage", "copy the snapshot to each member and check it there", check,
              playbook="etcd_restore_stage.yml", extra_vars=extra_vars, limit=lambda ctx: plan(ctx).nodes)
