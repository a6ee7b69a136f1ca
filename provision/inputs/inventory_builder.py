"""Building a Cluster from an inventory's plain data (inventory_model.InventoryData): pure, no Ansible, no file
read but a private key's. Every group and host is checked here, each value where it is read, so a bad inventory
is refused in one line naming the file, the host and the variable before any connection.

Groups: the control planes (one, or an odd number up to seven; two are allowed and warned about) under
`control_plane` or an alias (`kube_control_plane`, `masters`, `master`, `kube_master`), the workers (may be
none) under `workers` or an alias (`worker`, `kube_node`, `nodes`, `node`); `etcd` and `k8s_cluster` are accepted
where they only repeat those (dialects.py holds every installer's words). Per host: ansible_host, ansible_user,
ansible_port, ansible_ssh_private_key_file, ansible_ssh_common_args (a known_hosts file and a bastion, see
ssh_options.py), `gpu` (true / false / auto), the node's address for the cluster (`node_ip`, or kubespray's `ip`)
and its name (`k8s_nodename`, kubespray's `kube_override_hostname`: needed where the host name is an IP address).
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inputs.ansible_variables import variable_problem
from provision.inputs.dialects import (
    ACCESS_ADDRESS_VARIABLE,
    CLUSTER_GROUPS,
    CONTROL_PLANE_GROUPS,
    ETCD_GROUPS,
    FOREIGN_GROUPS,
    NODE_ADDRESS_VARIABLES,
    NODE_NAME_VARIABLES,
    WORKER_GROUPS,
)
from provision.inputs.files import find_vault_value, shown
from provision.inputs.host_values import (
    _user_problem,
    address_problem,
    connection_problem,
    key_file_problem,
    node_name_problem,
    port_problem,
    vault_refusal,
)
from provision.inputs.inventory_model import (
    MAX_CONTROL_PLANES,
    MAX_NODE_NAME,
    Cluster,
    GpuMode,
    InventoryData,
    Node,
    Role,
    is_ipv4,
)
from provision.inputs.settings import known_hosts_problem
from provision.inputs.ssh_options import SSH_ARG_VARIABLES, SshOptions, parse_ssh_arguments
from provision.inputs.values import (
    IPV4_UNICAST,
    LOCAL_PATH,
    NODE_PATH,
    HostName,
    NodeName,
)

NAME_FIX = f"use lower-case letters, digits and '-' (at most {MAX_NODE_NAME} characters), e.g. gpu-worker-1"


def _node_name(where: str, host_name: str, resolved: dict[str, Any]) -> str:
    """The node's name: a node-name variable when the inventory gives one (kubeasz's k8s_nodename, empty by
    default, means none), else the host name; either checked as kubeadm checks node names."""
    given = {variable: resolved[variable] for variable in NODE_NAME_VARIABLES
             if resolved.get(variable) is not None and resolved.get(variable) != ""}
    if len({str(value) for value in given.values()}) > 1:
        both = " and ".join(f"{variable}={shown(value)}" for variable, value in given.items())
        raise InputError(f"{where}: {both} name the node differently: keep one")
    for variable, value in given.items():
        problem = node_name_problem(value) if isinstance(value, str) else "is not a name"
        if problem is None and is_ipv4(value):
            problem = "is an IP address"
        if problem:
            raise InputError(f"{where}: {variable}={shown(value)} is not a valid Kubernetes node name: it {problem}; "
                             f"{NAME_FIX}")
        if node_name_problem(host_name) and not is_ipv4(host_name):
            raise InputError(f"{where} is not a valid inventory host name: it {node_name_problem(host_name)}; "
                             f"name the host by its IP address or {NAME_FIX}")
        return str(value)
    problem = node_name_problem(host_name)
    if problem:
        raise InputError(f"{where} is not a valid Kubernetes node name: it {problem}; {NAME_FIX}")
    if is_ipv4(host_name):
        raise InputError(f"{where} is an IP address, which would become the node's name and its machine's "
                         f"hostname: name the node with k8s_nodename, e.g. `{host_name} k8s_nodename=gpu-worker-1`")
    return host_name


def _node_ip(where: str, address: str, resolved: dict[str, Any]) -> str | None:
    """The address the other nodes reach this one on, when the inventory gives one: node_ip, or kubespray's ip
    (both IPv4 addresses a machine can have; the two, and kubespray's access_ip, must agree)."""
    given = {variable: resolved[variable] for variable in NODE_ADDRESS_VARIABLES
             if resolved.get(variable) is not None and resolved.get(variable) != ""}
    for variable, value in given.items():
        problem = IPV4_UNICAST.problem(value)
        if problem:
            raise InputError(f"{where}: {variable}={shown(value)} is not an IPv4 address of a machine ({problem}; "
                             "clusters are IPv4-only for now): write the address the node uses to reach the others, "
                             "e.g. node_ip=10.0.0.5")
    if len(set(given.values())) > 1:
        both = " and ".join(f"{variable}={value}" for variable, value in given.items())
        raise InputError(f"{where}: {both} differ: both name the address the other nodes reach this one on; keep one")
    ip = str(next(iter(given.values()))) if given else None
    access = resolved.get(ACCESS_ADDRESS_VARIABLE)
    if access not in (None, "") and access != (ip or address):
        raise InputError(f"{where}: {ACCESS_ADDRESS_VARIABLE}={shown(access)} differs from the node's address "
                         f"{ip or address}: every node has one address for the cluster here; set ip (or node_ip) to "
                         f"the address the other nodes reach this one on and remove {ACCESS_ADDRESS_VARIABLE}")
    return ip


def _one_of(where: str, resolved: dict[str, Any], names: tuple[str, ...], default: Any, *,
            null_is_given: bool = True) -> tuple[str, Any]:
    """A setting Ansible reads under several names (the later one wins in Ansible: ansible_ssh_host over
    ansible_host): the one given, refused when two are given differently, so that bootstrap's connections and
    Ansible's cannot go to different machines. A name given as null counts as given unless `null_is_given` is
    false."""
    given = {name: resolved[name] for name in names
             if name in resolved and (null_is_given or resolved[name] is not None)}
    if len({str(value) for value in given.values()}) > 1:
        both = " and ".join(f"{name}={shown(value)}" for name, value in given.items())
        raise InputError(f"{where}: {both} differ, and Ansible would use {names[-1]} while its other spelling says "
                         f"otherwise: keep one ({names[0]})")
    if given:
        return next(iter(given.items()))
    return names[0], default


def _interpreter(where: str, resolved: dict[str, Any]) -> str | None:
    value = resolved.get("ansible_python_interpreter")
    if value is None:
        return None
    if value in ("auto", "auto_silent", "auto_legacy", "auto_legacy_silent"):
        return str(value)
    problem = NODE_PATH.problem(value)
    if problem:
        raise InputError(f"{where}: ansible_python_interpreter {problem}: name the node's Python by its absolute "
                         "path (/usr/bin/python3), or leave it out and preflight chooses one")
    return str(value)


def _become(where: str, resolved: dict[str, Any]) -> bool | None:
    """ansible_become as given (a boolean, in any of Ansible's spellings); become_user and become_method may only
    say what bootstrap does anyway (root, through sudo: preflight checks sudo the same way)."""
    for name, allowed in (("ansible_become_user", "root"), ("ansible_become_method", "sudo")):
        value = resolved.get(name)
        if value is not None and value != allowed:
            raise InputError(f"{where}: {name}={shown(value)} is not supported: bootstrap's tasks run as root through "
                             f"sudo, as preflight checks; remove it")
    value = resolved.get("ansible_become")
    if value is None:
        return None
    text = str(value).strip().lower() if isinstance(value, (str, bool, int)) else ""
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise InputError(f"{where}: ansible_become={shown(value)} is not true or false")


def _node(path: Path, host_name: str, role: Role, resolved: dict[str, Any]) -> Node:
    """One host's variables -> a Node, each value checked where it is read."""
    where = f"{path}: host {shown(host_name)}"
    name = _node_name(where, host_name, resolved)
    encrypted = find_vault_value(resolved)
    if encrypted:
        raise vault_refusal(where, encrypted)
    problem = connection_problem(resolved) or variable_problem(resolved)
    if problem:
        raise InputError(f"{where}: {problem}")

    spelled, address = _one_of(where, resolved, ("ansible_host", "ansible_ssh_host"), host_name)
    problem = address_problem(address) if isinstance(address, str) else "is not an address"
    if problem:
        raise InputError(f"{where}: {spelled}={shown(address)} {problem}")
    ip = _node_ip(where, str(address), resolved)

    spelled, port = _one_of(where, resolved, ("ansible_port", "ansible_ssh_port"), 22)
    problem = port_problem(port)
    if problem:
        shown_port = port if isinstance(port, int) and not isinstance(port, bool) else shown(port)
        raise InputError(f"{where}: {spelled}={shown_port} {problem}")

    spelled, user = _one_of(where, resolved, ("ansible_user", "ansible_ssh_user"), "root")
    problem = _user_problem(user)
    if problem:
        raise InputError(f"{where}: {spelled}={shown(user)} {problem}")

    # Absent or null: the SSH agent and default keys; an empty name is a mistake, not a choice.
    _spelled, key = _one_of(where, resolved, ("ansible_private_key_file", "ansible_ssh_private_key_file"), None,
                            null_is_given=False)
    key_file = None
    if key is not None:
        if not isinstance(key, str) or not key.strip() or LOCAL_PATH.problem(key):
            raise InputError(f"{where}: ansible_ssh_private_key_file={shown(key)} is not a file name")
        try:
            key_file = path.parent.resolve() / Path(key).expanduser()
        except RuntimeError:
            raise InputError(f"{where}: ansible_ssh_private_key_file={shown(key)} names a home directory that does "
                             "not exist: write the path out") from None
        problem = key_file_problem(key_file)
        if problem:
            raise InputError(f"{where}: ssh key file {key_file} {problem}: fix ansible_ssh_private_key_file")

    ssh = _ssh_options(path, where, resolved)
    return Node(
        name=NodeName(name),
        address=str(address),
        role=role,
        user=str(user),
        port=int(port),
        key_file=key_file,
        gpu=_as_bool_word(resolved.get("gpu", "auto"), where),
        ssh=ssh,
        variables={k: v for k, v in resolved.items() if not k.startswith(("ansible_play", "playbook_"))},
        host=HostName(host_name),
        ip=ip,
        python_interpreter=_interpreter(where, resolved),
        become=_become(where, resolved),
    )


def _ssh_options(path: Path, where: str, resolved: dict[str, Any]) -> SshOptions:
    found: list[SshOptions] = []
    for variable in SSH_ARG_VARIABLES:
        value = resolved.get(variable)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise InputError(f"{where}: {variable}={shown(value)} is not a string of ssh options")
        found.append(parse_ssh_arguments(value, variable, where, path.parent.resolve()))
    # Ansible puts ansible_ssh_common_args before ansible_ssh_extra_args, and ssh takes an option's first value: two
    # different ones are refused rather than read one way here and possibly another there.
    for what, values in (("UserKnownHostsFile", {o.known_hosts_file for o in found if o.known_hosts_file}),
                         ("ProxyJump", {o.jump for o in found if o.jump})):
        if len(values) > 1:
            raise InputError(f"{where}: {' and '.join(SSH_ARG_VARIABLES)} give {what} differently: keep one")
    known_hosts = next((o.known_hosts_file for o in found if o.known_hosts_file), None)
    jump = next((o.jump for o in found if o.jump), None)
    if known_hosts is not None:
        problem = known_hosts_problem(str(known_hosts))
        if problem:
            raise InputError(f"{where}: UserKnownHostsFile {problem}")
    if jump is not None:
        problem = address_problem(jump.host)
        if problem:
            raise InputError(f"{where}: the ProxyJump host {shown(jump.host)} {problem}")
        problem = _user_problem(jump.user) if jump.user is not None else None
        if problem:
            raise InputError(f"{where}: the ProxyJump user {shown(jump.user)} {problem}")
    return SshOptions(known_hosts_file=known_hosts, jump=jump,
                      passed=tuple(word for options in found for word in options.passed))


def _as_bool_word(value: Any, where: str) -> GpuMode:
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return "true"
    if text in ("false", "no", "0", "off"):
        return "false"
    if text == "auto":
        return "auto"
    raise InputError(f"{where}: gpu={shown(value)} is not valid: write gpu=true, gpu=false or gpu=auto")


def _group_list(names: Iterable[str]) -> str:
    return ", ".join(f"[{name}]" for name in names)


def build_cluster(data: InventoryData) -> Cluster:
    """The Cluster an inventory's plain data describes, every group and host checked."""
    path = data.path
    groups = data.groups

    def members(names: Iterable[str]) -> dict[str, str]:
        """Host name -> the first of these groups it is in."""
        found: dict[str, str] = {}
        for group_name in names:
            for host in groups.get(group_name, ()):
                found.setdefault(host, group_name)
        return found

    control_plane = members(CONTROL_PLANE_GROUPS)
    workers = members(WORKER_GROUPS)
    warnings = _check_groups(path, control_plane, workers, members(ETCD_GROUPS),
                             {name: members([name]) for name in FOREIGN_GROUPS})
    _one_control_plane_group(path, groups)
    for host in data.hosts:
        if host not in control_plane and host not in workers:
            # k8s_cluster only gathers the two roles; a host in it alone has none.
            gathered = next((g for g in data.host_groups.get(host, ()) if g in CLUSTER_GROUPS), None)
            inside = f" (only [{gathered}], which gathers them)" if gathered else ""
            raise InputError(f"{path}: host {shown(host)} is in neither [control_plane] nor [workers]{inside} "
                             f"(aliases: {_group_list(CONTROL_PLANE_GROUPS[1:] + WORKER_GROUPS[1:])}): add it to "
                             "one of them or remove it")
    # Control planes first, each role in the order of its groups (the first control plane is where kubeadm init
    # runs), not in the order Ansible enumerates `all`.
    nodes = tuple(_node(path, name, "control_plane" if name in control_plane else "worker", data.variables[name])
                  for name in [*control_plane, *workers])
    cluster = Cluster(inventory_path=path, nodes=nodes, inventory_format=data.inventory_format,
                      warnings=tuple(warnings))
    _check_nodes(cluster)
    if len(cluster.control_planes) == 2:
        names = " and ".join(shown(n.name) for n in cluster.control_planes)
        warnings.append(f"{path}: two control planes ({names}) tolerate no failure: etcd needs both for a majority, "
                        "so losing either stops the API; a third control plane tolerates one")
    return replace(cluster, warnings=(*warnings, *data.warnings))


def _one_control_plane_group(path: Path, groups: Mapping[str, tuple[str, ...]]) -> None:
    """The control planes come from one group (or from groups that list the same hosts): the first of them is where
    kubeadm init runs, and with two alias groups of different hosts, which one comes first is not what the file
    shows."""
    filled = {name: list(groups[name]) for name in CONTROL_PLANE_GROUPS if groups.get(name)}
    distinct = {tuple(hosts) for hosts in filled.values()}
    if len(distinct) > 1:
        names = " and ".join(f"[{name}]" for name in filled)
        raise InputError(f"{path}: {names} both list control planes, differently: the first control plane (where "
                         "kubeadm init runs) would not be the first in the file; put them all under one group, the "
                         "first one first")


def _check_groups(path: Path, control_plane: dict[str, str], workers: dict[str, str], etcd: dict[str, str],
                  foreign: dict[str, dict[str, str]]) -> list[str]:
    """Refuse what the groups say that bootstrap cannot do; return what it reads differently (warnings)."""
    if not control_plane:
        raise InputError(f"{path}: no control plane: put one host (or three) under [control_plane] "
                         f"(aliases: {', '.join(CONTROL_PLANE_GROUPS[1:])})")
    count = len(control_plane)
    if count > MAX_CONTROL_PLANES or (count % 2 == 0 and count > 2):
        names = ", ".join(shown(name) for name in control_plane)
        fewer = min(MAX_CONTROL_PLANES, count - 1)
        raise InputError(f"{path}: {count} control-plane hosts ({names}): etcd wants an odd number, at most "
                         f"{MAX_CONTROL_PLANES} ({count} tolerate no more failures than {count - 1}): keep {fewer} "
                         "and move the others under [workers]")
    for name in control_plane:
        if name in workers:
            raise InputError(f"{path}: host {shown(name)} is in both [{control_plane[name]}] and [{workers[name]}]: "
                             "a host is either a control plane or a worker, remove it from one group")
    external = [name for name in etcd if name not in control_plane]
    if external:
        raise InputError(f"{path}: [{etcd[external[0]]}] lists {shown(external[0])}, which is not a control plane: "
                         "external etcd is not supported (kubeadm's stacked etcd runs one member on each control "
                         "plane); remove the group or list exactly the control planes in it")
    left_out = [name for name in control_plane if etcd and name not in etcd]
    if left_out:
        raise InputError(f"{path}: [{next(iter(etcd.values()))}] leaves out control plane {shown(left_out[0])}: "
                         "kubeadm's stacked etcd runs a member on every control plane; list them all (or write "
                         f"[etcd:children] with [{control_plane[left_out[0]]}] under it), or remove the group")
    warnings = []
    for group, hosts in foreign.items():
        stray = [name for name in hosts if name not in control_plane and name not in workers]
        if stray:
            raise InputError(f"{path}: host {shown(stray[0])} is in [{group}]: {FOREIGN_GROUPS[group]}")
        if hosts:
            warnings.append(f"{path}: [{group}] is not used: {FOREIGN_GROUPS[group]}")
    return warnings


def _check_nodes(cluster: Cluster) -> None:
    path = cluster.inventory_path
    seen_addresses: dict[tuple[str, int], str] = {}
    seen_names: dict[str, str] = {}
    for node in cluster.nodes:
        key = (node.address.lower().removesuffix("."), node.port)
        if key in seen_addresses:
            raise InputError(f"{path}: hosts '{seen_addresses[key]}' and '{node.host}' share the address "
                             f"{node.address}:{node.port}: each host needs its own ansible_host")
        seen_addresses[key] = node.host
        if node.name in seen_names:
            raise InputError(f"{path}: hosts '{seen_names[node.name]}' and '{node.host}' are both named "
                             f"{shown(node.name)}: every node needs its own name (k8s_nodename)")
        seen_names[node.name] = node.host
    seen_cluster: dict[str, str] = {}
    for node in cluster.nodes:
        address = node.cluster_address
        if address is None:
            continue
        if address in seen_cluster:
            raise InputError(f"{path}: hosts '{seen_cluster[address]}' and '{node.host}' both reach the cluster at "
                             f"{address}: every node needs its own address (node_ip, or ansible_host)")
        seen_cluster[address] = node.host
        if len(cluster.nodes) > 1 and node.ip and ipaddress.IPv4Address(node.ip).is_loopback:
            raise InputError(f"{path}: host '{node.host}' has node_ip {node.ip}, a loopback address, which the other "
                             "nodes cannot reach: give the address of the node's interface they reach it on")
