"""One phase per add-on, after gpu: applied from the first control plane (playbooks/addon.yml) when it is in
addons.enabled, then its controllers and CRDs checked; and one per add-on that removes it (`addons remove`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from provision.errors import BootstrapError
from provision.inputs.addons import ADDON_ORDER, ADDONS, AddonName
from provision.kube.addons import crd_exists, wait_for_addon, wait_for_removal
from provision.phases.common import api
from provision.phases.engine import Phase, PhaseContext
from provision.render.addons import SERVICE_MONITOR_CRD, ClusterFacts, addon_plan


def _skip(name: AddonName) -> Callable[[PhaseContext], str | None]:
    return lambda ctx: None if name in ctx.settings.addons.enabled else "not in addons.enabled"


def _vars(name: AddonName, state: Literal["present", "absent"]) -> Callable[[PhaseContext], dict[str, Any]]:
    def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
        # What the cluster serves decides some of our objects (DCGM's ServiceMonitor): asked once, here.
        facts = ClusterFacts(service_monitors=crd_exists(api(ctx), SERVICE_MONITOR_CRD)) \
            if name == "dcgm_exporter" else ClusterFacts()
        return {"cb_addon": addon_plan(ctx.settings, name, facts).as_vars(), "cb_addon_state": state,
                "cb_addon_timeout_s": ctx.settings.addons.timeout_s}
    return extra_vars


def _installed(name: AddonName) -> Callable[[PhaseContext], str]:
    def check(ctx: PhaseContext) -> str:
        status = wait_for_addon(api(ctx), name, ctx.settings, timeout_s=ctx.settings.addons.timeout_s)
        if not status.ok:
            more = f" (and {len(status.problems) - 1} more problems)" if len(status.problems) > 1 else ""
            raise BootstrapError(f"{name}: {status.problems[0].describe()}{more}")
        return status.summary()
    return check


def _removed(name: AddonName) -> Callable[[PhaseContext], str]:
    def check(ctx: PhaseContext) -> str:
        status = wait_for_removal(api(ctx), name, timeout_s=ctx.settings.addons.timeout_s)
        if not status.ok:
            raise BootstrapError(f"{name} removal: {status.problems[0].describe()}")
        return f"{ADDONS[name].title} removed: no CRD and no namespace {ADDONS[name].namespace} left"
    return check


def install_phase(name: AddonName) -> Phase:
    addon = ADDONS[name]
    return Phase(name, f"{addon.title}: {addon.provides}", _installed(name), playbook="addon.yml",
                 extra_vars=_vars(name, "present"), needs=("kubeconfig",), skip_reason=_skip(name))


def remove_phase(name: AddonName) -> Phase:
    return Phase(f"remove_{name}", f"{ADDONS[name].title} deleted", _removed(name), playbook="addon.yml",
                 extra_vars=_vars(name, "absent"), needs=("kubeconfig",))


PHASES: tuple[Phase, ...] = tuple(phase for name in ADDON_ORDER for phase in (install_phase(name), remove_phase(name)))
