"""etcd_probe (the etcd commands; the phases that need etcd run it first): every control plane's etcd read by the
cb_etcd_probe module (playbooks/etcd_probe.yml), the static pod's etcdctl and etcdutl copied out of its image
where they are not on the node yet. Control planes that do not answer are recorded, not fatal: each command's
judge decides what it can do without them."""
from __future__ import annotations

from provision.errors import BootstrapError
from provision.nodes.etcd.report import LAYOUT, read_survey, survey_summary
from provision.phases.engine import Phase, PhaseContext


def check(ctx: PhaseContext) -> str:
    survey = read_survey(ctx.playbook_results[-1], ctx.cluster)
    ctx.results.etcd = survey
    if not survey.reports:
        causes = "; ".join(f"{name}: {why}" for name, why in survey.unreachable.items())
        raise BootstrapError(f"etcd: no control plane answered ({causes}): check that they are up and reachable "
                             "over SSH", nodes=dict.fromkeys(survey.unreachable, "unreachable"))
    return survey_summary(survey)


PHASE = Phase("etcd_probe", "read etcd on every control plane", check, playbook="etcd_probe.yml",
              extra_vars=lambda ctx: LAYOUT.as_vars(), provides=("etcd",), read_only=True, checks_playbook=True)
