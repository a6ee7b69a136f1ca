"""control_plane: kube-vip where the endpoint is a VIP, `kubeadm init --upload-certs` on the first control plane
(guarded by admin.conf), then the admin kubeconfig installed on this machine and the API server's version and
endpoint checked against the settings."""
from __future__ import annotations

from typing import Any

from provision.errors import BootstrapError
from provision.kube.kubeconfig import fetched_kubeconfig_path, install_admin_kubeconfig
from provision.kube.verify import read_cluster_configuration, wait_for_api
from provision.phases.common import api
from provision.phases.engine import Phase, PhaseContext
from provision.render.endpoint import endpoint_mode
from provision.render.kubeadm_config import CONFIG_PATH, endpoint_change_problem, render_init_config
from provision.render.manifests import STATIC_POD_DIR, kube_vip_manifest


def kube_vip_vars(ctx: PhaseContext) -> dict[str, Any]:
    """kube-vip's static pods (endpoint vip): one per control plane, for the interface it announces the VIP on, and
    the first control plane's copy for while kubeadm init runs. Empty without a VIP."""
    settings = ctx.settings
    found: dict[str, Any] = {"manifest_path": f"{STATIC_POD_DIR}/kube-vip.yaml", "manifests": {}, "during_init": ""}
    if endpoint_mode(ctx.cluster, settings) != "vip":
        return found

    def interface(name: str) -> str:
        chosen = settings.control_plane.interface or ctx.state.vip_interfaces.get(name)
        if chosen is None:
            raise BootstrapError(f"no interface known for kube-vip on {name}: run `bootstrap preflight` (it finds the "
                                 "route to the VIP), or set control_plane.interface")
        return chosen

    first = ctx.cluster.control_plane
    found["manifests"] = {n.host: kube_vip_manifest(settings, interface=interface(n.name))
                          for n in ctx.cluster.control_planes}
    found["during_init"] = kube_vip_manifest(settings, interface=interface(first.name), during_init=True)
    return found


def extra_vars(ctx: PhaseContext) -> dict[str, Any]:
    kube_vip = kube_vip_vars(ctx)
    version = ctx.state.kubernetes_version
    if version is None:
        raise BootstrapError("the Kubernetes release prepare installed is not known for this cluster: run "
                             "`bootstrap up --from prepare`")
    return {"cb_kubeadm_config": render_init_config(ctx.cluster, ctx.settings, version),
            "cb_kubeadm_config_path": CONFIG_PATH,
            "cb_kubeconfig_fetch_dest": str(fetched_kubeconfig_path(ctx.cluster)),
            "cb_kube_vip": kube_vip}


def check(ctx: PhaseContext) -> str:
    kubeconfig = install_admin_kubeconfig(fetched_kubeconfig_path(ctx.cluster), ctx.cluster, ctx.settings)
    ctx.results.kubeconfig = kubeconfig
    client = api(ctx)
    version = wait_for_api(client, timeout_s=120)
    problem = endpoint_change_problem(read_cluster_configuration(client), ctx.cluster, ctx.settings)
    if problem:
        raise BootstrapError(problem)
    wanted = ctx.settings.kubernetes.version
    running = version.lstrip("v").split("+")[0]
    if not (running == wanted if wanted.count(".") == 2 else running.startswith(wanted + ".")):
        raise BootstrapError(f"the API server runs {version} but kubernetes.version is {wanted}: the control plane "
                             "was initialised with another version; `bootstrap down`, then `bootstrap up` to change it")
    return f"API server {version}; kubeconfig {kubeconfig}"


PHASE = Phase("control_plane", "kubeadm init and the admin kubeconfig", check, playbook="control_plane.yml",
              extra_vars=extra_vars, needs=("kubernetes_version", "vip_interfaces"), provides=("kubeconfig",))
