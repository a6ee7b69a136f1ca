"""The inventory: Ansible INI or YAML, read with Ansible's own parser, turned into a validated Cluster.

Groups: `control_plane` (exactly one host; `masters`, `master` and kubespray's `kube_control_plane` are
accepted as aliases) and `workers` (may be empty; `nodes`, `kube_node` accepted). Per host: ansible_host,
ansible_user, ansible_port, ansible_ssh_private_key_file, ansible_ssh_common_args (a known_hosts file and a
bastion, see ssh_options.py) and `gpu` (true / false / auto).

The file, and the group_vars and host_vars files Ansible would read beside it, are first read safely (size,
encoding, YAML bounds: see files.py); Ansible parses them silently, and every host is then checked here, so a
bad inventory is refused in one line naming the file, the host and the variable before any connection.
"""
from __future__ import annotations

import contextlib
import io
import ipaddress
import os
import re
import shlex
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from provision.errors import InputError
from provision.inputs.files import (
    MAX_YAML_NODES,
    RefusedYamlError,
    file_kind,
    find_vault_value,
    parse_yaml,
    read_text,
    refuse_vault_file,
    shown,
)
from provision.inputs.settings import known_hosts_problem
from provision.inputs.ssh_options import SSH_ARG_VARIABLES, SshOptions, parse_ssh_arguments

CONTROL_PLANE_GROUPS = ("control_plane", "masters", "master", "kube_control_plane")
WORKER_GROUPS = ("workers", "nodes", "kube_node")
# Kubernetes node names are RFC 1123 subdomains, lower case; the host name also becomes the machine's hostname,
# whose labels are at most 63 characters, the whole at most 64: one limit of 63 for both.
MAX_NODE_NAME = 63
NODE_NAME_CHARACTERS_RE = re.compile(r"^[a-z0-9.-]+$")
HOSTNAME_LABEL_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")
YAML_SUFFIXES = (".yml", ".yaml", ".json")
# The yaml inventory plugin takes a file by its suffix; these, or none, are the ones it takes by default.
ANSIBLE_YAML_SUFFIXES = ("", *YAML_SUFFIXES)
# Kubernetes' largest supported cluster.
MAX_HOSTS = 5000
# A private key is a few kilobytes (an RSA 16384-bit key about 12 KB).
MAX_KEY_BYTES = 64 * 1024
CONNECTION_FIX = "bootstrap reaches every node over ssh, with host keys checked"
GpuMode = Literal["true", "false", "auto"]
Role = Literal["control_plane", "worker"]
InventoryFormat = Literal["ini", "yaml"]


@dataclass(frozen=True)
class Node:
    name: str
    address: str
    role: Role
    user: str
    port: int = 22
    key_file: Path | None = None
    gpu: GpuMode = "auto"
    # From ansible_ssh_common_args / ansible_ssh_extra_args: a known_hosts file of its own, a bastion, and the
    # other options, which only Ansible uses.
    ssh: SshOptions = field(default_factory=SshOptions)
    # Every variable Ansible resolved for the host (group_vars included), for playbooks that need more.
    variables: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_control_plane(self) -> bool:
        return self.role == "control_plane"


@dataclass(frozen=True)
class Cluster:
    inventory_path: Path
    nodes: tuple[Node, ...]
    inventory_format: InventoryFormat = "ini"

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
        raise InputError(f"{self.inventory_path}: no host named {shown(name)}; hosts are: "
                         f"{', '.join(n.name for n in self.nodes)}")


def ansible_inventory_env(path: Path, inventory_format: InventoryFormat) -> dict[str, str]:
    """Environment under which Ansible reads this inventory as we did: a YAML inventory whose suffix the yaml
    plugin would not take (hosts.txt) is named to it."""
    if inventory_format == "yaml" and path.suffix not in ANSIBLE_YAML_SUFFIXES:
        return {"ANSIBLE_YAML_FILENAME_EXT": ",".join([*YAML_SUFFIXES, path.suffix])}
    return {}


# --- pure checks: one fact in, the problem (or None) out --------------------------------------------------------

def node_name_problem(name: str) -> str | None:
    """Why `name` cannot be a Kubernetes node name and hostname (kubeadm's rules, checked as written), or None."""
    if not name:
        return "is empty"
    if len(name) > MAX_NODE_NAME:
        return f"is longer than {MAX_NODE_NAME} characters"
    if not name.isascii():
        return "has non-ASCII characters"
    if any(c.isspace() or not c.isprintable() for c in name):
        return "has spaces or control characters"
    if name != name.lower():
        return "has upper-case letters (kubeadm refuses them; the kubelet would register it lower-cased)"
    if not NODE_NAME_CHARACTERS_RE.match(name):
        bad = next(c for c in name if not NODE_NAME_CHARACTERS_RE.match(c))
        return f"has the character {shown(bad)}"
    labels = name.split(".")
    if any(not label for label in labels):
        return "has an empty label (a leading, trailing or doubled '.')"
    if any(label.startswith("-") or label.endswith("-") for label in labels):
        return "starts or ends with '-' (or a label between dots does)"
    return None


def address_problem(address: str) -> str | None:
    """Why `address` cannot be a node's ansible_host (an IPv4 address or a DNS name), or None."""
    if not address.strip():
        return "is empty: set it to the node's address"
    if "{{" in address or "{%" in address:
        return "is a Jinja expression: bootstrap connects to it as written; write the address itself"
    if any(c.isspace() or not c.isprintable() for c in address):
        return "has spaces, newlines or control characters"
    if address.startswith("[") or "]" in address:
        return "is in brackets: write the bare address (and the port as ansible_port)"
    if "@" in address:
        return "has a user in it: write the address alone and the user as ansible_user"
    if "/" in address or "\\" in address:
        return "has '/' or '\\' in it: write the address alone"
    if ":" in address:
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            return "has ':' in it: write the address alone and the port as ansible_port"
        return "is IPv6: clusters are IPv4-only for now; give the node's IPv4 address"
    if re.fullmatch(r"[0-9.]+", address):
        try:
            ip = ipaddress.IPv4Address(address)
        except ValueError:
            return "is not an IPv4 address (four numbers from 0 to 255, without leading zeros)"
        if ip.is_unspecified or ip.is_multicast or ip.is_reserved:
            return "cannot be a machine's address (unspecified, multicast, broadcast or reserved)"
        return None
    if not address.isascii():
        return "has non-ASCII characters: write the IP address, or the name in its xn-- (IDNA) form"
    name = address.removesuffix(".")
    labels = name.split(".")
    if len(name) > 253 or not all(HOSTNAME_LABEL_RE.match(label) for label in labels) or labels[-1].isdigit():
        return "is neither an IPv4 address nor a DNS name (letters, digits and '-' between dots)"
    return None


def port_problem(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return "is not a number: write a TCP port such as 22"
    if isinstance(value, str):
        if not re.fullmatch(r"[0-9]{1,5}", value.strip()):
            return "is not a number: write a TCP port such as 22"
        value = int(value)
    if not 0 < value < 65536:
        return "is out of range: use 1-65535"
    return None


def key_file_problem(path: Path) -> str | None:
    """Why OpenSSH would not use `path` as a private key (paramiko is more lenient, and would let preflight
    pass where every Ansible phase then fails), or None."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return f"is {file_kind(info.st_mode)}, not a key file"
    if info.st_size == 0:
        return "is empty"
    if info.st_size > MAX_KEY_BYTES:
        return f"is {info.st_size} bytes, too large to be a private key"
    if info.st_uid == os.getuid() and info.st_mode & 0o077:
        return (f"is readable by other users (mode {stat.S_IMODE(info.st_mode):04o}), so OpenSSH refuses it: "
                f"`chmod 600 {path}`")
    try:
        text = path.read_bytes().decode("ascii")
    except PermissionError:
        return "cannot be read (permission denied): check its owner and mode"
    except (OSError, UnicodeDecodeError):
        return "is not a private key (not text)"
    first = text.lstrip().split("\n", 1)[0]
    if first.startswith("PuTTY-User-Key-File"):
        return f"is a PuTTY key: convert it with `puttygen {path} -O private-openssh -o {path}.pem`"
    if re.match(r"^(ssh-|ecdsa-|sk-)", first) or first.startswith("---- BEGIN SSH2 PUBLIC KEY"):
        return "is a public key: name the private key (the same file name without .pub)"
    if not re.search(r"^-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----$", text, re.MULTILINE):
        return "is not a private key (no -----BEGIN ... PRIVATE KEY----- line)"
    return None


def _user_problem(value: object) -> str | None:
    if value is None or value == "":
        return "is empty: name the user to log in as, or leave it out (root)"
    if not isinstance(value, str) or not USER_RE.match(value):
        return "is not a user name (letters, digits, '_', '.', '-', '@')"
    return None


def _truthy(value: object) -> bool:
    return value is True or str(value).strip().lower() in ("true", "yes", "on", "1")


def connection_problem(variables: dict[str, Any]) -> str | None:
    """Variables that would make Ansible reach the node some other way than ours (or not check its host key)."""
    connection = variables.get("ansible_connection")
    if connection is not None and str(connection) != "ssh":
        return (f"ansible_connection={shown(connection)} is not supported: {CONNECTION_FIX}; remove it (a node's "
                "tasks must not run on this machine or over an unchecked connection)")
    for name in ("ansible_host_key_checking", "ansible_ssh_host_key_checking"):
        if name in variables and not _truthy(variables[name]):
            return (f"{name}={shown(variables[name])}: host keys are always checked; remove it (for machines seen "
                    "for the first time pass --accept-new-host-keys, or set ssh.accept_new_host_keys)")
    if variables.get("ansible_ssh_args") is not None:
        return ("ansible_ssh_args replaces the SSH options bootstrap sets (host-key checking among them): remove it; "
                "put extra -o options in ansible_ssh_common_args")
    return None


def _find_encrypted(variables: dict[str, Any]) -> str | None:
    """The name of the first variable holding a vault-encrypted value (Ansible's EncryptedString), or None."""
    from ansible.parsing.vault import EncryptedString

    stack: list[tuple[str, Any]] = list(variables.items())
    visited = 0
    while stack and visited < MAX_YAML_NODES:
        name, value = stack.pop()
        visited += 1
        if isinstance(value, EncryptedString):
            return name
        if isinstance(value, dict):
            stack += [(f"{name}.{key}", item) for key, item in value.items()]
        elif isinstance(value, (list, tuple)):
            stack += [(f"{name}[{index}]", item) for index, item in enumerate(value)]
    return None


def _vault_refusal(where: str, name: str) -> InputError:
    return InputError(f"{where}: {name} is vault-encrypted and bootstrap has no vault password: write it in plain "
                      "text (for the sudo password, leave it out and pass --ask-become-pass)")


# --- reading the file ----------------------------------------------------------------------------------------------

def _inventory_format(path: Path, text: str) -> tuple[InventoryFormat, Any]:
    """YAML when the suffix says so or the content is a YAML mapping (Ansible's YAML inventories are), else INI;
    with the parsed YAML. A YAML inventory is parsed here once with the bounded loader, so Ansible never meets a
    bomb or a duplicate."""
    if path.suffix in YAML_SUFFIXES:
        data = parse_yaml(text, str(path))
    else:
        try:
            data = parse_yaml(text, str(path))
        except RefusedYamlError:
            raise
        except InputError:
            return "ini", None
        if not isinstance(data, dict):
            return "ini", None
    vault = find_vault_value(data)
    if vault:
        raise _vault_refusal(str(path), vault)
    return "yaml", data


def _pattern_count(name: str) -> int:
    """How many hosts an Ansible host pattern such as `gpu[01:16]-[a:b]` stands for (1 without a range)."""
    count = 1
    for bounds in re.findall(r"\[([^\]]*)\]", name):
        parts = bounds.split(":")
        step = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else 1 if len(parts) == 2 else 0
        if step == 0:
            continue  # a malformed range: Ansible's parser names it
        if parts[0].isdigit() and parts[1].isdigit():
            count *= max(0, (int(parts[1]) - int(parts[0])) // step + 1)
        elif len(parts[0]) == 1 and len(parts[1]) == 1:
            count *= max(0, (ord(parts[1]) - ord(parts[0])) // step + 1)
    return count


def _host_count(text: str, data: Any) -> int:
    """Hosts the inventory names, ranges expanded, counted before Ansible expands them (a range such as
    w[1:100000000] would hold it for minutes)."""
    if data is None:
        count, hosts_section = 0, True
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("["):
                hosts_section = ":" not in line.split("]", 1)[0] or line.split("]", 1)[0].endswith(":hosts")
            elif line and not line.startswith(("#", ";")) and hosts_section:
                count += _pattern_count(line.split()[0])
        return count
    count, stack = 0, [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "hosts" and isinstance(item, dict):
                    count += sum(_pattern_count(str(name)) for name in item)
                stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)
    return count


def _ini_duplicate_problem(text: str) -> str | None:
    """A variable an INI inventory sets twice for one host or group, with the last one silently winning."""
    section, kind = "ungrouped", "hosts"
    group_vars: dict[tuple[str, str], int] = {}
    host_vars: dict[tuple[str, str], tuple[int, str]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        header = re.match(r"^\[([^\]]*)\]", line)
        if header:
            section, _, kind = header.group(1).partition(":")
            kind = kind or "hosts"
            continue
        if kind == "vars":
            key = line.split("=", 1)[0].strip()
            if (section, key) in group_vars:
                return (f"[{section}:vars] sets {shown(key)} twice (lines {group_vars[section, key]} and {number}): "
                        "keep one")
            group_vars[section, key] = number
        elif kind == "hosts":
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue  # Ansible's parser names the unbalanced quote
            for word in words[1:]:
                key, sep, value = word.partition("=")
                before = host_vars.get((words[0], key))
                if sep and before and before[1] != value:
                    return (f"host {shown(words[0])} sets {key} twice, differently (lines {before[0]} and {number}): "
                            "keep one")
                if sep:
                    host_vars[words[0], key] = (number, value)
    return None


@contextlib.contextmanager
def _ansible_quietly(environment: dict[str, str]) -> Iterator[None]:
    """Ansible prints its warnings (and some errors) itself; we report one line of our own instead."""
    os.environ.setdefault("ANSIBLE_DEPRECATION_WARNINGS", "False")
    os.environ.setdefault("ANSIBLE_LOCALHOST_WARNING", "False")
    os.environ.setdefault("ANSIBLE_INVENTORY_UNPARSED_WARNING", "False")
    saved = {key: os.environ.get(key) for key in environment}
    os.environ.update(environment)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _first_line(exc: BaseException) -> str:
    lines = str(getattr(exc, "message", "") or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _parse(path: Path, inventory_format: InventoryFormat) -> Any:
    """The inventory as Ansible's own plugin for the format reads it (InventoryData); InputError if it cannot."""
    from ansible.inventory.data import InventoryData
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import inventory_loader

    data = InventoryData()
    try:
        inventory_loader.get(inventory_format).parse(data, DataLoader(), str(path.resolve()), cache=False)
    except Exception as exc:  # noqa: BLE001 - any parser failure becomes the user's one-line message
        raise InputError(f"{path}: not a valid Ansible inventory: {_first_line(exc)}") from None
    return data


def _check_vars_files(path: Path, names: set[str]) -> None:
    """The group_vars and host_vars files Ansible will read for these groups and hosts, read safely first."""
    from ansible.parsing.dataloader import DataLoader

    loader = DataLoader()
    for folder in ("group_vars", "host_vars"):
        base = path.parent / folder
        if not base.is_dir():
            continue
        for name in sorted(names):
            for found in loader.find_vars_files(str(base), name):
                file = Path(found)
                text = read_text(file, f"{folder} file", "remove it or make it a YAML file")
                refuse_vault_file(text, file, f"{folder} file")
                vault = find_vault_value(parse_yaml(text, str(file)))
                if vault:
                    raise _vault_refusal(str(file), vault)


def _node(path: Path, host_name: str, role: Role, resolved: dict[str, Any]) -> Node:
    """One host's variables -> a Node, each value checked where it is read."""
    where = f"{path}: host {shown(host_name)}"
    problem = node_name_problem(host_name)
    if problem:
        raise InputError(f"{where} is not a valid Kubernetes node name: it {problem}; use lower-case letters, digits "
                         f"and '-' (at most {MAX_NODE_NAME} characters), e.g. gpu-worker-1")
    encrypted = _find_encrypted(resolved)
    if encrypted:
        raise _vault_refusal(where, encrypted)
    problem = connection_problem(resolved)
    if problem:
        raise InputError(f"{where}: {problem}")

    address = resolved.get("ansible_host", host_name)
    problem = address_problem(address) if isinstance(address, str) else "is not an address"
    if problem:
        raise InputError(f"{where}: ansible_host={shown(address)} {problem}")

    port = resolved.get("ansible_port", resolved.get("ansible_ssh_port", 22))
    problem = port_problem(port)
    if problem:
        shown_port = port if isinstance(port, int) and not isinstance(port, bool) else shown(port)
        raise InputError(f"{where}: ansible_port={shown_port} {problem}")

    user = resolved.get("ansible_user", resolved.get("ansible_ssh_user", "root"))
    problem = _user_problem(user)
    if problem:
        raise InputError(f"{where}: ansible_user={shown(user)} {problem}")

    # Absent or null: the SSH agent and default keys; an empty name is a mistake, not a choice.
    key = next((resolved[name] for name in ("ansible_ssh_private_key_file", "ansible_private_key_file")
                if resolved.get(name) is not None), None)
    key_file = None
    if key is not None:
        if not isinstance(key, str) or not key.strip() or "\0" in key:
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
        name=str(host_name),
        address=str(address),
        role=role,
        user=str(user),
        port=int(port),
        key_file=key_file,
        gpu=_as_bool_word(resolved.get("gpu", "auto"), where),
        ssh=ssh,
        variables={k: v for k, v in resolved.items() if not k.startswith(("ansible_play", "playbook_"))},
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


def load_inventory(path: Path) -> Cluster:
    """Parse and validate an inventory. Raises InputError (one line, names the file and host) on bad input."""
    text = read_text(path, "inventory file", "pass an existing INI or YAML inventory")
    refuse_vault_file(text, path, "inventory file")
    inventory_format, data = _inventory_format(path, text)
    hosts = _host_count(text, data)
    if hosts > MAX_HOSTS:
        raise InputError(f"{path}: names {hosts} hosts (host ranges expanded), more than the {MAX_HOSTS} nodes of "
                         "Kubernetes' largest supported cluster: check the ranges")
    if inventory_format == "ini":
        problem = _ini_duplicate_problem(text)
        if problem:
            raise InputError(f"{path}: {problem}")
    from ansible.errors import AnsibleError

    with _ansible_quietly(ansible_inventory_env(path, inventory_format)):
        parsed = _parse(path, inventory_format)
        _check_vars_files(path, set(parsed.groups) | set(parsed.hosts))
        try:
            return _cluster(path, inventory_format)
        except AnsibleError as exc:
            raise InputError(f"{path}: Ansible cannot read the inventory: {_first_line(exc)}") from None


def _cluster(path: Path, inventory_format: InventoryFormat) -> Cluster:
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
        names = ", ".join(shown(name) for name in sorted(control_plane))
        raise InputError(f"{path}: {len(control_plane)} control-plane hosts ({names}); "
                         "only one is supported for now: move the others under [workers]")
    for name in control_plane:
        if name in workers:
            raise InputError(f"{path}: host {shown(name)} is in both [{control_plane[name]}] and [{workers[name]}]: "
                             "a host is either the control plane or a worker, remove it from one group")
    for host in manager.get_hosts():
        if host.name not in control_plane and host.name not in workers:
            raise InputError(f"{path}: host {shown(host.name)} is in neither [control_plane] nor [workers]: "
                             "add it to one of them or remove it")
    nodes = tuple(_node(path, host.name, "control_plane" if host.name in control_plane else "worker",
                        variables.get_vars(host=host, include_hostvars=False))
                  for host in manager.get_hosts())
    cluster = Cluster(inventory_path=path, nodes=nodes, inventory_format=inventory_format)
    _check_nodes(cluster)
    return cluster


def _check_nodes(cluster: Cluster) -> None:
    path = cluster.inventory_path
    seen_addresses: dict[tuple[str, int], str] = {}
    for node in cluster.nodes:
        key = (node.address.lower().removesuffix("."), node.port)
        if key in seen_addresses:
            raise InputError(f"{path}: hosts '{seen_addresses[key]}' and '{node.name}' share the address "
                             f"{node.address}:{node.port}: each host needs its own ansible_host")
        seen_addresses[key] = node.name


def node_ip_addresses(cluster: Cluster) -> dict[str, ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Nodes whose address is a literal IP (host names are resolved only on the nodes themselves)."""
    found = {}
    for node in cluster.nodes:
        try:
            found[node.name] = ipaddress.ip_address(node.address)
        except ValueError:
            continue
    return found
