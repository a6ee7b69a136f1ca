"""certs_timer (`up`, `node add`, `certs renew`): with certificates.renew_timer, a daily systemd timer on every
control plane renews kubeadm's certificates once one expires within certificates.renew_before_days, each control
plane at an hour of its own so their static pods restart one at a time; turned off again, the timer is removed."""
from __future__ import annotations

from typing import Any

from provision.inputs.values import HostName
from provision.phases.engine import Phase, PhaseContext
from provision.render.playbook_vars import certs_timer_vars

# The first control plane's hour (local time on the node); each next one two hours later.
FIRST_HOUR = 3
HOURS_APART = 2


def hours(ctx: PhaseContext) -> dict[HostName, int]:
    """Inventory host -> the hour its timer runs at."""
    return {node.host: (FIRST_HOUR + HOURS_APART * index) % 24 for index, node in enumerate(ctx.cluster.control_planes)}


def skip_reason(ctx: PhaseContext) -> str | None:
    if ctx.settings.certificates.renew_timer or ctx.state.certs_timer:
        return None
    return "certificates.renew_timer is false"


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    certificates = ctx.settings.certificates
    return certs_timer_vars(ctx.cluster, enabled=certificates.renew_timer,
                            renew_before_days=certificates.renew_before_days, hours=hours(ctx))


def check(ctx: PhaseContext) -> str:
    enabled = ctx.settings.certificates.renew_timer
    ctx.state.certs_timer = enabled
    if not enabled:
        return "renewal timer removed from the control planes (certificates.renew_timer is false)"
    at = ", ".join(f"{node.name} {hour:02d}:00" for node, hour in zip(ctx.cluster.control_planes, hours(ctx).values(),
                                                                        strict=True))
    return (f"renewal timer daily on every control plane ({at}), renewing below "
            f"{ctx.settings.certificates.renew_before_days} days")


PHASE = Phase("certs_timer", "the certificate renewal timer (certificates.renew_timer)", check,
              playbook="certs_timer.yml", extra_vars=extra_vars, skip_reason=skip_reason)
