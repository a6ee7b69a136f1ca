"""What an inventory says about how to reach a host over SSH, beyond address, port, user and key.

Inventories written for Ansible set `ansible_ssh_common_args` (or `ansible_ssh_extra_args`) for two common
needs: a known_hosts file of their own (`-o UserKnownHostsFile=...`) and a bastion (`-o ProxyJump=...` or
`-J`). Both are honoured, by the Python side (fabric) and by Ansible alike. Options that would weaken the
host-key check, or that say what an inventory variable or a setting says (and so would be obeyed by one side
only), are refused with the variable or setting to use. Other options are handed to Ansible as written.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from provision.errors import InputError
from provision.inputs.files import shown

SSH_ARG_VARIABLES = ("ansible_ssh_common_args", "ansible_ssh_extra_args")
# -o options that say what the inventory says elsewhere: -> the variable to use instead.
SAID_ELSEWHERE = {"hostname": "ansible_host", "port": "ansible_port", "user": "ansible_user",
                  "identityfile": "ansible_ssh_private_key_file"}
SAID_BY_FLAG = {"-p": "ansible_port", "-l": "ansible_user", "-i": "ansible_ssh_private_key_file"}
# Flags of ssh(1) that take an argument (so the argument is not read as a flag of its own).
FLAGS_WITH_ARGUMENT = frozenset(f"-{letter}" for letter in "BbcDEeFIiJLlmOoPpQRSWw")
ACCEPT_NEW_FIX = "for machines seen for the first time pass --accept-new-host-keys (ssh.accept_new_host_keys)"


@dataclass(frozen=True)
class Jump:
    """A bastion the node is reached through (OpenSSH's ProxyJump)."""

    host: str
    user: str | None = None
    port: int = 22

    def __str__(self) -> str:
        user = f"{self.user}@" if self.user else ""
        return f"{user}{self.host}" + (f":{self.port}" if self.port != 22 else "")


@dataclass(frozen=True)
class SshOptions:
    known_hosts_file: Path | None = None
    jump: Jump | None = None
    # Everything else, for Ansible's ssh command line as written (the Python side has no use for it).
    passed: tuple[str, ...] = ()


def _option(argument: str) -> tuple[str, str]:
    """`Key=Value` or `Key Value` (ssh -o's two spellings) -> (lower-case key, value)."""
    key, _, value = argument.replace("=", " ", 1).partition(" ")
    return key.strip().lower(), value.strip()


def parse_jump(value: str, where: str) -> Jump:
    """`[user@]host[:port]` -> Jump (the host is checked by the caller, as every address is)."""
    if "," in value:
        raise InputError(f"{where}: ProxyJump {shown(value)} chains bastions: one bastion is supported; "
                         "reach the others from it")
    if "://" in value:
        raise InputError(f"{where}: ProxyJump {shown(value)}: write it as [user@]host[:port]")
    user, _, rest = value.rpartition("@")
    host, port = rest, 22
    if rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
        if not port_text.isdigit() or not port_text.isascii() or not 0 < int(port_text) < 65536:
            raise InputError(f"{where}: ProxyJump {shown(value)} has no valid port: write [user@]host[:port]")
        port = int(port_text)
    if not host or (user == "" and "@" in value):
        raise InputError(f"{where}: ProxyJump {shown(value)}: write it as [user@]host[:port]")
    return Jump(host=host, user=user or None, port=port)


def parse_ssh_arguments(text: str, variable: str, where: str, base: Path) -> SshOptions:
    """One variable's value (`-o Key=Value -J bastion ...`) -> what bootstrap honours, or one InputError line.
    Relative known_hosts paths are resolved against `base` (the inventory's folder), as key files are."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InputError(f"{where}: {variable} is not a valid argument list ({exc}): check its quotes") from None
    known_hosts: Path | None = None
    jump: Jump | None = None
    passed: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        flag, inline = (word[:2], word[2:]) if word.startswith("-") and len(word) > 2 and word[:2] in \
            FLAGS_WITH_ARGUMENT else (word, "")
        argument = inline
        if flag in FLAGS_WITH_ARGUMENT and not inline:
            if index + 1 >= len(words):
                raise InputError(f"{where}: {variable} ends with {flag}, which needs a value")
            argument = words[index + 1]
            index += 1
        index += 1
        here = f"{where}: {variable} {shown(f'{flag} {argument}'.strip())}"
        if flag in SAID_BY_FLAG:
            raise InputError(f"{here}: set {SAID_BY_FLAG[flag]} instead (it is what both Ansible and bootstrap's own "
                             "connections read)")
        if flag == "-F":
            raise InputError(f"{here}: bootstrap does not read ssh configuration files: write the options you need "
                             "as -o Key=Value in the same variable")
        if flag == "-J":
            jump = parse_jump(argument, here)
            continue
        if flag != "-o":
            passed += [flag, argument] if argument else [flag]
            continue
        key, value = _option(argument)
        if key == "stricthostkeychecking":
            if value.lower() not in ("yes", "true"):
                raise InputError(f"{here}: host keys are always checked; remove it ({ACCEPT_NEW_FIX})")
        elif key == "userknownhostsfile":
            if len(value.split()) != 1 or value.lower() in ("/dev/null", "none"):
                raise InputError(f"{here}: host keys are checked against one known_hosts file: name it "
                                 f"(not /dev/null), or leave it to ssh.known_hosts_file; {ACCEPT_NEW_FIX}")
            try:
                known_hosts = base / Path(value).expanduser()
            except RuntimeError:
                raise InputError(f"{here}: names a home directory that does not exist: write the path out") from None
        elif key == "proxyjump":
            jump = None if value.lower() == "none" else parse_jump(value, here)
        elif key == "proxycommand":
            if value.lower() != "none":
                raise InputError(f"{here}: use -o ProxyJump=[user@]bastion[:port] instead, so the bastion's host key "
                                 "is checked too (against the same known_hosts file)")
        elif key in SAID_ELSEWHERE:
            raise InputError(f"{here}: set {SAID_ELSEWHERE[key]} instead (it is what both Ansible and bootstrap's own "
                             "connections read)")
        else:
            passed += ["-o", argument]
    return SshOptions(known_hosts_file=known_hosts, jump=jump, passed=tuple(passed))
