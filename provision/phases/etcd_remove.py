"""etcd (reset, down, node remove): before the machines are reset, etcd forgets the control planes that leave,
removed from a control plane that stays while the others keep its majority."""
from __future__ import annotations

from provision.phases.engine import Phase, PhaseContext
from provision.render.playbook_vars import etcd_remove_vars


def members(ctx: PhaseContext) -> tuple[list[str], list[str]]:
    """The control planes being reset, and those that stay (node names, inventory order)."""
    targets = set(ctx.target_nodes)
    planes = [n.name for n in ctx.cluster.control_planes]
    return [n for n in planes if n in targets], [n for n in planes if n not in targets]


def skip_reason(ctx: PhaseContext) -> str | None:
    leaving, staying = members(ctx)
    if not leaving:
        return "no control plane is reset"
    if not staying:
        return "every control plane is reset: etcd goes with them"
    return None


def check(ctx: PhaseContext) -> str:
    leaving, staying = members(ctx)
    removed = sum(ctx.playbook_results[-1].changed.values())
    names = ", ".join(leaving)
    return (f"etcd members of {names} removed (on {staying[0]})" if removed
            else f"{names} no longer etcd members")


PHASE = Phase("etcd", "remove the etcd members of the control planes being reset", check,
              playbook="etcd_remove.yml", extra_vars=lambda ctx: etcd_remove_vars(members(ctx)[0]),
              limit=lambda ctx: members(ctx)[1][:1], skip_reason=skip_reason, undoes=True)
