"""The inventory's model: the nodes of a cluster as the rest of the tool sees them, and the plain data an inventory
reads into (`InventoryData`) before it is built into them.

Three modules, one direction: inventory_reader.py turns the file (and Ansible's objects for it) into
InventoryData; inventory_builder.py, pure, turns InventoryData into a Cluster, checking every value where it is
read; this module holds the types both share. inventory.py is the front door (`load_inventory`) and re-exports
the names other modules import.
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from provision.errors import InputError
from provision.inputs.files import shown
from provision.inputs.ssh_options import SshOptions
from provision.inputs.values import HostName, NodeName

# etcd needs a majority of its members: an even count tolerates no more failures than one fewer, and etcd
# advises against more than seven.
MAX_CONTROL_PLANES = 7
# Kubernetes node names are RFC 1123 subdomains, lower case; the host name also becomes the machine's hostname,
# whose labels are at most 63 characters, the whole at most 64: one limit of 63 for both.
MAX_NODE_NAME = 63
NODE_NAME_CHARACTERS_RE = re.compile(r"[a-z0-9.-]+", re.ASCII)
GpuMode = Literal["true", "false", "auto"]
Role = Literal["control_plane", "worker"]
InventoryFormat = Literal["ini", "yaml"]


@dataclass(frozen=True)
class InventoryData:
    """An inventory as plain data, Ansible's objects left behind: each group's hosts in Ansible's order (children's
    hosts included), every host in Ansible's order with the groups it is in, and each host's variables as Ansible
    resolves them (group_vars and host_vars files included, Ansible's own magic variables left out; a vault value is
    files.VaultValue). What inventory_builder.py builds a Cluster from, and what a test writes by hand."""

    path: Path
    inventory_format: InventoryFormat
    groups: Mapping[str, tuple[str, ...]]
    hosts: tuple[str, ...]
    host_groups: Mapping[str, tuple[str, ...]]
    variables: Mapping[str, dict[str, Any]]
    # What the reader found that this run reads differently (a group_vars file no group reads).
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Node:
    # The Kubernetes node name, also the machine's hostname: what kubeadm, the API checks and drains use.
    name: NodeName
    address: str
    role: Role
    user: str
    port: int = 22
    key_file: Path | None = None
    gpu: GpuMode = "auto"
    # From ansible_ssh_common_args / ansible_ssh_extra_args: a known_hosts file of its own, a bastion, and the
    # other options (an allowlist: ssh_options.py), which only Ansible uses.
    ssh: SshOptions = field(default_factory=SshOptions)
    # Every variable Ansible resolved for the host (group_vars included), as plain data: read for what other
    # installers' variables say (validation.py); the run's inventory carries only what the tool understood.
    variables: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # The inventory's host name, what Ansible calls the node (run limits, the groups file, inventory_hostname);
    # left out, the node name.
    host: HostName = HostName("")  # noqa: RUF009 - a NewType: the call is the empty string itself
    # The IPv4 address the other nodes reach this one on, when the inventory gives one apart from ansible_host
    # (`node_ip`, kubespray's `ip`).
    ip: str | None = None
    # The interpreter the inventory names for the node (ansible_python_interpreter), else None: preflight's choice.
    python_interpreter: str | None = None
    # ansible_become as the inventory gives it (None: not given; the playbooks become root themselves).
    become: bool | None = None

    def __post_init__(self) -> None:
        if not self.host:
            object.__setattr__(self, "host", HostName(self.name))

    @property
    def is_control_plane(self) -> bool:
        return self.role == "control_plane"

    @property
    def cluster_address(self) -> str | None:
        """The address the other nodes reach this one on: node_ip (or kubespray's ip), else ansible_host when it is
        an IPv4 address; None leaves the choice to kubeadm and the kubelet (the default route's interface)."""
        if self.ip:
            return self.ip
        return self.address if is_ipv4(self.address) else None


@dataclass(frozen=True)
class Cluster:
    inventory_path: Path
    nodes: tuple[Node, ...]
    inventory_format: InventoryFormat = "ini"
    # Lines about what the inventory says that bootstrap reads differently or not at all (shown, not refused).
    warnings: tuple[str, ...] = ()

    @property
    def control_planes(self) -> tuple[Node, ...]:
        """In inventory order; the first is where `kubeadm init` runs, the others join it."""
        return tuple(n for n in self.nodes if n.is_control_plane)

    @property
    def control_plane(self) -> Node:
        """The first control plane: `kubeadm init` runs there, join commands are minted there, and this machine
        keeps the cluster's state under its name."""
        return self.control_planes[0]

    @property
    def workers(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if not n.is_control_plane)

    def node(self, name: str) -> Node:
        """The node of that node name, or else of that inventory host name."""
        for candidate in (*(n for n in self.nodes if n.name == name), *(n for n in self.nodes if n.host == name)):
            return candidate
        raise InputError(f"{self.inventory_path}: no host named {shown(name)}; hosts are: "
                         f"{', '.join(n.name for n in self.nodes)}")

    def hosts(self, names: Iterable[str]) -> list[HostName]:
        """The inventory host names (what Ansible limits take) of these nodes."""
        return [self.node(name).host for name in names]


def is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def node_ip_addresses(cluster: Cluster) -> dict[str, ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Nodes whose address is a literal IP (host names are resolved only on the nodes themselves)."""
    found: dict[str, ipaddress.IPv4Address | ipaddress.IPv6Address] = {}
    for node in cluster.nodes:
        try:
            found[node.name] = ipaddress.ip_address(node.address)
        except ValueError:
            continue
    return found
