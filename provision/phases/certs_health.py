"""certs_health (`bootstrap certs renew`, first): before any certificate is renewed or any static pod restarted,
every control plane answers, its API server is ready (/readyz), and etcd reports every member healthy (`endpoint
health --cluster`), as asked on each control plane (playbooks/certs_health.yml). A renewal restarts each control
plane's etcd and API server in turn: with a control plane already down, etcd would lose its quorum while one
restarts. So a degraded cluster is refused here, naming what is down, and nothing changes. Only reads."""
from __future__ import annotations

from provision.errors import BootstrapError
from provision.kube.kubeconfig import fetched_kubeconfig_path
from provision.nodes.runner import failure_line, failure_mark
from provision.phases.engine import Phase, PhaseContext
from provision.render.playbook_vars import certs_renew_vars


def check(ctx: PhaseContext) -> str:
    result = ctx.playbook_results[-1]
    if not result.ok:
        name_of: dict[str, str] = {node.host: node.name for node in ctx.cluster.nodes}
        failed = {name_of.get(host, host): failure for host, failure in result.failed_hosts.items()}
        if not failed:
            result.raise_for_failure()
        lines = "; ".join(failure_line(failure) for failure in failed.values())
        raise BootstrapError(f"certs renew refused, the cluster is degraded: {lines} (a renewal restarts each "
                             "control plane's etcd and API server in turn; with one down, etcd could lose its quorum; "
                             "nothing was renewed or restarted)",
                             nodes={name: failure_mark(failure) for name, failure in failed.items()})
    planes = [n.name for n in ctx.cluster.control_planes]
    return f"{', '.join(planes)}: every API server ready, every etcd member healthy"


PHASE = Phase("certs_health", "every control plane's API server ready and etcd healthy, before any renewal", check,
              playbook="certs_health.yml", read_only=True, checks_playbook=True,
              extra_vars=lambda ctx: certs_renew_vars(ctx.cluster, fetched_kubeconfig_path(ctx.cluster)))
