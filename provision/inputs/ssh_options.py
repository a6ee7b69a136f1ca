"""What an inventory says about how to reach a host over SSH, beyond address, port, user and key.

Inventories written for Ansible set `ansible_ssh_common_args` (or `ansible_ssh_extra_args`) for two common
needs: a known_hosts file of their own (`-o UserKnownHostsFile=...`) and a bastion (`-o ProxyJump=...` or
`-J`). Both are honoured, by the Python side (paramiko) and by Ansible alike. The words are read the way OpenSSH
reads its command line (getopt: bundled flags such as `-qJ host`, `-oKey=value` and `-o Key=value`, `-o "Key
value"`; within an option, the first value wins), and only an allowlist is accepted: the two above, and options
that change nothing about which machine is reached or how its key is checked (ALLOWED_OPTIONS, ALLOWED_FLAGS).
Anything else is refused with what to write instead; what is accepted is written out again, in one spelling, into
each run's inventory.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from provision.errors import InputError
from provision.inputs.files import shown
from provision.inputs.values import parse_port

SSH_ARG_VARIABLES = ("ansible_ssh_common_args", "ansible_ssh_extra_args")
# -o options that say what the inventory says elsewhere: -> the variable to use instead.
SAID_ELSEWHERE = {"hostname": "ansible_host", "port": "ansible_port", "user": "ansible_user",
                  "identityfile": "ansible_ssh_private_key_file", "connecttimeout": "ssh.connect_timeout_s (cluster.yaml)"}
SAID_BY_FLAG = {"-p": "ansible_port", "-l": "ansible_user", "-i": "ansible_ssh_private_key_file"}
# Flags of ssh(1) that take an argument (OpenSSH's getopt string: the letters followed by ':').
FLAGS_WITH_ARGUMENT = frozenset("BbcDEeFIiJLlmOoPpQRSWw")
# Flags of ssh(1) that take none.
FLAGS_ALONE = frozenset("1246AaCfGgKkMNnqsTtVvXxYy")
# Flags accepted: compression, quiet, IPv4 only. None of them changes where ssh goes or what it trusts.
ALLOWED_FLAGS = {"C": "compression", "q": "quiet", "4": "IPv4 only"}
YES_NO = re.compile(r"yes|no", re.ASCII | re.IGNORECASE)
NUMBER = re.compile(r"[0-9]{1,4}", re.ASCII)
# -o options accepted besides UserKnownHostsFile, ProxyJump and StrictHostKeyChecking=yes (lower-case key -> the
# shape of its value).
ALLOWED_OPTIONS: dict[str, re.Pattern[str]] = {
    "serveraliveinterval": NUMBER, "serveralivecountmax": NUMBER, "connectionattempts": NUMBER,
    "compression": YES_NO, "tcpkeepalive": YES_NO, "identitiesonly": YES_NO,
    "loglevel": re.compile(r"quiet|fatal|error|info", re.ASCII | re.IGNORECASE),
    "addressfamily": re.compile(r"inet", re.ASCII | re.IGNORECASE),
}
READ_HERE = ("-o UserKnownHostsFile=FILE, -o ProxyJump=[user@]host[:port] (or -J), -o StrictHostKeyChecking=yes, "
             "-o ServerAliveInterval/ServerAliveCountMax/ConnectionAttempts=N, -o Compression/TCPKeepAlive/"
             "IdentitiesOnly=yes|no, -o LogLevel=QUIET|FATAL|ERROR|INFO, -o AddressFamily=inet, -C, -q, -4")
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
    """`Key=Value`, `Key Value`, `Key = Value` (ssh -o's spellings, as ssh_config reads a line) -> (key as
    written, value, its double quotes taken off)."""
    match = re.fullmatch(r"\s*([A-Za-z0-9]+)\s*(?:=\s*|\s+)(.*?)\s*", argument, re.ASCII | re.DOTALL)
    if match is None:
        return argument.strip(), ""
    value = match.group(2)
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        value = value[1:-1]
    return match.group(1), value


def _words(text: str, variable: str, where: str) -> list[tuple[str, str]]:
    """The variable's words as OpenSSH's getopt reads them: (flag letter, its argument or '')."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InputError(f"{where}: {variable} is not a valid argument list ({exc}): check its quotes") from None
    found: list[tuple[str, str]] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word == "--" or not word.startswith("-") or word == "-":
            raise InputError(f"{where}: {variable} {shown(word)} is not an ssh option (ssh would take it for the "
                             f"machine to connect to): bootstrap reads only {READ_HERE}")
        letters = word[1:]
        while letters:
            letter, letters = letters[0], letters[1:]
            if letter in FLAGS_WITH_ARGUMENT:
                if not letters:
                    if index >= len(words):
                        raise InputError(f"{where}: {variable} ends with -{letter}, which needs a value")
                    letters, index = words[index], index + 1
                found.append((letter, letters))
                break
            if letter not in FLAGS_ALONE:
                raise InputError(f"{where}: {variable} {shown(word)}: -{letter} is not an ssh option")
            found.append((letter, ""))
    return found


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
        try:
            port = parse_port(port_text)
        except ValueError:
            raise InputError(f"{where}: ProxyJump {shown(value)} has no valid port: write [user@]host[:port]") from None
    if not host or (user == "" and "@" in value):
        raise InputError(f"{where}: ProxyJump {shown(value)}: write it as [user@]host[:port]")
    return Jump(host=host, user=user or None, port=port)


def parse_ssh_arguments(text: str, variable: str, where: str, base: Path) -> SshOptions:
    """One variable's value (`-o Key=Value -J bastion ...`) -> what bootstrap honours, or one InputError line.
    Relative known_hosts paths are resolved against `base` (the inventory's folder), as key files are."""
    known_hosts: Path | None = None
    jump: Jump | None = None
    given: dict[str, str] = {}
    passed: list[str] = []
    for letter, argument in _words(text, variable, where):
        flag = f"-{letter}"
        here = f"{where}: {variable} {shown(f'{flag} {argument}'.strip())}"
        if flag in SAID_BY_FLAG:
            raise InputError(f"{here}: set {SAID_BY_FLAG[flag]} instead (it is what both Ansible and bootstrap's own "
                             "connections read)")
        if flag == "-F":
            raise InputError(f"{here}: bootstrap does not read ssh configuration files: write the options you need "
                             "as -o Key=Value in the same variable")
        if flag == "-J":
            written, value = "ProxyJump", argument
        elif flag == "-o":
            written, value = _option(argument)
        elif letter in ALLOWED_FLAGS:
            if flag not in passed:
                passed.append(flag)
            continue
        else:
            raise InputError(f"{here}: not an option bootstrap reads (it could change which machine ssh reaches or "
                             f"how): bootstrap reads only {READ_HERE}")
        key = written.lower()
        # OpenSSH takes the first value of an option and ignores the others: two different ones are a mistake.
        if key in given and given[key].lower() != value.lower():
            raise InputError(f"{here}: {key} is given twice, differently ({shown(given[key])} first, which ssh would "
                             "use): keep one")
        if key in given:
            continue
        given[key] = value
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
        elif key in ALLOWED_OPTIONS and ALLOWED_OPTIONS[key].fullmatch(value):
            passed += ["-o", f"{written}={value}"]
        else:
            raise InputError(f"{here}: not an option bootstrap reads (it could change which machine ssh reaches or "
                             f"how its key is checked): bootstrap reads only {READ_HERE}")
    return SshOptions(known_hosts_file=known_hosts, jump=jump, passed=tuple(passed))
