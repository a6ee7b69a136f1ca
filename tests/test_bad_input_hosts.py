"""A host's name and address, as a hostile new user writes them: refused by `bootstrap` before any connection,
in one line naming the file, the host and what is wrong, exit code 2, nothing created.

Names: kubeadm refuses upper case (lower-casing before the check would hide it), a leading or trailing '-',
empty labels, spaces, non-ASCII, more than 63 characters. Addresses: IPv4 only (an octet over 255, IPv6, a
bracketed form, a newline, path characters, an unrendered Jinja expression are not addresses).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.refusal import assert_refused, run_main

CONTROL_PLANE_INI = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\n"


def yaml_worker(name: str, variables: str) -> str:
    """A YAML inventory with cp1 and one worker; `name` and `variables` go in as written (YAML flow syntax)."""
    return ("all:\n  children:\n    control_plane:\n      hosts:\n        cp1: {ansible_host: 10.0.0.1}\n"
            f"    workers:\n      hosts:\n        {name}: {{{variables}}}\n")


# (id, file name, content, what the line must name besides the file)
NAMES = [
    ("upper-case", "hosts.ini", CONTROL_PLANE_INI + "Worker1 ansible_host=10.0.0.2\n", ["'Worker1'", "upper-case"]),
    ("all-upper-case", "hosts.yml", yaml_worker("GPU-NODE", "ansible_host: 10.0.0.2"), ["'GPU-NODE'", "upper-case"]),
    ("upper-case-unique-lower", "hosts.ini", "[control_plane]\nCP ansible_host=10.0.0.1\n", ["'CP'", "upper-case"]),
    ("leading-hyphen", "hosts.yml", yaml_worker("-w1", "ansible_host: 10.0.0.2"), ["'-w1'", "'-'"]),
    ("trailing-hyphen", "hosts.ini", CONTROL_PLANE_INI + "w1- ansible_host=10.0.0.2\n", ["'w1-'", "'-'"]),
    ("hyphen-ends-a-label", "hosts.ini", CONTROL_PLANE_INI + "w1-.lab ansible_host=10.0.0.2\n", ["'w1-.lab'", "'-'"]),
    ("empty-label", "hosts.ini", CONTROL_PLANE_INI + "w1..lab ansible_host=10.0.0.2\n", ["'w1..lab'", "empty label"]),
    ("leading-dot", "hosts.yml", yaml_worker(".w1", "ansible_host: 10.0.0.2"), ["'.w1'", "empty label"]),
    ("trailing-dot", "hosts.yml", yaml_worker("w1.", "ansible_host: 10.0.0.2"), ["'w1.'", "empty label"]),
    ("space", "hosts.yml", yaml_worker("'gpu node'", "ansible_host: 10.0.0.2"), ["'gpu node'", "spaces"]),
    ("tab", "hosts.yml", yaml_worker('"gpu\\tnode"', "ansible_host: 10.0.0.2"), ["'gpu\\tnode'", "spaces"]),
    ("non-ascii", "hosts.yml", yaml_worker("wörker", "ansible_host: 10.0.0.2"), ["'wörker'", "non-ASCII"]),
    ("emoji", "hosts.yml", yaml_worker("'🚀'", "ansible_host: 10.0.0.2"), ["non-ASCII"]),
    ("underscore", "hosts.ini", CONTROL_PLANE_INI + "gpu_node ansible_host=10.0.0.2\n", ["'gpu_node'", "'_'"]),
    ("64-characters", "hosts.ini", CONTROL_PLANE_INI + f"{'w' * 64} ansible_host=10.0.0.2\n",
     ["longer than 63 characters"]),
    ("long-dotted", "hosts.yml", yaml_worker(".".join(["abcdefghij"] * 7), "ansible_host: 10.0.0.2"),
     ["longer than 63 characters"]),
    ("plus-sign", "hosts.ini", CONTROL_PLANE_INI + "w+1 ansible_host=10.0.0.2\n", ["'w+1'", "'+'"]),
]

ADDRESSES = [
    ("octet-over-255", CONTROL_PLANE_INI + "w1 ansible_host=10.0.0.256\n", ["'10.0.0.256'", "not an IPv4 address"]),
    ("first-octet-over-255", CONTROL_PLANE_INI + "w1 ansible_host=300.1.2.3\n", ["not an IPv4 address"]),
    ("three-octets", CONTROL_PLANE_INI + "w1 ansible_host=10.0.2\n", ["'10.0.2'", "not an IPv4 address"]),
    ("five-octets", CONTROL_PLANE_INI + "w1 ansible_host=1.2.3.4.5\n", ["not an IPv4 address"]),
    ("leading-zero", CONTROL_PLANE_INI + "w1 ansible_host=010.0.0.2\n", ["'010.0.0.2'", "leading zeros"]),
    ("ipv6", CONTROL_PLANE_INI + "w1 ansible_host=fd00::10\n", ["'fd00::10'", "IPv4-only"]),
    ("ipv6-full", CONTROL_PLANE_INI + "w1 ansible_host=2001:db8:0:0:0:0:0:1\n", ["IPv4-only"]),
    ("bracketed-ipv6", CONTROL_PLANE_INI + "w1 ansible_host=[fd00::10]\n", ["'[fd00::10]'", "brackets"]),
    ("bracketed-ipv4", CONTROL_PLANE_INI + "w1 ansible_host=[10.0.0.2]\n", ["brackets"]),
    ("with-port", CONTROL_PLANE_INI + "w1 ansible_host=10.0.0.2:2222\n", ["'10.0.0.2:2222'", "ansible_port"]),
    ("with-user", CONTROL_PLANE_INI + "w1 ansible_host=root@10.0.0.2\n", ["ansible_user"]),
    ("cidr", CONTROL_PLANE_INI + "w1 ansible_host=10.0.0.2/24\n", ["'10.0.0.2/24'", "'/'"]),
    ("path", CONTROL_PLANE_INI + "w1 ansible_host=../../etc\n", ["'../../etc'", "'/'"]),
    ("unspecified", CONTROL_PLANE_INI + "w1 ansible_host=0.0.0.0\n", ["'0.0.0.0'", "cannot be a machine's address"]),
    ("multicast", CONTROL_PLANE_INI + "w1 ansible_host=224.0.0.1\n", ["multicast"]),
    ("broadcast", CONTROL_PLANE_INI + "w1 ansible_host=255.255.255.255\n", ["broadcast"]),
    ("host-name-underscore", CONTROL_PLANE_INI + "w1 ansible_host=node_1.example.com\n", ["not", "DNS name"]),
    ("host-name-hyphen", CONTROL_PLANE_INI + "w1 ansible_host=-w1.example.com\n", ["DNS name"]),
    ("host-name-numeric-tld", CONTROL_PLANE_INI + "w1 ansible_host=example.123\n", ["DNS name"]),
]

YAML_ADDRESSES = [
    ("newline", 'ansible_host: "10.0.0.2\\nTrusted: yes"', ["'10.0.0.2\\nTrusted: yes'", "newlines"]),
    ("space-inside", 'ansible_host: "10.0.0.2 10.0.0.3"', ["spaces"]),
    ("jinja", "ansible_host: \"{{ lookup('env', 'NODE_IP') }}\"", ["Jinja"]),
    ("jinja-statement", 'ansible_host: "{% if x %}10.0.0.2{% endif %}"', ["Jinja"]),
    ("empty", 'ansible_host: ""', ["is empty"]),
    ("non-ascii-name", "ansible_host: nödé.example.com", ["non-ASCII"]),
    ("a-list", "ansible_host: [10.0.0.2]", ["not an address"]),
    ("a-number", "ansible_host: 10", ["not an address"]),
    ("null", "ansible_host: null", ["not an address"]),
]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_there_are_many_distinct_bad_names_and_addresses() -> None:
    ids = [c[0] for c in NAMES] + [c[0] for c in ADDRESSES] + [c[0] for c in YAML_ADDRESSES]
    assert len(set(ids)) == len(ids) >= 40


@pytest.mark.parametrize(("case", "file_name", "text", "expected"), NAMES, ids=[c[0] for c in NAMES])
def test_a_host_name_kubeadm_would_refuse_is_refused(tmp_path: Path, case: str, file_name: str, text: str,
                                                     expected: list[str]) -> None:
    path = _write(tmp_path, file_name, text)
    line = assert_refused(run_main("config", "validate", "-i", str(path)), str(path), *expected)
    assert "is not a valid Kubernetes node name" in line and "gpu-worker-1" in line


@pytest.mark.parametrize(("case", "text", "expected"), ADDRESSES, ids=[c[0] for c in ADDRESSES])
def test_an_address_that_is_not_an_ipv4_address_or_a_dns_name_is_refused(tmp_path: Path, case: str, text: str,
                                                                           expected: list[str]) -> None:
    path = _write(tmp_path, "hosts.ini", text)
    assert_refused(run_main("config", "validate", "-i", str(path)), str(path), "host 'w1'", "ansible_host=",
                   *expected)


@pytest.mark.parametrize(("case", "variables", "expected"), YAML_ADDRESSES, ids=[c[0] for c in YAML_ADDRESSES])
def test_an_address_written_in_yaml_is_checked_as_written(tmp_path: Path, case: str, variables: str,
                                                         expected: list[str]) -> None:
    path = _write(tmp_path, "hosts.yml", yaml_worker("w1", variables))
    assert_refused(run_main("preflight", "-i", str(path)), str(path), "host 'w1'", "ansible_host=", *expected)


def test_a_lower_case_dotted_name_and_a_dns_address_are_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path, "hosts.ini", "[control_plane]\ncp-1.lab ansible_host=cp-1.lab.example.com.\n"
                                         "[workers]\ngpu-worker-1 ansible_host=10.0.0.2\n")
    outcome = run_main("config", "validate", "-i", str(path))
    assert outcome.code == 0, outcome.stderr
    assert "cp-1.lab" in outcome.stdout and "gpu-worker-1" in outcome.stdout
