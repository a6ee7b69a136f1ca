"""How other installers write an inventory, and what each of their words means here.

kubespray (`kube_control_plane`, `kube_node`, `etcd`, `k8s_cluster`, the `ip` host variable), kubeasz
(`kube_master`, `kube_node`, IP addresses as host names with the node's name in `k8s_nodename`) and the
tutorials (`master`/`worker`) name the same two roles differently. Their group names are aliases here; the groups
and variables that ask for something bootstrap does not do are named in one line with what to write instead.
The tables are data: inventory.py and validation.py apply them.
"""
from __future__ import annotations

# Every group that holds control planes, and every group that holds workers (kubespray before 2.16 spelled its
# groups with '-').
CONTROL_PLANE_GROUPS = ("control_plane", "kube_control_plane", "masters", "master", "kube_master", "kube-master")
WORKER_GROUPS = ("workers", "worker", "kube_node", "nodes", "node", "kube-node")
# Groups that only repeat the others: accepted when they do (kubespray's and kubeasz's own).
CLUSTER_GROUPS = ("k8s_cluster", "k8s-cluster")
# kubespray and kubeasz list the etcd members; with kubeadm's stacked etcd they are the control planes.
ETCD_GROUPS = ("etcd",)

# Groups other installers fill with machines of roles bootstrap does not have: what to write instead.
FOREIGN_GROUPS: dict[str, str] = {
    "calico_rr": "Calico route reflectors are not set up (Calico runs its node-to-node mesh): leave the group empty "
                 "or remove it",
    "calico-rr": "Calico route reflectors are not set up (Calico runs its node-to-node mesh): leave the group empty "
                 "or remove it",
    "bastion": "a bastion is not a node: reach the nodes through it with "
               "ansible_ssh_common_args='-o ProxyJump=USER@BASTION' on them, and remove the group",
    "ex_lb": "an external load balancer is not set up: the API is served through control_plane.endpoint (a "
             "kube-vip address, or a local proxy on every node) in cluster.yaml; remove the group",
    "harbor": "no registry is installed: point offline.image_repository or container_runtime.registry_mirrors in "
              "cluster.yaml at yours, and remove the group",
    "chrony": "no time server is set up: prepare turns on time synchronisation on every node; remove the group",
}

# Host variables naming the node: its Kubernetes node name and hostname (the inventory name is then only what
# Ansible calls the host). kubeasz writes k8s_nodename, kubespray kube_override_hostname.
NODE_NAME_VARIABLES = ("k8s_nodename", "kube_override_hostname")
# Host variables naming the address the other nodes reach this one on (kubespray's `ip`).
NODE_ADDRESS_VARIABLES = ("node_ip", "ip")
# kubespray's address for the other nodes when it differs from `ip` (NAT): one address per node here.
ACCESS_ADDRESS_VARIABLE = "access_ip"

# Variables that set, in another installer, what cluster.yaml sets here: the settings key. Said (once) when their
# value differs from the effective setting, since the run would not do what they ask.
SETTING_VARIABLES: dict[str, str] = {
    # kubeasz (hosts file [all:vars])
    "CLUSTER_CIDR": "kubernetes.pod_cidr",
    "SERVICE_CIDR": "kubernetes.service_cidr",
    "CLUSTER_DNS_DOMAIN": "kubernetes.dns_domain",
    "PROXY_MODE": "kubernetes.kube_proxy_mode",
    "CLUSTER_NETWORK": "network plugin",
    "CONTAINER_RUNTIME": "container runtime",
    "SECURE_PORT": "API server port",
    # kubespray (group_vars, or vars in its YAML inventory)
    "kube_pods_subnet": "kubernetes.pod_cidr",
    "kube_service_addresses": "kubernetes.service_cidr",
    "dns_domain": "kubernetes.dns_domain",
    "kube_proxy_mode": "kubernetes.kube_proxy_mode",
    "kube_network_plugin": "network plugin",
    "kube_version": "kubernetes.version",
    "container_manager": "container runtime",
    "kube_apiserver_port": "API server port",
}
# Variables that mean something elsewhere and nothing here, and why that loses nothing.
IGNORED_VARIABLES: dict[str, str] = {
    "etcd_member_name": "kubeadm names each etcd member after its node",
}
