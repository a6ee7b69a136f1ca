"""etcd_restore_api (`bootstrap etcd restore`): the API servers, controller managers and schedulers brought back on
the restored control planes (their manifests moved back), and the kubelet restarted on every node the restore did
not leave stopped, as kubernetes.io's "Restoring an etcd cluster" asks (a kubelet registers its Node only when it
starts); then the API answering through the admin kubeconfig and serving every Node the restored store holds.

The restore's record in the cluster's state goes as soon as the API servers run again: from then on the data is
the cluster's, and a later restore moves it aside like any other."""
from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from provision.errors import BootstrapError
from provision.kube.client import ApiUnreachable, call_api, wait_for_api
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.nodes.etcd.report import LAYOUT
from provision.nodes.etcd.restore import RestorePlan, api_problems
from provision.phases.common import api
from provision.phases.engine import Phase, PhaseContext
from provision.phases.etcd_restore_check import plan
from provision.phases.etcd_restore_start import finish
from provision.render.playbook_vars import etcd_restore_api_vars


def nodes(ctx: PhaseContext) -> list[str]:
    """Every node but the control planes the restore only stopped (they rejoin with `node replace`)."""
    stopped = set(plan(ctx).stopped_only)
    return [n.name for n in ctx.cluster.nodes if n.name not in stopped]


def skip_reason(ctx: PhaseContext) -> str | None:
    """No Kubernetes on these machines (no control-plane manifests anywhere, no admin kubeconfig here): an etcd of
    its own, with no API server or kubelet to bring back."""
    survey = ctx.results.etcd
    if survey is None or admin_kubeconfig_path(ctx.cluster).exists():
        return None
    if any(r.manifests.active or r.manifests.stopped for r in survey.reports.values()):
        return None
    return "no Kubernetes here (no control-plane manifests, no admin kubeconfig): no API server or kubelet to restart"


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    return etcd_restore_api_vars(LAYOUT.as_dict(), restored=[ctx.cluster.node(n).host for n in plan(ctx).nodes])


def expected_nodes(ctx: PhaseContext, found: RestorePlan) -> list[str] | None:
    """The Nodes the restored store holds, as a restored member read them when etcd started (None: not read)."""
    survey = ctx.results.etcd
    for name in found.nodes:
        report = survey.reports.get(name) if survey is not None else None
        if report is not None and report.member is not None and report.member.nodes is not None:
            return report.member.nodes
    return None


def check(ctx: PhaseContext) -> str:
    found = plan(ctx)
    result = ctx.playbook_results[-1]
    restored_hosts = {ctx.cluster.node(n).host for n in found.nodes}
    failed = result.failed_hosts
    down = [n for n in found.nodes if ctx.cluster.node(n).host in failed]
    if down:
        causes = "; ".join(failed[ctx.cluster.node(n).host].describe() for n in down)
        raise BootstrapError(f"etcd restore: the API servers did not come back on {', '.join(down)} ({causes}); "
                             "etcd holds the snapshot: run the restore again to finish")
    finish(ctx)
    silent = [n for n in nodes(ctx) if ctx.cluster.node(n).host in failed and ctx.cluster.node(n).host
              not in restored_hosts]
    note = (f"; the kubelet was not restarted on {', '.join(silent)} (did not answer): restart it there "
            "(`systemctl restart kubelet`)") if silent else ""
    holds = expected_nodes(ctx, found)
    if not admin_kubeconfig_path(ctx.cluster).exists():
        return f"the API servers are back, the kubelets restarted; no admin kubeconfig on this machine to ask them{note}"
    kube = api(ctx)
    deadline = time.monotonic() + ctx.settings.verify.timeout_s
    version = wait_for_api(kube, ctx.settings.verify.timeout_s)
    core = client.CoreV1Api(kube)
    while True:
        try:
            namespaces = {n.metadata.name for n in call_api(kube, core.list_namespace).items if n.metadata}
            served = {n.metadata.name for n in call_api(kube, core.list_node).items if n.metadata}
            break
        except ApiUnreachable:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)
    # What the store holds the API serves at once: nothing to wait for.
    problems, joined_later = api_problems(namespaces, served, holds, [n.name for n in ctx.cluster.nodes])
    if problems:
        raise BootstrapError(f"etcd restore: the API server ({version}) answers but {'; '.join(problems)}: was the "
                             "snapshot this cluster's? The data from before is kept aside on each member")
    later = (f"; not in the snapshot: {', '.join(joined_later)} (registered again by its kubelet where it is "
             "served; what ran there since the snapshot is unknown to the API: check it)") if joined_later else ""
    return (f"the API servers are back ({version}), the kubelets restarted: {len(namespaces)} namespaces, "
            f"{len(served)} nodes served{later}{note}")


PHASE = Phase("etcd_restore_api", "bring the API servers back, restart the kubelets, check what the API serves",
              check, playbook="etcd_restore_api.yml", extra_vars=extra_vars, limit=nodes, checks_playbook=True,
              skip_reason=skip_reason)
