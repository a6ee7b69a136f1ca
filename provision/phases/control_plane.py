"""control_plane: kube-vip where the endpoint is a VIP, `kubeadm init --upload-certs` on the first control plane
(guarded by admin.conf), then the admin kubeconfig installed on this machine and the API server's version and
endpoint checked against the settings."""
from __future__ import annotations

from typing import Any

from provision.errors import BootstrapError
from provision.kube.client import read_cluster_configuration, wait_for_api
from provision.kube.kubeconfig import fetched_kubeconfig_path, install_admin_kubeconfig
from provision.phases.common import api
from provision.phases.engine import Phase, PhaseContext
from provision.render.kubeadm_config import endpoint_change_problem
from provision.render.playbook_vars import control_plane_vars


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    version = ctx.state.kubernetes_version
    if version is None:
        raise BootstrapError("the Kubernetes release prepare installed is not known for this cluster: run "
                             "`bootstrap up --from prepare`")
    return control_plane_vars(ctx.cluster, ctx.settings, version, vip_interfaces=ctx.state.vip_interfaces,
                              fetch_dest=fetched_kubeconfig_path(ctx.cluster))


def check(ctx: PhaseContext) -> str:
    kubeconfig = install_admin_kubeconfig(fetched_kubeconfig_path(ctx.cluster), ctx.cluster, ctx.settings)
    ctx.results.kubeconfig = kubeconfig
    client = api(ctx)
    version = wait_for_api(client, timeout_s=120)
    problem = endpoint_change_problem(read_cluster_configuration(client), ctx.cluster, ctx.settings)
    if problem:
        raise BootstrapError(problem)
    wanted = ctx.settings.kubernetes
    if not wanted.is_running(version):
        raise BootstrapError(f"the API server runs {version} but kubernetes.version is {wanted.version}: the control "
                             "plane was initialised with another version; `bootstrap down`, then `bootstrap up` to "
                             "change it")
    return f"API server {version}; kubeconfig {kubeconfig}"


PHASE = Phase("control_plane", "kubeadm init and the admin kubeconfig", check, playbook="control_plane.yml",
              extra_vars=extra_vars, needs=("kubernetes_version", "vip_interfaces"), provides=("kubeconfig",))
