"""etcd_snapshot (`bootstrap upgrade`, the first step of its plan): a consistent etcd snapshot on a healthy control
plane, kept on this machine, before anything changes.

Not in this build yet: `bootstrap etcd snapshot` is being built apart, and this phase takes its snapshot once it is
here. Until then the phase refuses, before any change, rather than pretend: the operator takes a snapshot and says
so with --skip-etcd-snapshot."""
from __future__ import annotations

from provision.errors import BootstrapError
from provision.phases.engine import Phase, PhaseContext


def skip_reason(ctx: PhaseContext) -> str | None:
    if ctx.upgrade is not None and ctx.upgrade.skip_etcd_snapshot:
        return "--skip-etcd-snapshot: the operator took one"
    return None


def check(ctx: PhaseContext) -> str:
    first = ctx.cluster.control_plane.name
    raise BootstrapError(f"etcd_snapshot: this build cannot take the etcd snapshot an upgrade begins with yet "
                         f"(`bootstrap etcd snapshot` is not in it): take one on {first} yourself (`etcdctl snapshot "
                         "save`, docs/upgrade.md), then re-run with --skip-etcd-snapshot; nothing was changed")


PHASE = Phase("etcd_snapshot", "an etcd snapshot, kept on this machine, before anything changes", check,
              skip_reason=skip_reason)
