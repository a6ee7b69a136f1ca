"""The inventory: Ansible INI or YAML, read with Ansible's own parser, turned into a validated Cluster.

Groups: the control planes (one, or an odd number up to seven; two are allowed and warned about) under
`control_plane` or an alias (`kube_control_plane`, `masters`, `master`, `kube_master`), the workers (may be
none) under `workers` or an alias (`worker`, `kube_node`, `nodes`, `node`); `etcd` and `k8s_cluster` are accepted
where they only repeat those (dialects.py holds every installer's words). Per host: ansible_host, ansible_user,
ansible_port, ansible_ssh_private_key_file, ansible_ssh_common_args (a known_hosts file and a bastion, see
ssh_options.py), `gpu` (true / false / auto), the node's address for the cluster (`node_ip`, or kubespray's `ip`)
and its name (`k8s_nodename`, kubespray's `kube_override_hostname`: needed where the host name is an IP address).

A Node has two names: `name`, its Kubernetes node name and the machine's hostname, and `host`, what Ansible
calls it (the inventory's host name: run limits, the groups file and `inventory_hostname` in the roles). They
differ only where the inventory names the node in a variable.

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
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from provision.errors import InputError
from provision.inputs.ansible_control import controlled_ansible
from provision.inputs.ansible_variables import MAGIC, variable_problem
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
from provision.inputs.values import (
    HOST_ADDRESS,
    IPV4_UNICAST,
    LOCAL_PATH,
    NODE_PATH,
    USER_NAME,
    HostName,
    NodeName,
    parse_port,
)

# etcd needs a majority of its members: an even count tolerates no more failures than one fewer, and etcd
# advises against more than seven.
MAX_CONTROL_PLANES = 7
# Kubernetes node names are RFC 1123 subdomains, lower case; the host name also becomes the machine's hostname,
# whose labels are at most 63 characters, the whole at most 64: one limit of 63 for both.
MAX_NODE_NAME = 63
NODE_NAME_CHARACTERS_RE = re.compile(r"[a-z0-9.-]+", re.ASCII)
YAML_SUFFIXES = (".yml", ".yaml", ".json")
# The yaml inventory plugin takes a file by its suffix; these, or none, are the ones it takes by default.
ANSIBLE_YAML_SUFFIXES = ("", *YAML_SUFFIXES)
# Kubernetes' largest supported cluster.
MAX_HOSTS = 5000
# Groups nested deeper than this are no inventory a person wrote (kubespray's deepest is 3): refused before Ansible
# resolves them, which would take minutes on an inventory at MAX_HOSTS.
MAX_GROUP_DEPTH = 16
# A private key is a few kilobytes (an RSA 16384-bit key about 12 KB).
MAX_KEY_BYTES = 64 * 1024
CONNECTION_FIX = "bootstrap reaches every node over ssh, with host keys checked"
# What Ansible itself adds to a host's variables (never the inventory's).
ANSIBLE_MAGIC = MAGIC | {"groups", "group_names", "hostvars", "omit", "inventory_hostname", "inventory_hostname_short",
                         "inventory_file", "inventory_dir", "playbook_dir", "play_hosts", "role_names", "environment"}
GpuMode = Literal["true", "false", "auto"]
Role = Literal["control_plane", "worker"]
InventoryFormat = Literal["ini", "yaml"]


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
        return self.address if _is_ipv4(self.address) else None


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
    if not NODE_NAME_CHARACTERS_RE.fullmatch(name):
        bad = next(c for c in name if not NODE_NAME_CHARACTERS_RE.fullmatch(c))
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
        if IPV4_UNICAST.problem(address) is None:
            return None
        try:
            ipaddress.IPv4Address(address)
        except ValueError:
            return "is not an IPv4 address (four numbers from 0 to 255, without leading zeros)"
        return "cannot be a machine's address (unspecified, multicast, broadcast or reserved)"
    if not address.isascii():
        return "has non-ASCII characters: write the IP address, or the name in its xn-- (IDNA) form"
    if HOST_ADDRESS.problem(address):
        return "is neither an IPv4 address nor a DNS name (letters, digits and '-' between dots)"
    return None


def port_problem(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return "is not a number: write a TCP port such as 22"
    if isinstance(value, str) and not re.fullmatch(r"-?[0-9]{1,6}", value, re.ASCII):
        return "is not a number: write a TCP port such as 22"
    try:
        parse_port(int(value))
    except ValueError:
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
    if USER_NAME.problem(value):
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
    first = next((line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith(("#", ";"))),
                 "")
    if path.suffix in YAML_SUFFIXES:
        data = parse_yaml(text, str(path))
    elif first.startswith("[") and first.endswith("]"):
        # An INI section header first: no YAML mapping (parsing it as YAML would only cost time on a large file).
        return "ini", None
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
                # shlex only where the line has what shlex reads (it is the slow part on a large inventory).
                words = shlex.split(line, comments=True) if any(c in line for c in "'\"\\#") else line.split()
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
    """Ansible under the tool's control (ansible_control.py), and silent: it prints its warnings (and some errors)
    itself, and we report one line of our own instead."""
    with controlled_ansible(environment), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        yield


def _plain(value: Any, depth: int = 0) -> Any:
    """Ansible's values (its tagged strings and numbers, its lists and mappings) as the plain Python values they
    stand for, so that nothing downstream meets Ansible's types (yaml.safe_dump cannot write them); vault values
    stay as they are, to be refused by name."""
    from ansible.parsing.vault import EncryptedString

    if depth > 64:
        raise InputError("a variable is nested more than 64 levels deep: no inventory needs that")
    if isinstance(value, EncryptedString) or value is None:
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {_plain(key, depth + 1): _plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    return value


def _first_line(exc: BaseException) -> str:
    lines = str(getattr(exc, "message", "") or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _inventory_manager(path: Path, inventory_format: InventoryFormat) -> tuple[Any, Any]:
    """Ansible's InventoryManager over this one file, read by the one plugin of its format: no inventory script (an
    executable file is not run), no `plugin:` file, no other source; InputError with the plugin's own words if it
    cannot read it."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import inventory_loader

    failures: list[BaseException] = []

    class OneFormat(InventoryManager):
        def _fetch_inventory_plugins(self) -> list[Any]:
            plugin = inventory_loader.get(inventory_format)
            parse = plugin.parse

            def parse_noting_failure(*args: Any, **kwargs: Any) -> Any:
                try:
                    return parse(*args, **kwargs)
                except Exception as exc:
                    failures.append(exc)
                    raise

            plugin.parse = parse_noting_failure
            return [plugin]

    loader = DataLoader()
    try:
        manager = OneFormat(loader=loader, sources=[str(path.resolve())])
    except Exception as exc:  # noqa: BLE001 - any parser failure becomes the user's one-line message
        failures.append(exc)
    if failures:
        raise InputError(f"{path}: not a valid Ansible inventory: {_first_line(failures[0])}") from None
    return manager, loader


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


VARS_FILE_SUFFIXES = ("", ".yml", ".yaml", ".json")


def unread_vars_files(path: Path, groups: set[str], hosts: set[str]) -> list[str]:
    """A line for each file or folder under group_vars/ or host_vars/ that no group or host of the inventory reads
    (Ansible reads `group_vars/<group>` only for a group the inventory has): the run reads exactly what
    validation read, so such a file changes nothing, and is said rather than left to look in effect."""
    lines = []
    for folder, names, what in (("group_vars", groups, "group"), ("host_vars", hosts, "host")):
        base = path.parent / folder
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            name = entry.name if entry.is_dir() else entry.name.rsplit(".", 1)[0] if entry.suffix in \
                VARS_FILE_SUFFIXES else None
            if name is None or name.startswith(".") or name in names:
                continue
            own = " (it is the name of a group bootstrap adds for its own plays, which takes no variables)" \
                if name in ("control_plane", "first_control_plane", "workers", "k8s_cluster") else ""
            lines.append(f"{entry}: not read: the inventory has no {what} {shown(name)}{own}; put these variables "
                         f"where its hosts are (group_vars/all.yml, or the group they are in)")
    return lines


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


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
        if problem is None and _is_ipv4(value):
            problem = "is an IP address"
        if problem:
            raise InputError(f"{where}: {variable}={shown(value)} is not a valid Kubernetes node name: it {problem}; "
                             f"{NAME_FIX}")
        if node_name_problem(host_name) and not _is_ipv4(host_name):
            raise InputError(f"{where} is not a valid inventory host name: it {node_name_problem(host_name)}; "
                             f"name the host by its IP address or {NAME_FIX}")
        return str(value)
    problem = node_name_problem(host_name)
    if problem:
        raise InputError(f"{where} is not a valid Kubernetes node name: it {problem}; {NAME_FIX}")
    if _is_ipv4(host_name):
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
    encrypted = _find_encrypted(resolved)
    if encrypted:
        raise _vault_refusal(where, encrypted)
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


def load_inventory(path: Path) -> Cluster:
    """Parse and validate an inventory. Raises InputError (one line, names the file and host) on bad input."""
    text = read_text(path, "inventory file", "pass an existing INI or YAML inventory")
    refuse_vault_file(text, path, "inventory file")
    inventory_format, data = _inventory_format(path, text)
    hosts = _host_count(text, data)
    if hosts > MAX_HOSTS:
        raise InputError(f"{path}: names {hosts} hosts (host ranges expanded), more than the {MAX_HOSTS} nodes of "
                         "Kubernetes' largest supported cluster: check the ranges")
    depth = _group_depth(text, data)
    if depth > MAX_GROUP_DEPTH:
        raise InputError(f"{path}: groups are nested {depth} deep, more than the {MAX_GROUP_DEPTH} bootstrap reads: "
                         "put the hosts in [control_plane] and [workers] (or their aliases) directly")
    if inventory_format == "ini":
        problem = _ini_duplicate_problem(text)
        if problem:
            raise InputError(f"{path}: {problem}")
    with _ansible_quietly(ansible_inventory_env(path, inventory_format)):
        from ansible.errors import AnsibleError

        manager, loader = _inventory_manager(path, inventory_format)
        groups, host_names = set(manager.groups), {str(host.name) for host in manager.get_hosts()}
        _check_vars_files(path, groups | host_names)
        try:
            cluster = _cluster(path, inventory_format, manager, loader)
        except AnsibleError as exc:
            raise InputError(f"{path}: Ansible cannot read the inventory: {_first_line(exc)}") from None
    return replace(cluster, warnings=cluster.warnings + tuple(unread_vars_files(path, groups, host_names)))


def _group_depth(text: str, data: Any) -> int:
    """How deep groups nest (a group in `all` is 1), read from the text before Ansible resolves anything: INI's
    [group:children] sections, or YAML's children mappings."""
    if data is None:
        children: dict[str, list[str]] = {}
        section = None
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("["):
                name = line[1:].split("]", 1)[0]
                section = name.removesuffix(":children") if name.endswith(":children") else None
                if section is not None:
                    children.setdefault(section, [])
            elif section is not None and line and not line.startswith(("#", ";")):
                children[section].append(line.split()[0])
        depths: dict[str, int] = {}

        def depth(group: str, seen: frozenset[str]) -> int:
            if group in depths:
                return depths[group]
            if group in seen or len(seen) > MAX_GROUP_DEPTH:
                return len(seen) + 1  # a cycle, or past the limit: deep enough to refuse (Ansible names cycles)
            found = 1 + max((depth(child, seen | {group}) for child in children.get(group, [])), default=0)
            depths[group] = found
            return found

        return max((depth(group, frozenset()) for group in children), default=1)
    deepest, stack = 0, [(data, 0)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "children" and isinstance(item, dict):
                    deepest = max(deepest, level + 1)
                    stack += [(group, level + 1) for group in item.values() if group is not None]
                elif key not in ("hosts", "vars"):
                    stack.append((item, level))
    return deepest


def _group_list(names: Iterable[str]) -> str:
    return ", ".join(f"[{name}]" for name in names)


def _variables_of(manager: Any, loader: Any, path: Path) -> Callable[[Any], dict[str, Any]]:
    """A host's variables as Ansible's VariableManager resolves an inventory's (the `all` group, the host's groups in
    Ansible's order, each with its group_vars files, in VARIABLE_PRECEDENCE's order; then the host's own and its
    host_vars file), with Ansible's own functions; what a set of groups gives is worked out once for every host of
    that set, not once per host (VariableManager would also clean a fact cache per host: at MAX_HOSTS, seconds)."""
    import ansible.constants as constants
    from ansible.inventory.helpers import get_group_vars, sort_groups
    from ansible.utils.vars import combine_vars
    from ansible.vars.plugins import get_vars_from_inventory_sources

    sources = [str(path.resolve())]
    all_group = manager.groups["all"]
    # host_group_vars is the one vars plugin (ansible_control.py): with no host_vars folder beside the inventory a
    # host's own plugin variables are none, and asking the plugin once per host costs seconds at MAX_HOSTS.
    host_files = (path.parent / "host_vars").is_dir() or constants.VARIABLE_PLUGINS_ENABLED != ["host_group_vars"]
    by_groups: dict[tuple[str, ...], dict[str, Any]] = {}

    # VariableManager's own choice of stage: vars plugins run on demand (at task time) unless configured otherwise.
    stage = "task" if constants.RUN_VARS_PLUGINS == "demand" else "inventory"

    def plugins(entities: list[Any]) -> dict[str, Any]:
        return dict(get_vars_from_inventory_sources(loader, sources, entities, stage))

    def of_groups(groups: list[Any]) -> dict[str, Any]:
        parts: dict[str, Callable[[], Mapping[str, Any]]] = {
            "all_inventory": all_group.get_vars, "all_plugins_inventory": lambda: plugins([all_group]),
            "groups_inventory": lambda: get_group_vars(groups), "groups_plugins_inventory": lambda: plugins(groups),
        }
        data: dict[str, Any] = {}
        for entry in constants.VARIABLE_PRECEDENCE:
            if entry == "plugins_by_groups":
                for group in groups:
                    data = combine_vars(data, plugins([group]))
            elif entry in parts:
                data = combine_vars(data, parts[entry]())
        return data

    def resolve(host: Any) -> dict[str, Any]:
        groups = sort_groups([group for group in host.get_groups() if group.name != "all"])
        key = tuple(str(group.name) for group in groups)
        if key not in by_groups:
            by_groups[key] = of_groups(groups)
        own = combine_vars(by_groups[key], host.get_vars())
        return dict(combine_vars(own, plugins([host])) if host_files else own)

    return resolve


def _cluster(path: Path, inventory_format: InventoryFormat, manager: Any, loader: Any) -> Cluster:
    variables_of = _variables_of(manager, loader, path)
    groups = manager.groups

    def members(names: Iterable[str]) -> dict[str, str]:
        """Host name -> the first of these groups it is in."""
        found: dict[str, str] = {}
        for group_name in names:
            if group_name in groups:
                for host in groups[group_name].get_hosts():
                    found.setdefault(str(host.name), group_name)
        return found

    control_plane = members(CONTROL_PLANE_GROUPS)
    workers = members(WORKER_GROUPS)
    warnings = _check_groups(path, control_plane, workers, members(ETCD_GROUPS),
                             {name: members([name]) for name in FOREIGN_GROUPS})
    _one_control_plane_group(path, groups)
    for host in manager.get_hosts():
        if host.name not in control_plane and host.name not in workers:
            # k8s_cluster only gathers the two roles; a host in it alone has none.
            gathered = next((g.name for g in host.get_groups() if g.name in CLUSTER_GROUPS), None)
            inside = f" (only [{gathered}], which gathers them)" if gathered else ""
            raise InputError(f"{path}: host {shown(host.name)} is in neither [control_plane] nor [workers]{inside} "
                             f"(aliases: {_group_list(CONTROL_PLANE_GROUPS[1:] + WORKER_GROUPS[1:])}): add it to "
                             "one of them or remove it")
    # Control planes first, each role in the order of its groups (the first control plane is where kubeadm init
    # runs), not in the order Ansible enumerates `all`.
    hosts = {str(host.name): host for host in manager.get_hosts()}
    # The inventory's own variables (Ansible adds its magic ones: `groups` alone lists every host, and walking it for
    # every host would take minutes at MAX_HOSTS), as plain values: the model holds str, int and dict, never
    # Ansible's tagged types.
    nodes = tuple(_node(path, name, "control_plane" if name in control_plane else "worker",
                        _plain({key: value for key, value in variables_of(hosts[name]).items()
                                if key not in ANSIBLE_MAGIC and not key.startswith("ansible_play")}))
                  for name in [*control_plane, *workers])
    cluster = Cluster(inventory_path=path, nodes=nodes, inventory_format=inventory_format, warnings=tuple(warnings))
    _check_nodes(cluster)
    if len(cluster.control_planes) == 2:
        names = " and ".join(shown(n.name) for n in cluster.control_planes)
        warnings.append(f"{path}: two control planes ({names}) tolerate no failure: etcd needs both for a majority, "
                        "so losing either stops the API; a third control plane tolerates one")
    return replace(cluster, warnings=tuple(warnings))


def _one_control_plane_group(path: Path, groups: Mapping[str, Any]) -> None:
    """The control planes come from one group (or from groups that list the same hosts): the first of them is where
    kubeadm init runs, and with two alias groups of different hosts, which one comes first is not what the file
    shows."""
    filled = {name: [str(h.name) for h in groups[name].get_hosts()] for name in CONTROL_PLANE_GROUPS
              if name in groups and groups[name].get_hosts()}
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


def node_ip_addresses(cluster: Cluster) -> dict[str, ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Nodes whose address is a literal IP (host names are resolved only on the nodes themselves)."""
    found: dict[str, ipaddress.IPv4Address | ipaddress.IPv6Address] = {}
    for node in cluster.nodes:
        try:
            found[node.name] = ipaddress.ip_address(node.address)
        except ValueError:
            continue
    return found
