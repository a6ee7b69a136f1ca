"""etcd_timer (`up`, after the control planes joined): with `etcd.snapshot_timer`, a systemd timer on every control
plane that takes a snapshot on `etcd.snapshot_schedule` and keeps the last `etcd.snapshot_keep` on the node,
running the same code as `bootstrap etcd snapshot` (module_utils/cb_etcd.py, installed as the service's script).
Turned off, it is removed where an earlier run installed it (the snapshots stay). Each node's configuration (its
etcdctl, its member's endpoint and certificates, the status command) is decided here from the probe."""
from __future__ import annotations

from typing import Any

from provision.errors import BootstrapError
from provision.inputs.values import HostName
from provision.nodes.etcd.report import LAYOUT
from provision.nodes.etcd.snapshot import cluster_name
from provision.phases.engine import Phase, PhaseContext
from provision.render.playbook_vars import etcd_timer_vars


def skip_reason(ctx: PhaseContext) -> str | None:
    if not ctx.settings.etcd.snapshot_timer and not ctx.state.etcd_timer:
        return "etcd.snapshot_timer is off"
    return None


def _configs(ctx: PhaseContext) -> dict[HostName, dict[str, Any]]:
    """Each control plane's timer configuration, by inventory host name; refuses a control plane that cannot take
    snapshots (no etcd, no status reader) or did not answer."""
    survey = ctx.results.etcd
    assert survey is not None
    problems: list[str] = []
    configs: dict[HostName, dict[str, Any]] = {}
    for node in ctx.cluster.control_planes:
        report = survey.reports.get(node.name)
        if report is None:
            problems.append(f"{node.name} did not answer ({survey.unreachable.get(node.name, 'no report')})")
            continue
        status = report.status_argv()
        if report.kind == "none" or report.client is None or not report.tools.etcdctl or status is None:
            problems.append(f"{node.name} has no etcd with an etcdctl and an etcdutl to take snapshots with")
            continue
        configs[node.host] = {
            "python": report.python,
            "snapshot": {"etcdctl": report.tools.etcdctl, "client": report.client.model_dump(),
                         "status_argv": status, "directory": LAYOUT.snapshot_dir,
                         "cluster": cluster_name(ctx.cluster), "node": node.name,
                         "keep": ctx.settings.etcd.snapshot_keep},
        }
    if problems and ctx.settings.etcd.snapshot_timer:
        raise BootstrapError(f"etcd_timer: {'; '.join(problems)}: the timer goes on every control plane")
    return configs


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    enabled = ctx.settings.etcd.snapshot_timer
    return etcd_timer_vars(LAYOUT.as_dict(), enabled=enabled, schedule=ctx.settings.etcd.snapshot_schedule,
                           nodes=_configs(ctx) if enabled else {})


def check(ctx: PhaseContext) -> str:
    names: list[str] = [n.name for n in ctx.cluster.control_planes]
    if ctx.settings.etcd.snapshot_timer:
        ctx.state.etcd_timer = names
        return (f"a snapshot {ctx.settings.etcd.snapshot_schedule} on {', '.join(names)}, the last "
                f"{ctx.settings.etcd.snapshot_keep} kept in {LAYOUT.snapshot_dir}")
    ctx.state.etcd_timer = []
    return f"snapshot timer removed from {', '.join(names)}"


PHASE = Phase("etcd_timer", "the etcd snapshot timer on the control planes", check, playbook="etcd_timer.yml",
              extra_vars=extra_vars, needs=("etcd",), skip_reason=skip_reason)
