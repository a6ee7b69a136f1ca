"""etcd_restore_stop (`bootstrap etcd restore`): the API servers and etcd stopped on every control plane the
restore touches (kubeadm's static pods moved out of the manifests directory and waited for until their containers
are gone; a systemd etcd stopped), then each node read again: etcd must run nowhere before any data is replaced."""
from __future__ import annotations

from typing import Any

from provision.errors import BootstrapError
from provision.nodes.etcd.report import LAYOUT, read_survey
from provision.nodes.etcd.restore import stopped_problems
from provision.phases.engine import Phase, PhaseContext
from provision.phases.etcd_restore_check import plan
from provision.render.playbook_vars import etcd_restore_stop_vars


def nodes(ctx: PhaseContext) -> list[str]:
    found = plan(ctx)
    return [*found.nodes, *found.stopped_only]


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    survey = ctx.results.etcd
    assert survey is not None
    return etcd_restore_stop_vars(LAYOUT.as_dict(), {ctx.cluster.node(name).host: survey.reports[name].kind
                                                     for name in nodes(ctx)})


def check(ctx: PhaseContext) -> str:
    survey = read_survey(ctx.playbook_results[-1], ctx.cluster)
    problems = stopped_problems(plan(ctx), survey)
    if problems:
        raise BootstrapError(f"etcd restore: {'; '.join(problems)}; run the restore again once it has stopped")
    kinds = {survey.reports[name].kind for name in nodes(ctx)}
    how = "static pods moved aside" if kinds == {"static_pod"} else "etcd.service stopped"
    return f"etcd and the API servers stopped on {', '.join(nodes(ctx))} ({how})"


PHASE = Phase("etcd_restore_stop", "stop the API servers and etcd on the control planes", check,
              playbook="etcd_restore_stop.yml", extra_vars=extra_vars, limit=nodes)
