"""certs_check (`bootstrap certs check`, and the last phase of `certs renew`): every certificate and kubeconfig
kubeadm manages on each control plane, with its expiry (the cb_certs module reads them on the node), and the
operator's admin kubeconfig; a certificate expired or expiring within certificates.renew_before_days fails the
phase, naming it and `bootstrap certs renew`. Only reads."""
from __future__ import annotations

from provision.errors import BootstrapError
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.nodes.certs import certs_report, read_certs
from provision.phases.engine import Phase, PhaseContext


def check(ctx: PhaseContext) -> str:
    documents = read_certs(ctx.playbook_results[-1], ctx.cluster)
    report = certs_report(documents, renew_before_days=ctx.settings.certificates.renew_before_days,
                          local_kubeconfig=admin_kubeconfig_path(ctx.cluster))
    ctx.results.certs = report
    attention = report.attention
    if attention:
        first = attention[0]
        more = f" (and {len(attention) - 1} more)" if len(attention) > 1 else ""
        raise BootstrapError(f"certs_check: {first.node}: {first.name} {first.detail}{more}")
    soonest = report.soonest()
    when = f"; the first expires {soonest.not_after:%Y-%m-%d} ({soonest.name} on {soonest.node})" \
        if soonest and soonest.not_after else ""
    return (f"{len(report.rows)} certificates on {len(documents)} control planes, none within "
            f"{report.renew_before_days} days{when}")


PHASE = Phase("certs_check", "every control plane's certificates and their expiry", check, playbook="certs_read.yml",
              read_only=True)
