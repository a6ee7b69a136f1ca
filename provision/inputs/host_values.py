"""A host's values as an inventory gives them, one fact in, the problem (or None) out: its name, its address, its
port, its key file, its user, how it is connected to. Pure; inventory_builder.py asks each where it reads it, and
the command line (`bootstrap init`) asks the same of what it writes into an inventory.
"""
from __future__ import annotations

import ipaddress
import os
import re
import stat
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inputs.files import file_kind, shown
from provision.inputs.inventory_model import MAX_NODE_NAME, NODE_NAME_CHARACTERS_RE
from provision.inputs.values import HOST_ADDRESS, IPV4_UNICAST, USER_NAME, parse_port

# A private key is a few kilobytes (an RSA 16384-bit key about 12 KB).
MAX_KEY_BYTES = 64 * 1024
CONNECTION_FIX = "bootstrap reaches every node over ssh, with host keys checked"


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


def vault_refusal(where: str, name: str) -> InputError:
    return InputError(f"{where}: {name} is vault-encrypted and bootstrap has no vault password: write it in plain "
                      "text (for the sudo password, leave it out and pass --ask-become-pass)")
