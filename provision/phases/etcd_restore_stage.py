"""etcd_restore_stage (`bootstrap etcd restore`): the snapshot copied to every member it is restored on
(playbooks/etcd_restore_stage.yml), and each copy read there (size, SHA-256, `snapshot status`) and compared with
the snapshot's record before etcd is stopped anywhere (provision/nodes/etcd/restore.py: staging_problems). A member
that sends no reading of its copy is named with its cause; the others' copies are judged all the same."""
from __future__ import annotations

from typing import Any

from provision.errors import BootstrapError
from provision.nodes.documents import sent
from provision.nodes.etcd.report import LAYOUT
from provision.nodes.etcd.restore import staging_problems
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
    result = ctx.playbook_results[-1]
    copies = sent(result.run_dir, RESULT_KEY, StagedCopy, phase="etcd restore", what="its copy of the snapshot")
    failed = result.failed_hosts
    readings = {name: copies.get(ctx.cluster.node(name).host) for name in found.nodes}
    causes = {name: failed[ctx.cluster.node(name).host].describe().removeprefix(f"{ctx.cluster.node(name).host}: ")
              for name in found.nodes if ctx.cluster.node(name).host in failed}
    problems = staging_problems(found, readings, causes)
    if problems:
        raise BootstrapError(f"etcd restore stopped before etcd was touched: {'; '.join(problems)}; run it again")
    record = found.snapshot.record
    return (f"{record.name} on {', '.join(found.nodes)} at {found.staged}, each copy read there: SHA-256 "
            f"{record.sha256[:12]}..., revision {record.revision}, {record.total_key} keys, as recorded")


PHASE = Phase("etcd_restore_stage", "copy the snapshot to each member and check it there", check,
              playbook="etcd_restore_stage.yml", extra_vars=extra_vars, limit=lambda ctx: plan(ctx).nodes,
              checks_playbook=True)
