"""Run a command on a node: the one interface for "run this there", over SSH (fabric + paramiko).

Host keys are always checked against the known_hosts file the settings name (or the host's own, from
`-o UserKnownHostsFile=` in its ansible_ssh_common_args): an unknown key is refused unless
`ssh.accept_new_host_keys` is set (then it is appended to that file), and a changed key is always refused. A
node behind a bastion (`-o ProxyJump=`) is reached through an SSH connection to the bastion, whose host key is
checked the same way, against the same file; Ansible is given the same route (`ansible_ssh_common_args`).

sudo never prompts: it runs as `sudo -n`, or with a become password the caller supplies, which is fed on stdin
and never appears in a command line, a log or an error message.

Every failure a user can act on becomes one BootstrapError line that names the host and the fix.
"""
from __future__ import annotations

import fcntl
import io
import os
import shlex
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import paramiko
from fabric import Connection
from invoke.exceptions import CommandTimedOut

from provision.errors import BootstrapError
from provision.inputs.inventory import Node
from provision.inputs.settings import SshSettings
from provision.inputs.ssh_options import Jump

# Serialises appends to a known_hosts file between the threads of one run (a file lock covers other runs).
_KNOWN_HOSTS_LOCK = threading.Lock()


@dataclass(frozen=True)
class CommandResult:
    node: str
    command: str
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def first_error_line(self) -> str:
        for text in (self.stderr, self.stdout):
            lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
            if lines:
                return lines[-1]
        return f"exit code {self.exit_code}"


class Shell(Protocol):
    """Somewhere commands run: a node over SSH, or this machine (LocalShell)."""

    name: str

    def open(self) -> None: ...

    def run(self, command: str, *, sudo: bool = False, timeout_s: float = 60) -> CommandResult: ...

    def close(self) -> None: ...


def _fingerprint(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.fingerprint}"


def _host_key_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def _keyscan_fix(address: str, port: int, known_hosts: Path, jump: Jump | None = None) -> str:
    port_flag = f"-p {port} " if port != 22 else ""
    # Behind a bastion the node answers only there: scan it from the bastion.
    through = f"ssh {'-p ' + str(jump.port) + ' ' if jump.port != 22 else ''}{jump.user + '@' if jump.user else ''}" \
              f"{jump.host} " if jump else ""
    return f"{through}ssh-keyscan {port_flag}{address} >> {known_hosts}"


def known_hosts_for(node: Node, settings: SshSettings) -> Path:
    """The known_hosts file a node's host key (and its bastion's) is checked against."""
    return node.ssh.known_hosts_file or settings.known_hosts_path


def ansible_ssh_common_args(node: Node, settings: SshSettings) -> str:
    """The node's ansible_ssh_common_args as bootstrap runs Ansible: its known_hosts file, its bastion, and
    the other options the inventory gave (host-key checking itself is in the global SSH options)."""
    known_hosts = known_hosts_for(node, settings)
    words = ["-o", f"UserKnownHostsFile={known_hosts}"]
    jump = node.ssh.jump
    if jump is not None:
        # Not ProxyJump: OpenSSH starts the jump's ssh without our options, so the bastion's host key would be
        # checked against the default known_hosts (or not at all). This command checks it like the node's.
        strict = "accept-new" if settings.accept_new_host_keys else "yes"
        proxy = ["ssh", "-W", "%h:%p", "-o", "BatchMode=yes", "-o", f"StrictHostKeyChecking={strict}",
                 "-o", f"UserKnownHostsFile={known_hosts}", "-o", f"ConnectTimeout={settings.connect_timeout_s}",
                 "-p", str(jump.port), *(["-i", str(node.key_file)] if node.key_file else []),
                 f"{jump.user or node.user}@{jump.host}"]
        words += ["-o", f"ProxyCommand={shlex.join(proxy)}"]
    return shlex.join([*words, *node.ssh.passed])


class SshError(BootstrapError):
    """A node could not be reached or used: `problem` says what, `fix` what to do (both without the host)."""

    def __init__(self, where: str, problem: str, fix: str = "") -> None:
        super().__init__(f"{where}: {problem}" + (f": {fix}" if fix else ""))
        self.problem = problem
        self.fix = fix


class SudoRefused(SshError):
    """The node was reached, but sudo would not run the command (a password needed, a wrong one, no right)."""


class _UnknownHostKey(Exception):
    def __init__(self, key: paramiko.PKey) -> None:
        super().__init__("unknown host key")
        self.key = key


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse keys not in known_hosts, or (when asked to) record them there on first contact."""

    def __init__(self, known_hosts: Path, accept_new: bool) -> None:
        self.known_hosts = known_hosts
        self.accept_new = accept_new

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if not self.accept_new:
            raise _UnknownHostKey(key)
        client.get_host_keys().add(hostname, key.get_name(), key)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        with _KNOWN_HOSTS_LOCK, self.known_hosts.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.write(line)


@dataclass(frozen=True)
class _Endpoint:
    """One SSH server on the way to a node: the node itself, or its bastion."""

    where: str
    address: str
    port: int
    user: str
    key_file: Path | None
    # How the fixes name it: "the node" or "the bastion"; and the inventory variables that say where it is.
    what: str
    address_setting: str
    port_setting: str
    jump: Jump | None = None
    # Said before each problem, so that a report that shows only the problem still names the bastion.
    prefix: str = ""


def _connection(endpoint: _Endpoint, ssh: SshSettings, known_hosts: Path,
                gateway: Connection | None = None) -> Connection:
    timeout = ssh.connect_timeout_s
    connect_kwargs: dict[str, object] = {
        # A host that accepts TCP but never speaks SSH must not hang the run either.
        "banner_timeout": timeout, "auth_timeout": timeout,
        "look_for_keys": endpoint.key_file is None,
    }
    if endpoint.key_file is not None:
        connect_kwargs["key_filename"] = str(endpoint.key_file)
    connection = Connection(endpoint.address, user=endpoint.user, port=endpoint.port, connect_timeout=timeout,
                            connect_kwargs=connect_kwargs, gateway=gateway)
    if known_hosts.is_file():
        connection.client.load_host_keys(str(known_hosts))
    connection.client.set_missing_host_key_policy(_HostKeyPolicy(known_hosts, ssh.accept_new_host_keys))
    return connection


def _open(connection: Connection, endpoint: _Endpoint, ssh: SshSettings, known_hosts: Path) -> None:
    """Connect and authenticate, or close and raise one SshError line saying why not and what to do."""
    timeout = ssh.connect_timeout_s
    keyscan = _keyscan_fix(endpoint.address, endpoint.port, known_hosts, endpoint.jump)
    try:
        connection.open()
    except _UnknownHostKey as exc:
        connection.close()
        raise SshError(endpoint.where, endpoint.prefix + f"host key {_fingerprint(exc.key)} is unknown (not in {known_hosts})",
                       f"after checking it, add it with `{keyscan}`, or pass --accept-new-host-keys") from None
    except paramiko.BadHostKeyException as exc:
        connection.close()
        name = _host_key_name(endpoint.address, endpoint.port)
        raise SshError(endpoint.where, endpoint.prefix + f"host key CHANGED: {endpoint.what} offers {_fingerprint(exc.key)}, "
                       f"{known_hosts} has {_fingerprint(exc.expected_key)}",
                       f"if the machine was reinstalled, remove the old key with `ssh-keygen -R '{name}' -f "
                       f"{known_hosts}` and add the new one with `{keyscan}`") from None
    except paramiko.AuthenticationException:
        connection.close()
        key = f"key {endpoint.key_file}" if endpoint.key_file else "your SSH agent and default keys"
        raise SshError(endpoint.where, endpoint.prefix + f"SSH authentication failed with {key}",
                       "check ansible_user and ansible_ssh_private_key_file, and that the public key is in "
                       f"~{endpoint.user}/.ssh/authorized_keys") from None
    except TimeoutError:
        connection.close()
        raise SshError(endpoint.where, endpoint.prefix + f"unreachable: no SSH answer within {timeout} s",
                       f"check {endpoint.address_setting}, that the machine is up and that port {endpoint.port} is "
                       "open (ssh.connect_timeout_s sets the wait)") from None
    except paramiko.ChannelException as exc:
        # Only a gateway opens channels while connecting: the bastion could not reach the node.
        connection.close()
        raise SshError(endpoint.where, endpoint.prefix + f"unreachable from the bastion: {exc.text}",
                       f"check {endpoint.address_setting} and that the bastion reaches port {endpoint.port} "
                       "on it") from None
    except (paramiko.ssh_exception.NoValidConnectionsError, OSError) as exc:
        connection.close()
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise SshError(endpoint.where, endpoint.prefix + f"unreachable: {reason}",
                       f"check {endpoint.address_setting} and that sshd listens on port {endpoint.port}") from None
    except paramiko.SSHException as exc:
        transport = connection.client.get_transport()
        # paramiko's own message for a peer that never sends a banner is "No existing session".
        silent = transport is None or not transport.remote_version
        connection.close()
        problem = (f"no SSH server answered on port {endpoint.port} within {timeout} s" if silent
                   else f"SSH handshake failed: {exc}")
        raise SshError(endpoint.where, endpoint.prefix + problem,
                       f"check that {endpoint.address_setting} and {endpoint.port_setting} point at "
                       f"{endpoint.what}'s sshd (ssh.connect_timeout_s sets the wait)") from None


class SshShell:
    """An SSH connection to one inventory node; use as a context manager, or call open() and close()."""

    def __init__(self, node: Node, settings: SshSettings, become_password: str | None = None) -> None:
        self.node = node
        self.name: str = node.name
        self.settings = settings
        self._become_password = become_password
        self._connection: Connection | None = None
        self._gateway: Connection | None = None

    @property
    def where(self) -> str:
        return f"{self.node.name} ({self.node.user}@{self.node.address}:{self.node.port})"

    def open(self) -> None:
        """Connect and authenticate (through the bastion, if the node has one), or raise one BootstrapError
        line saying why not and what to do."""
        if self._connection is not None:
            return
        node, ssh = self.node, self.settings
        known_hosts = known_hosts_for(node, ssh)
        jump = node.ssh.jump
        gateway = None
        if jump is not None:
            # As Ansible's ProxyCommand does: the ProxyJump user (else the node's), the node's key (and the agent).
            bastion = _Endpoint(
                where=self.where, address=jump.host, port=jump.port,
                user=jump.user or node.user, key_file=node.key_file, what="the bastion",
                address_setting="the ProxyJump host in ansible_ssh_common_args",
                port_setting="its port", prefix=f"bastion {jump}: ")
            gateway = _connection(bastion, ssh, known_hosts)
            _open(gateway, bastion, ssh, known_hosts)
        target = _Endpoint(where=self.where, address=node.address, port=node.port, user=node.user,
                           key_file=node.key_file, what="the node", address_setting="ansible_host",
                           port_setting="ansible_port", jump=jump)
        connection = _connection(target, ssh, known_hosts, gateway)
        try:
            _open(connection, target, ssh, known_hosts)
        except SshError:
            if gateway is not None:
                gateway.close()
            raise
        self._connection, self._gateway = connection, gateway

    def run(self, command: str, *, sudo: bool = False, timeout_s: float = 60) -> CommandResult:
        """Run a shell command (as root through sudo when asked); never raises for a non-zero exit code."""
        self.open()
        assert self._connection is not None
        stdin: io.StringIO | bool = False
        if sudo and self.node.user != "root":
            if self._become_password is None:
                line = f"sudo -n -- sh -c {shlex.quote(command)}"
            else:
                line = f"sudo -S -p '' -- sh -c {shlex.quote(command)}"
                stdin = io.StringIO(self._become_password + "\n")
        else:
            line = command
        try:
            result = self._connection.run(line, hide=True, warn=True, in_stream=stdin, timeout=timeout_s)
        except CommandTimedOut:
            raise SshError(self.where, f"`{_short(command)}` did not finish within {timeout_s:.0f} s") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise SshError(self.where, f"the SSH connection broke while running `{_short(command)}` "
                           f"({exc or type(exc).__name__})") from None
        outcome = CommandResult(self.name, command, result.exited, result.stdout, result.stderr)
        if sudo and self.node.user != "root" and outcome.exit_code != 0:
            self._raise_for_sudo(outcome.stderr)
        return outcome

    def fetch(self, remote: str, local: BinaryIO, *, sudo: bool = False, timeout_s: float = 3600) -> int:
        """Stream a file on the node (read as root through sudo when asked) into `local` as it arrives, bytes as
        they are: a copy cut short leaves what arrived, never more. Returns the bytes copied; raises SshError
        when the node cannot read the file or the connection breaks."""
        self.open()
        assert self._connection is not None
        reader = f"cat -- {shlex.quote(remote)}"
        password = None
        if sudo and self.node.user != "root":
            if self._become_password is None:
                reader = f"sudo -n -- {reader}"
            else:
                reader, password = f"sudo -S -p '' -- {reader}", self._become_password
        copied = 0
        try:
            stdin, stdout, stderr = self._connection.client.exec_command(reader, timeout=timeout_s)
            if password is not None:
                # sudo reads the password a byte at a time up to the newline; cat reads no input.
                stdin.write(password + "\n")
                stdin.flush()
            stdin.channel.shutdown_write()
            for block in iter(lambda: stdout.read(1 << 20), b""):
                local.write(block)
                copied += len(block)
            code = stdout.channel.recv_exit_status()
            errors = stderr.read().decode(errors="replace")
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise SshError(self.where, f"the SSH connection broke while copying {remote} "
                           f"({exc or type(exc).__name__})") from None
        if code != 0:
            if sudo and self.node.user != "root":
                self._raise_for_sudo(errors)
            raise SshError(self.where, f"cannot read {remote}: {' '.join(errors.split())[-200:] or f'exit {code}'}")
        return copied

    def check_sudo(self) -> None:
        """Raise one line when sudo needs a password we do not have, or rejects the one given."""
        self.run("true", sudo=True, timeout_s=30)

    def _raise_for_sudo(self, stderr: str) -> None:
        text = stderr.lower()
        if "a password is required" in text or "a terminal is required" in text:
            raise SudoRefused(self.where, f"sudo asks {self.node.user} for a password",
                           f"allow passwordless sudo (`{self.node.user} ALL=(ALL) NOPASSWD:ALL` in /etc/sudoers.d/) "
                           "or pass --ask-become-pass")
        if "incorrect password" in text or "sorry, try again" in text:
            raise SudoRefused(self.where, f"sudo rejected the become password for {self.node.user}",
                           "check it and run again")
        if "is not in the sudoers file" in text or "not allowed to execute" in text:
            raise SudoRefused(self.where, f"{self.node.user} may not use sudo",
                           "add it to the sudo (Debian, Ubuntu) or wheel (RHEL family) group, or set ansible_user "
                           "to a user who may")

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._gateway is not None:
            self._gateway.close()
            self._gateway = None

    def __enter__(self) -> SshShell:
        self.open()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class LocalShell:
    """This machine, behind the same interface (for commands that run on the operator's side)."""

    def __init__(self, name: str = "localhost") -> None:
        self.name = name

    def open(self) -> None:
        """Nothing to connect to: here is always reachable."""

    def close(self) -> None:
        """Nothing to disconnect."""

    def run(self, command: str, *, sudo: bool = False, timeout_s: float = 60) -> CommandResult:
        argv = ["sh", "-c", command]
        if sudo and os.geteuid() != 0:
            argv = ["sudo", "-n", "--", *argv]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise BootstrapError(f"{self.name}: `{_short(command)}` did not finish within {timeout_s:.0f} s") from None
        return CommandResult(self.name, command, done.returncode, done.stdout, done.stderr)


def connect(node: Node, settings: SshSettings, become_password: str | None = None) -> SshShell:
    """An open SSH connection to a node (raises one BootstrapError line when it cannot be had)."""
    shell = SshShell(node, settings, become_password)
    shell.open()
    return shell


def _short(command: str) -> str:
    first = command.strip().splitlines()[0] if command.strip() else command
    return first if len(first) <= 60 else first[:57] + "..."
