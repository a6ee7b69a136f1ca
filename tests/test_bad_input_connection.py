"""How a host is reached, as a hostile new user writes it: ports, users, private keys, and the inventory
variables that would quietly defeat the run's safety (a local or paramiko connection, host-key checking off,
our SSH options replaced). Each is refused before any connection, in one line naming the file, the host and the
variable, with the variable or setting to use instead; exit code 2, nothing created.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.keys import PRIVATE_KEY_TEXT, write_private_key
from tests.support.refusal import assert_refused, run_main

BASE = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2 {}\n"
YAML = ("all:\n  children:\n    control_plane:\n      hosts:\n        cp1: {{ansible_host: 10.0.0.1}}\n"
        "    workers:\n      hosts:\n        w1: {{ansible_host: 10.0.0.2, {}}}\n")

# (id, INI host variables for w1, or a YAML mapping's inside when it starts with "yaml:", words the line names)
PORTS = [
    ("fraction", "ansible_port=22.5", ["ansible_port=", "22.5", "not a number"]),
    ("float-whole", "ansible_port=22.0", ["not a number"]),
    ("exponent", "ansible_port=1e3", ["not a number"]),
    ("boolean-ini", "ansible_port=True", ["ansible_port=", "True", "not a number"]),
    ("boolean-yaml", "yaml:ansible_port: true", ["not a number"]),
    ("list", "yaml:ansible_port: [22]", ["not a number"]),
    ("mapping", "yaml:ansible_port: {port: 22}", ["not a number"]),
    ("word", "ansible_port=ssh", ["ansible_port='ssh' is not a number"]),
    ("two-numbers", "yaml:ansible_port: '22 23'", ["not a number"]),
    ("zero", "ansible_port=0", ["ansible_port=0 is out of range"]),
    ("negative", "ansible_port=-22", ["out of range"]),
    ("too-large", "ansible_port=65536", ["out of range"]),
    ("old-name-fraction", "ansible_ssh_port=22.5", ["not a number"]),
]

USERS = [
    ("newline", 'yaml:ansible_user: "root\\nmallory"', ["ansible_user='root\\nmallory'", "not a user name"]),
    ("space", "yaml:ansible_user: 'my user'", ["not a user name"]),
    ("empty-ini", "ansible_user=", ["ansible_user=''", "is empty"]),
    ("null-yaml", "yaml:ansible_user: null", ["is empty"]),
    ("jinja", "yaml:ansible_user: '{{ lookup(\"env\", \"USER\") }}'", ["not a user name"]),
    ("list", "yaml:ansible_user: [root]", ["not a user name"]),
    ("too-long", f"ansible_user={'u' * 80}", ["not a user name"]),
    ("shell", "yaml:ansible_user: 'root;id'", ["not a user name"]),
]

GPU = [
    ("maybe", "gpu=maybe", ["gpu='maybe' is not valid", "gpu=auto"]),
    ("list", "yaml:gpu: [true]", ["gpu=", "is not valid"]),
]

VARIABLES = [
    ("connection-local", "ansible_connection=local", ["ansible_connection='local'", "remove it"]),
    ("connection-paramiko", "ansible_connection=paramiko", ["ansible_connection='paramiko'"]),
    ("connection-docker", "yaml:ansible_connection: community.docker.docker", ["ansible_connection="]),
    ("connection-smart", "ansible_connection=smart", ["ansible_connection='smart'"]),
    ("host-key-checking-off", "ansible_host_key_checking=false", ["ansible_host_key_checking=", "--accept-new-host-keys"]),
    ("host-key-checking-off-yaml", "yaml:ansible_host_key_checking: no", ["ansible_host_key_checking='False'"]),
    ("ssh-host-key-checking-off", "ansible_ssh_host_key_checking=False", ["ansible_ssh_host_key_checking="]),
    ("ssh-args", "ansible_ssh_args='-o StrictHostKeyChecking=no'", ["ansible_ssh_args replaces", "ansible_ssh_common_args"]),
    ("ssh-args-harmless", "ansible_ssh_args='-C'", ["ansible_ssh_args replaces"]),
    ("common-args-strict-no", "ansible_ssh_common_args='-o StrictHostKeyChecking=no'",
     ["ansible_ssh_common_args", "StrictHostKeyChecking=no", "always checked", "--accept-new-host-keys"]),
    ("common-args-strict-no-joined", "ansible_ssh_common_args='-oStrictHostKeyChecking=no'", ["always checked"]),
    ("common-args-strict-no-spaced", "yaml:ansible_ssh_common_args: '-o \"StrictHostKeyChecking no\"'",
     ["always checked"]),
    ("common-args-strict-accept-new", "ansible_ssh_common_args='-o StrictHostKeyChecking=accept-new'",
     ["always checked", "--accept-new-host-keys"]),
    ("extra-args-strict-off", "ansible_ssh_extra_args='-o StrictHostKeyChecking=off'",
     ["ansible_ssh_extra_args", "always checked"]),
    ("known-hosts-dev-null", "ansible_ssh_common_args='-o UserKnownHostsFile=/dev/null'",
     ["UserKnownHostsFile=/dev/null", "not /dev/null"]),
    ("known-hosts-two-files", "ansible_ssh_common_args='-o \"UserKnownHostsFile=/tmp/a /tmp/b\"'", ["one known_hosts"]),
    ("known-hosts-directory", "ansible_ssh_common_args='-o UserKnownHostsFile=/tmp'", ["UserKnownHostsFile", "directory"]),
    ("proxy-command", "ansible_ssh_common_args='-o ProxyCommand=\"ssh -W %h:%p bastion\"'",
     ["ProxyCommand", "-o ProxyJump="]),
    ("proxy-jump-chain", "ansible_ssh_common_args='-J a.example.com,b.example.com'", ["one bastion"]),
    ("proxy-jump-bad-host", "ansible_ssh_common_args='-o ProxyJump=tester@bastion_1'", ["ProxyJump host", "DNS name"]),
    ("proxy-jump-bad-port", "ansible_ssh_common_args='-o ProxyJump=bastion.example.com:ssh'", ["no valid port"]),
    ("proxy-jump-ipv6", "ansible_ssh_common_args='-J [fd00::1]'", ["ProxyJump"]),
    ("port-flag", "ansible_ssh_common_args='-p 2222'", ["-p 2222", "ansible_port"]),
    ("user-option", "ansible_ssh_common_args='-o User=admin'", ["User=admin", "ansible_user"]),
    ("identity-flag", "ansible_ssh_common_args='-i /root/.ssh/other'", ["ansible_ssh_private_key_file"]),
    ("hostname-option", "ansible_ssh_common_args='-o HostName=10.9.9.9'", ["ansible_host"]),
    ("config-file", "ansible_ssh_common_args='-F /root/.ssh/config'", ["configuration files"]),
    ("unbalanced-quote", "yaml:ansible_ssh_common_args: \"-o 'ProxyJump=x\"", ["quotes"]),
    ("dangling-flag", "ansible_ssh_common_args='-o'", ["needs a value"]),
    ("not-a-string", "yaml:ansible_ssh_common_args: [-o, ProxyJump=x]", ["not a string of ssh options"]),
]


def _key(tmp_path: Path, make: Callable[[Path], None]) -> Path:
    path = tmp_path / "keys" / "id_test"
    path.parent.mkdir(exist_ok=True)
    make(path)
    return path


def _public(path: Path) -> None:
    path.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0wmN/Cr3JXqmLW7u+g9pTh+wyqDHpSQEIQczXkVx9q ops@laptop\n")
    path.chmod(0o600)


def _with_mode(mode: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_text(PRIVATE_KEY_TEXT)
        path.chmod(mode)
    return make


def _text(text: str | bytes) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)  # type: ignore[operator]
        path.chmod(0o600)
    return make


# (id, how the key file is made, words the line names)
KEYS: list[tuple[str, Callable[[Path], None], list[str]]] = [
    ("missing", lambda path: None, ["does not exist"]),
    ("empty", _text(""), ["is empty"]),
    ("directory", lambda path: path.mkdir(), ["is a directory, not a key file"]),
    ("fifo", lambda path: os.mkfifo(path), ["is a named pipe, not a key file"]),
    ("dangling-symlink", lambda path: path.symlink_to(path.parent / "gone"), ["does not exist"]),
    ("public-half", _public, ["is a public key", "without .pub"]),
    ("world-readable", _with_mode(0o644), ["readable by other users", "mode 0644", "chmod 600"]),
    ("group-readable", _with_mode(0o640), ["mode 0640", "chmod 600"]),
    ("world-writable", _with_mode(0o602), ["mode 0602"]),
    ("not-a-key", _text("hello, I am a shopping list\n"), ["not a private key"]),
    ("binary", _text(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256))), ["not a private key (not text)"]),
    ("putty", _text("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\n"), ["PuTTY key", "puttygen"]),
    ("too-large", _text("A" * 100_000), ["too large to be a private key"]),
    ("certificate", _text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), ["not a private key"]),
]


def _inventory(tmp_path: Path, variables: str) -> Path:
    if variables.startswith("yaml:"):
        path = tmp_path / "hosts.yml"
        path.write_text(YAML.format(variables.removeprefix("yaml:")))
    else:
        path = tmp_path / "hosts.ini"
        path.write_text(BASE.format(variables))
    return path


def test_there_are_many_distinct_bad_connection_inputs() -> None:
    ids = [c[0] for table in (PORTS, USERS, GPU, VARIABLES, KEYS) for c in table]
    assert len(ids) >= 60


@pytest.mark.parametrize(("case", "variables", "expected"), PORTS + USERS + GPU,
                         ids=[f"{t}-{c[0]}" for t, table in (("port", PORTS), ("user", USERS), ("gpu", GPU))
                              for c in table])
def test_a_port_user_or_gpu_value_that_would_be_misread_is_refused(tmp_path: Path, case: str, variables: str,
                                                                   expected: list[str]) -> None:
    path = _inventory(tmp_path, variables)
    assert_refused(run_main("config", "validate", "-i", str(path)), str(path), "host 'w1'", *expected)


@pytest.mark.parametrize(("case", "variables", "expected"), VARIABLES, ids=[c[0] for c in VARIABLES])
def test_variables_that_defeat_the_runs_safety_are_refused_with_what_to_use(tmp_path: Path, case: str, variables: str,
                                                                            expected: list[str]) -> None:
    path = _inventory(tmp_path, variables)
    assert_refused(run_main("preflight", "-i", str(path)), str(path), "host 'w1'", *expected)


@pytest.mark.parametrize(("case", "make", "expected"), KEYS, ids=[c[0] for c in KEYS])
def test_a_key_file_openssh_would_not_use_is_refused(tmp_path: Path, case: str, make: Callable[[Path], None],
                                                     expected: list[str]) -> None:
    key = _key(tmp_path, make)
    path = _inventory(tmp_path, f"ansible_ssh_private_key_file={key}")
    assert_refused(run_main("up", "-i", str(path)), str(path), "host 'w1'", f"ssh key file {key}",
                   "ansible_ssh_private_key_file", *expected)


@pytest.mark.parametrize(("case", "value", "expected"), [
    ("empty", "''", "is not a file name"),
    ("unknown-home", "~nosuchuser-cb/.ssh/id", "home directory that does not exist"),
    ("number", "42", "is not a file name"),
], ids=["empty", "unknown-home", "number"])
def test_a_key_file_name_that_names_no_file_is_refused(tmp_path: Path, case: str, value: str, expected: str) -> None:
    path = _inventory(tmp_path, f"yaml:ansible_ssh_private_key_file: {value}")
    assert_refused(run_main("config", "validate", "-i", str(path)), str(path), "host 'w1'",
                   "ansible_ssh_private_key_file", expected)


def test_a_relative_private_key_is_found_beside_the_inventory_and_a_strict_one_accepted(tmp_path: Path) -> None:
    write_private_key(tmp_path / "keys" / "id_ok")
    path = _inventory(tmp_path, "ansible_ssh_private_key_file=keys/id_ok")
    outcome = run_main("config", "validate", "-i", str(path))
    assert outcome.code == 0, outcome.stderr
    assert stat.S_IMODE((tmp_path / "keys" / "id_ok").stat().st_mode) == 0o600


def test_known_hosts_and_a_bastion_in_common_args_are_accepted(tmp_path: Path) -> None:
    path = _inventory(tmp_path, "ansible_ssh_common_args='-o UserKnownHostsFile=known_hosts -o ProxyJump=ops@10.0.0.9:2222 "
                                "-o ServerAliveCountMax=5'")
    outcome = run_main("config", "validate", "-i", str(path))
    assert outcome.code == 0, outcome.stderr
