"""etcd_restore_api (`bootstrap etcd restore`, static pods): the API servers, controller managers and schedulers
brought back on the restored members (their manifests moved back), then the API answering through the admin
kubeconfig and serving the restored objects (the namespaces, the control planes' Node objects). Skipped where etcd
runs under systemd: no API server was stopped."""
from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from provision.errors import BootstrapError
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.kube.verify import ApiUnreachable, call_api, wait_for_api
from provision.nodes.etcd.report import LAYOUT
from provision.phases.common import api
from provision.phases.engine import Phase, PhaseContext
from provision.phases.etcd_restore_check import plan
from provision.phases.etcd_restore_start import finish
from provision.render.playbook_vars import etcd_probe_vars


def skip_reason(ctx: PhaseContext) -> str | None:
    if ctx.results.etcd_restore is not None and plan(ctx).kind != "static_pod":
        return "etcd runs under systemd here: no API server was stopped"
    return None


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    return etcd_probe_vars(LAYOUT.as_dict())


def check(ctx: PhaseContext) -> str:
    found = plan(ctx)
    if not admin_kubeconfig_path(ctx.cluster).exists():
        finish(ctx)
        return "the API servers are back; no admin kubeconfig on this machine to ask them with"
    kube = api(ctx)
    deadline = time.monotonic() + ctx.settings.verify.timeout_s
    version = wait_for_api(kube, ctx.settings.verify.timeout_s)
    core = client.CoreV1Api(kube)
    while True:
        try:
            namespaces = {n.metadata.name for n in call_api(kube, core.list_namespace).items if n.metadata}
            nodes = {n.metadata.name for n in call_api(kube, core.list_node).items if n.metadata}
            break
        except ApiUnreachable:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)
    missing = [name for name in found.nodes if name not in nodes]
    if "kube-system" not in namespaces or missing:
        raise BootstrapError(f"etcd restore: the API server ({version}) answers but does not serve what the snapshot "
                             f"holds (namespace kube-system {'found' if 'kube-system' in namespaces else 'missing'}, "
                             f"Node objects missing: {', '.join(missing) or 'none'}): was the snapshot this "
                             "cluster's? The data from before is kept aside on each member")
    finish(ctx)
    return f"the API servers are back ({version}): {len(namespaces)} namespaces, {len(nodes)} nodes served"


PHASE = Phase("etcd_restore_api", "bring the API servers back and check what they serve", check,
              playbook="etcd_restore_api.yml", extra_vars=extra_vars, limit=lambda ctx: plan(ctx).nodes,
              skip_reason=skip_reason)
