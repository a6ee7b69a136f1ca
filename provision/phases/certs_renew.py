"""certs_renew (`bootstrap certs renew`, after certs_health found the cluster healthy): on each control plane, one at
a time, the cluster asked again (every API server ready, every etcd member healthy), `kubeadm certs renew all`, its
control-plane static pods restarted one at a time to load the new certificates (each manifest moved out and back, as
kubeadm's guide says; kube-vip too, to read the renewed admin.conf; etcd last), each waited for, the API server and
etcd healthy again before the next; then the operator's admin kubeconfig takes the renewed client certificate."""
from __future__ import annotations

from typing import Any

from provision.kube.kubeconfig import fetched_kubeconfig_path, refresh_admin_credentials
from provision.phases.engine import Phase, PhaseContext
from provision.render.playbook_vars import certs_renew_vars


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    return certs_renew_vars(ctx.cluster, fetched_kubeconfig_path(ctx.cluster))


def check(ctx: PhaseContext) -> str:
    kubeconfig = refresh_admin_credentials(fetched_kubeconfig_path(ctx.cluster), ctx.cluster, ctx.settings)
    planes = [n.name for n in ctx.cluster.control_planes]
    return (f"renewed on {', '.join(planes)}, one at a time, static pods restarted one by one (etcd last); admin "
            f"kubeconfig {kubeconfig} refreshed")


PHASE = Phase("certs_renew", "kubeadm certs renew on each control plane, one at a time", check,
              playbook="certs_renew.yml", extra_vars=extra_vars)
