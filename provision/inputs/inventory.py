"""The inventory: Ansible INI or YAML, read with Ansible's own parser, turned into a validated Cluster.

Groups: `control_plane` (exactly one host; `masters`, `master` and kubespray's `kube_control_plane` are
accepted as aliases) and `workers` (may be empty; `nodes`, `kube_node` accepted). Per host: ansible_host,
ansible_user, ansible_port, ansible_ssh_private_key_file and `gpu` (true / false / auto).
"""
from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from provision.errors import InputError

CONTROL_PLANE_GROUPS = ("control_plane", "masters", "master", "kube_control_plane")
WORKER_GROUPS = ("workers", "nodes", "kube_node")
# Kubernetes node names are RFC 1123 subdomains; the host name becomes the node name.
NODE_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
GpuMode = Literal["true", "false", "auto"]
Role = Literal["control_plane", "worker"]


@dataclass(frozen=True)
class Node:
    name: str
    address: str
    role: Role
    user: str
    port: int = 22
    key_file: Path | None = None
    gpu: GpuMode = "auto"
    # Every variable Ansible resolved for the host (group_vars included), for playbooks that need more.
    variables: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_control_plane(self) -> bool:
        return self.role == "control_plane"


@dataclass(frozen=True)
class Cluster:
    inventory_path: Path
    nodes: tuple[Node, ...]

    @property
    def control_plane(self) -> Node:
        return next(n for n in self.nodes if n.is_control_plane)

    @property
    def workers(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if not n.is_control_plane)

    def node(self, name: str) -> Node:
        for candidate in self.nodes:
            if candidate.name == name:
                return candidate
        raise InputError(f"{self.inventory_path}: no host named '{name}'; hosts are: "
                         f"{', '.join(n.name for n in self.nodes)}")


def _quiet_ansible() -> None:
    # Inventory problems are reported by us in one line; Ansible's own warnings would only repeat them.
    os.environ.setdefault("ANSIBLE_DEPRECATION_WARNINGS", "False")
    os.environ.setdefault("ANSIBLE_LOCALHOST_WARNING", "False")
    os.environ.setdefault("ANSIBLE_INVENTORY_UNPARSED_WARNING", "False")


def _parse_error(path: Path) -> str | None:
    """Ansible's own explanation of why the file is not a valid inventory, or None if it is."""
    from ansible.inventory.data import InventoryData
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import inventory_loader

    plugin_name = "yaml" if path.suffix in (".yml", ".yaml", ".json") else "ini"
    plugin = inventory_loader.get(plugin_name)
    try:
        plugin.parse(InventoryData(), DataLoader(), str(path.resolve()), cache=False)
    except Exception as exc:  # noqa: BLE001 - any parser failure becomes the user's one-line message
        message = str(getattr(exc, "message", "") or exc).strip().splitlines()
        return message[0] if message else type(exc).__name__
    return None


def _as_bool_word(value: Any, where: str) -> GpuMode:
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return "true"
    if text in ("false", "no", "0", "off"):
        return "false"
    if text == "auto":
        return "auto"
    raise InputError(f"{where}: gpu={value!r} is not valid: write gpu=true, gpu=false or gpu=auto")


def load_inventory(path: Path) -> Cluster:
    """Parse and validate an inventory. Raises InputError (one line, names the file and host) on bad input."""
    if not path.is_file():
        raise InputError(f"{path}: inventory file not found; pass an existing INI or YAML inventory")
    _quiet_ansible()
    problem = _parse_error(path)
    if problem:
        raise InputError(f"{path}: not a valid Ansible inventory: {problem}")

    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(path)])
    variables = VariableManager(loader=loader, inventory=manager)
    groups = manager.groups

    def members(names: tuple[str, ...]) -> dict[str, str]:
        found: dict[str, str] = {}
        for group_name in names:
            if group_name in groups:
                for host in groups[group_name].get_hosts():
                    found.setdefault(host.name, group_name)
        return found

    control_plane = members(CONTROL_PLANE_GROUPS)
    workers = members(WORKER_GROUPS)
    if not control_plane:
        raise InputError(f"{path}: no control plane: put exactly one host under [control_plane] "
                         f"(aliases: {', '.join(CONTROL_PLANE_GROUPS[1:])})")
    if len(control_plane) > 1:
        raise InputError(f"{path}: {len(control_plane)} control-plane hosts ({', '.join(sorted(control_plane))}); "
                         "only one is supported for now: move the others under [workers]")
    for name in control_plane:
        if name in workers:
            raise InputError(f"{path}: host '{name}' is in both [{control_plane[name]}] and [{workers[name]}]: "
                             "a host is either the control plane or a worker, remove it from one group")
    for host in manager.get_hosts():
        if host.name not in control_plane and host.name not in workers:
            raise InputError(f"{path}: host '{host.name}' is in neither [control_plane] nor [workers]: "
                             "add it to one of them or remove it")

    nodes = []
    for host in manager.get_hosts():
        resolved = variables.get_vars(host=host, include_hostvars=False)
        where = f"{path}: host '{host.name}'"
        port = resolved.get("ansible_port", resolved.get("ansible_ssh_port", 22))
        try:
            port = int(port)
        except (TypeError, ValueError):
            raise InputError(f"{where}: ansible_port={port!r} is not a number: write a TCP port such as 22") from None
        if not 0 < port < 65536:
            raise InputError(f"{where}: ansible_port={port} is out of range: use 1-65535")
        key = resolved.get("ansible_ssh_private_key_file") or resolved.get("ansible_private_key_file")
        key_file = Path(str(key)).expanduser() if key else None
        if key_file is not None and not key_file.is_absolute():
            key_file = (path.parent / key_file).resolve()
        if key_file is not None and not key_file.is_file():
            raise InputError(f"{where}: ssh key file {key_file} does not exist: fix ansible_ssh_private_key_file")
        user = resolved.get("ansible_user") or resolved.get("ansible_ssh_user") or "root"
        nodes.append(Node(
            name=host.name,
            address=str(resolved.get("ansible_host", host.name)),
            role="control_plane" if host.name in control_plane else "worker",
            user=str(user),
            port=port,
            key_file=key_file,
            gpu=_as_bool_word(resolved.get("gpu", "auto"), where),
            variables={k: v for k, v in resolved.items() if not k.startswith(("ansible_play", "playbook_"))},
        ))
    cluster = Cluster(inventory_path=path, nodes=tuple(nodes))
    _check_nodes(cluster)
    return cluster


def _check_nodes(cluster: Cluster) -> None:
    path = cluster.inventory_path
    seen_names: dict[str, str] = {}
    seen_addresses: dict[tuple[str, int], str] = {}
    for node in cluster.nodes:
        # kubelet lower-cases the host name it registers, so "Node1" and "node1" would be one node.
        if not NODE_NAME_RE.match(node.name.lower()) or len(node.name) > 63:
            raise InputError(f"{path}: host '{node.name}' is not a valid Kubernetes node name: use letters, "
                             "digits and '-' (at most 63 characters), e.g. gpu-worker-1")
        other = seen_names.get(node.name.lower())
        if other:
            raise InputError(f"{path}: hosts '{other}' and '{node.name}' have the same name once lower-cased: "
                             "give every host a distinct name")
        seen_names[node.name.lower()] = node.name
        key = (node.address, node.port)
        if key in seen_addresses:
            raise InputError(f"{path}: hosts '{seen_addresses[key]}' and '{node.name}' share the address "
                             f"{node.address}:{node.port}: each host needs its own ansible_host")
        seen_addresses[key] = node.name
        if not node.address.strip():
            raise InputError(f"{path}: host '{node.name}' has an empty ansible_host: set its address")


def node_ip_addresses(cluster: Cluster) -> dict[str, ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Nodes whose address is a literal IP (host names are resolved only on the nodes themselves)."""
    found = {}
    for node in cluster.nodes:
        try:
            found[node.name] = ipaddress.ip_address(node.address)
        except ValueError:
            continue
    return found
