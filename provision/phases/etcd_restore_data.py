"""etcd_restore_data (`bootstrap etcd restore`): on every member, the snapshot restored into a fresh data directory
with its own name and peer URL, every member listed and a new cluster token, put in place of the old one, which is
moved aside under a fresh name (module_utils/cb_etcd.py: restore_data_dir; re-runnable after a kill at any point,
deleting nothing etcd ever served)."""
from __future__ import annotations

from typing import Any

from provision.errors import BootstrapError
from provision.nodes.documents import sent
from provision.nodes.etcd.report import LAYOUT
from provision.nodes.etcd.results import RestoredDataDir
from provision.phases.engine import Phase, PhaseContext
from provision.phases.etcd_restore_check import plan
from provision.render.playbook_vars import etcd_restore_data_vars

RESULT_KEY = "cb_etcd_restore"


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    members = plan(ctx).member_arguments()
    return etcd_restore_data_vars(LAYOUT.as_dict(), {ctx.cluster.node(name).host: arguments
                                                     for name, arguments in members.items()})


def check(ctx: PhaseContext) -> str:
    found = plan(ctx)
    restored = sent(ctx.playbook_results[-1].run_dir, RESULT_KEY, RestoredDataDir, phase="etcd restore",
                    what="its restore")
    missing = [name for name in found.nodes if ctx.cluster.node(name).host not in restored]
    if missing:
        raise BootstrapError(f"etcd restore: {', '.join(missing)} did not report its restore; run it again")
    moved = {name: restored[ctx.cluster.node(name).host].moved_aside for name in found.nodes}
    kept = "; ".join(f"{name}: {path}" for name, path in moved.items() if path)
    return (f"restored on {', '.join(found.nodes)} as members of cluster token {found.token}"
            + (f"; the data from before kept as {kept}" if kept else ""))


PHASE = Phase("etcd_restore_data", "restore the snapshot into each member's data directory", check,
              playbook="etcd_restore_data.yml", extra_vars=extra_vars, limit=lambda ctx: plan(ctx).nodes)
