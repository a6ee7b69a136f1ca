"""What prepare makes true on every node, decided once: the kernel modules and sysctls Kubernetes networking needs,
the ports kubeadm and Calico use, the files prepare writes them to and the marks it leaves in shared files.

The roles receive these tables (render/playbook_vars.py: `cb_node_tables`, and the wanted file contents built from
them, `cb_prepare`); the prepare phase's check (nodes/prepare.py) and the doctor (nodes/doctor) import them. Nothing
else spells them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Loaded now and at every boot (the modules-load.d file).
KERNEL_MODULES = ("overlay", "br_netfilter")
MODULES_LOAD_FILE = "/etc/modules-load.d/cluster-bootstrap.conf"
# Only net.* keys: they are per network namespace. vm.* and kernel.* are left to the kubelet. Set live and written
# to the sysctl.d file, so that they survive reboots.
SYSCTLS = {
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "1",
    "net.ipv4.ip_forward": "1",
}
SYSCTL_FILE = "/etc/sysctl.d/99-cluster-bootstrap.conf"


@dataclass(frozen=True)
class PortRule:
    """A port or range of one protocol a component listens on, as firewalld and the roles write it (6443/tcp,
    2379-2380/tcp)."""

    spec: str
    component: str

    @property
    def low(self) -> int:
        return int(self.spec.split("/")[0].split("-")[0])

    @property
    def high(self) -> int:
        span = self.spec.split("/")[0]
        return int(span.split("-")[1]) if "-" in span else self.low

    @property
    def protocol(self) -> str:
        return self.spec.split("/")[1]


# https://kubernetes.io/docs/reference/networking/ports-and-protocols/ and Calico's network requirements.
CONTROL_PLANE_PORTS = (
    PortRule("6443/tcp", "kube-apiserver"),
    PortRule("2379-2380/tcp", "etcd"),
    PortRule("10250/tcp", "kubelet"),
    PortRule("10257/tcp", "kube-controller-manager"),
    PortRule("10259/tcp", "kube-scheduler"),
)
WORKER_PORTS = (
    PortRule("10250/tcp", "kubelet"),
    PortRule("10256/tcp", "kube-proxy health"),
    PortRule("30000-32767/tcp", "NodePort services"),
)
CALICO_PORTS = (
    PortRule("179/tcp", "BGP"),
    PortRule("4789/udp", "VXLAN"),
    PortRule("5473/tcp", "Typha"),
)
# IP-in-IP is a protocol, not a port.
CALICO_PROTOCOLS = ("ipip",)


def open_ports(control_plane: bool) -> tuple[PortRule, ...]:
    """The ports a node of this role needs open: the control plane's on control planes, every node's, Calico's;
    each once, in that order."""
    chosen = (*(CONTROL_PLANE_PORTS if control_plane else ()), *WORKER_PORTS, *CALICO_PORTS)
    return tuple({rule.spec: rule for rule in chosen}.values())


# The marks prepare leaves: around its block of /etc/hosts ("# BEGIN <mark>" ... "# END <mark>"), and in each
# registry mirror's hosts.toml it writes (so that one for a registry dropped from the settings is removed, and the
# operator's own files are not).
HOSTS_MARKER = "cluster-bootstrap nodes"
REGISTRY_MIRROR_MARKER = "cluster-bootstrap setting container_runtime.registry_mirrors"


def role_tables() -> dict[str, Any]:
    """The tables as the roles receive them (cb_node_tables)."""
    return {
        "kernel_modules": list(KERNEL_MODULES),
        "modules_load_file": MODULES_LOAD_FILE,
        "sysctls": dict(SYSCTLS),
        "sysctl_file": SYSCTL_FILE,
        "control_plane_ports": [rule.spec for rule in CONTROL_PLANE_PORTS],
        "worker_ports": [rule.spec for rule in WORKER_PORTS],
        "calico_ports": [rule.spec for rule in CALICO_PORTS],
        "calico_protocols": list(CALICO_PROTOCOLS),
        "hosts_marker": HOSTS_MARKER,
        "registry_mirror_marker": REGISTRY_MIRROR_MARKER,
    }
