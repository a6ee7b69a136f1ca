"""Where kubeadm and cluster-bootstrap keep things on a node, each path named once.

The Python side renders with them (kubeadm's configuration, kube-vip's kubeconfig, the add-ons' directory) and
hands the same names to every playbook as `cb_paths` (render/playbook_vars.py): a role reads
`cb_paths.admin_conf`, never spells /etc/kubernetes/admin.conf again.
"""
from __future__ import annotations

KUBERNETES_DIR = "/etc/kubernetes"
# Where `kubeadm init` writes the cluster admin's kubeconfig on a control plane (the control_plane role fetches it).
ADMIN_CONF = f"{KUBERNETES_DIR}/admin.conf"
# kubeadm (1.29 on, so every supported minor) writes admin.conf before it is authorised; the first control plane's
# kube-vip uses this until `kubeadm init` is done.
SUPER_ADMIN_CONF = f"{KUBERNETES_DIR}/super-admin.conf"
# The kubelet's kubeconfig that `kubeadm init` and `kubeadm join` write on every node: a node that has it has joined.
KUBELET_CONF = f"{KUBERNETES_DIR}/kubelet.conf"
# The kubelet's static pods (the control plane's, kube-vip's, the local API proxy's).
STATIC_POD_DIR = f"{KUBERNETES_DIR}/manifests"
# Written on the first control plane by the kubeadm_control_plane role; `kubeadm init --config` reads it.
KUBEADM_CONFIG = f"{KUBERNETES_DIR}/kubeadm-config.yaml"
# The add-ons' fetched and rendered parts, on the first control plane.
ADDONS_DIR = f"{KUBERNETES_DIR}/addons"


def node_paths() -> dict[str, str]:
    """The paths above as the roles read them (cb_paths)."""
    return {"kubernetes_dir": KUBERNETES_DIR, "admin_conf": ADMIN_CONF, "super_admin_conf": SUPER_ADMIN_CONF,
            "kubelet_conf": KUBELET_CONF, "static_pods": STATIC_POD_DIR, "kubeadm_config": KUBEADM_CONFIG,
            "addons": ADDONS_DIR}
