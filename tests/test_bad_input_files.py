"""Files that are not what they claim to be, and YAML that would hang or mislead a parser: refused in one line
naming the file (and the line), exit code 2, within seconds, nothing created; Ansible's own warnings never
reach the terminal. A YAML inventory is good input whatever its suffix.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.refusal import assert_refused, run_main, run_process

GOOD_INI = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2\n"
GOOD_YAML = ("all:\n  children:\n    control_plane:\n      hosts:\n        cp1: {ansible_host: 10.0.0.1}\n"
             "    workers:\n      hosts:\n        w1: {ansible_host: 10.0.0.2}\n")
VAULT_BLOCK = ("!vault |\n          $ANSIBLE_VAULT;1.1;AES256\n          623133653966623430613934643361633837643737\n"
               "          6134333665353966363534333632666535333761\n")
VAULT_FILE = "$ANSIBLE_VAULT;1.1;AES256\n62313365396662343061393464336163383764373764613633653634306231386433626436623361\n"


def billion_laughs(levels: int = 9, key: str = "lol") -> str:
    """Each level an anchored list of nine aliases to the level before: 9**levels values once expanded."""
    lines = [f'{key}0: &{key}0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        lines.append(f"{key}{level}: &{key}{level} [{', '.join([f'*{key}{level - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def indented(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line + "\n" for line in text.splitlines())


# How the file given as --inventory or --config is made: (id, maker, words the line names besides the path).
Maker = Callable[[Path], None]


def text(content: str) -> Maker:
    return lambda path: path.write_text(content)


def data(content: bytes) -> Maker:
    return lambda path: path.write_bytes(content)


FILES: list[tuple[str, Maker, list[str]]] = [
    ("missing", lambda path: None, ["not found"]),
    ("directory", lambda path: path.mkdir(), ["is a directory, not a file"]),
    ("fifo", lambda path: os.mkfifo(path), ["is a named pipe"]),
    ("utf16-with-bom", data(GOOD_INI.encode("utf-16")), ["UTF-16", "save it as UTF-8"]),
    ("utf16-without-bom", data(GOOD_INI.encode("utf-16-le")), ["UTF-16"]),
    ("utf32", data(GOOD_INI.encode("utf-32")), ["UTF-16 (or UTF-32)"]),
    ("binary", data(b"\x7fELF\x02\x01\x01" + bytes(200)), ["is binary"]),
    ("gzip", data(b"\x1f\x8b\x08\x00" + bytes(range(256)) * 4), ["binary"]),
    ("latin-1", data("[control_plane]\ncp1 ansible_host=10.0.0.1 owner=Müller\n".encode("latin-1")),
     ["not UTF-8 text (line 2)"]),
    ("huge", data(b"# padding\n" * 300_000), ["more than the", "the right file?"]),
    ("vault-encrypted-file", text(VAULT_FILE), ["encrypted with ansible-vault", "ansible-vault decrypt"]),
]

# The same makers, for the settings file.
SETTINGS_FILES: list[tuple[str, Maker, list[str]]] = [
    ("missing", lambda path: None, ["settings file not found"]),
    ("directory", lambda path: path.mkdir(), ["settings file is a directory"]),
    ("utf16", data(b"kubernetes:\n  version: '1.31'\n".decode().encode("utf-16")), ["UTF-16"]),
    ("binary", data(bytes(range(256))), ["binary"]),
    ("vault-encrypted", text(VAULT_FILE), ["ansible-vault"]),
    ("huge", data(b"# padding\n" * 300_000), ["more than the"]),
]

# YAML that a plain parser would take: (id, cluster.yaml content, words the line names).
SETTINGS_YAML = [
    ("alias-bomb-in-a-value", "smoke_test:\n  image: &img x\nbomb:\n" + indented(billion_laughs(), 2),
     ["refused YAML", "alias bomb"]),
    ("alias-bomb-top-level", billion_laughs(), ["alias bomb"]),
    ("recursive-alias", "kubernetes: &k\n  version: *k\n", ["refers to the anchor it is inside"]),
    ("duplicate-key", "kubernetes:\n  version: '1.31'\n  version: '1.30'\n",
     ["key 'version' appears twice", "lines 2 and 3"]),
    ("duplicate-section", "ssh:\n  connect_timeout_s: 5\nssh:\n  accept_new_host_keys: true\n", ["key 'ssh' appears twice"]),
    ("duplicate-after-merge", "base: &b {x: 1}\nmirrors:\n  <<: *b\n  profile: cn\n  profile: default\n",
     ["key 'profile' appears twice"]),
    ("deeply-nested", "kubernetes: " + "[" * 3000 + "]" * 3000 + "\n", ["nested too deeply"]),
    ("huge-integer", "smoke_test:\n  gpus: " + "9" * 5000 + "\n", ["not valid YAML"]),
    ("unhashable-key", "? [a, b]\n: 1\n", ["found unhashable key"]),
    ("python-tag", "kubernetes: !!python/object/apply:os.system ['id']\n", ["not valid YAML", "constructor"]),
    ("tab-indent", "kubernetes:\n\tversion: '1.31'\n", ["not valid YAML at line 2"]),
    ("unclosed", "kubernetes: {version: '1.31'\n", ["not valid YAML"]),
]

# YAML inventories and their group_vars: (id, {relative path: content}, the file the line names, words).
INVENTORY_YAML = [
    ("alias-bomb-in-a-host-variable",
     {"hosts.yml": GOOD_YAML.replace("{ansible_host: 10.0.0.2}", "{ansible_host: 10.0.0.2, junk: *lol8}")
      .replace("all:\n", "all:\n  vars:\n" + indented(billion_laughs(), 4), 1)},
     "hosts.yml", ["alias bomb"]),
    ("duplicate-host-variable",
     {"hosts.yml": GOOD_YAML.replace("{ansible_host: 10.0.0.2}", "{ansible_host: 10.0.0.2, ansible_host: 10.0.0.3}")},
     "hosts.yml", ["key 'ansible_host' appears twice"]),
    ("duplicate-host", {"hosts.yml": GOOD_YAML + "        w1: {ansible_host: 10.0.0.3}\n"},
     "hosts.yml", ["key 'w1' appears twice"]),
    ("duplicate-group", {"hosts.yml": GOOD_YAML + "    workers:\n      hosts: {}\n"}, "hosts.yml",
     ["key 'workers' appears twice"]),
    ("vault-value-in-inventory",
     {"hosts.yml": GOOD_YAML.replace("{ansible_host: 10.0.0.2}", "\n          ansible_host: 10.0.0.2\n"
                                     "          ansible_become_password: " + VAULT_BLOCK.replace("          ", "            "))},
     "hosts.yml", ["ansible_become_password is vault-encrypted", "--ask-become-pass"]),
    ("vault-value-in-group-vars",
     {"hosts.ini": GOOD_INI, "group_vars/workers.yml": "ansible_user: " + VAULT_BLOCK.replace("          ", "  ")},
     "group_vars/workers.yml", ["ansible_user is vault-encrypted"]),
    ("vault-encrypted-group-vars-file", {"hosts.ini": GOOD_INI, "group_vars/all.yml": VAULT_FILE},
     "group_vars/all.yml", ["encrypted with ansible-vault"]),
    ("alias-bomb-in-group-vars", {"hosts.ini": GOOD_INI, "group_vars/workers/bomb.yml": billion_laughs()},
     "group_vars/workers/bomb.yml", ["alias bomb"]),
    ("duplicate-key-in-host-vars", {"hosts.ini": GOOD_INI, "host_vars/w1": "ansible_user: a\nansible_user: b\n"},
     "host_vars/w1", ["key 'ansible_user' appears twice"]),
    ("utf16-group-vars", {"hosts.ini": GOOD_INI, "group_vars/all.yaml": "ansible_user: ops\n"},
     "group_vars/all.yaml", ["UTF-16"]),
    ("ini-in-a-yml-file", {"hosts.yml": GOOD_INI}, "hosts.yml", ["not valid YAML at line 2"]),
    ("yaml-list-inventory", {"hosts.yaml": "- cp1\n- w1\n"}, "hosts.yaml", ["not a valid Ansible inventory"]),
    ("ini-unbalanced-quote", {"hosts.ini": GOOD_INI + "w2 ansible_host='10.0.0.3\n"}, "hosts.ini",
     ["not a valid Ansible inventory"]),
    ("ini-variable-twice", {"hosts.ini": GOOD_INI + "[all:vars]\nansible_user=ops\nansible_user=root\n"},
     "hosts.ini", ["[all:vars] sets 'ansible_user' twice", "keep one"]),
    ("ini-host-twice-differently", {"hosts.ini": GOOD_INI + "[gpu]\nw1 ansible_host=10.0.0.9\n"}, "hosts.ini",
     ["host 'w1' sets ansible_host twice, differently"]),
    ("host-range-bomb-ini", {"hosts.ini": GOOD_INI + "w[1:100000000]\n"}, "hosts.ini",
     ["names 100000002 hosts", "more than the 5000"]),
    ("host-range-bomb-yaml", {"hosts.yml": GOOD_YAML + "        'g[0001:9999]-[a:z]': {}\n"}, "hosts.yml",
     ["names 259976 hosts"]),
    ("more-nodes-than-pod-range", {"hosts.ini": GOOD_INI + "w[100:400] ansible_user=ops\n"}, "hosts.ini",
     ["has room for 256 nodes", "use a /15 or wider, e.g. 10.128.0.0/15"]),
    ("empty-inventory", {"hosts.ini": ""}, "hosts.ini", ["no control plane"]),
    ("comments-only", {"hosts.ini": "# nothing yet\n; nor here\n"}, "hosts.ini", ["no control plane"]),
]


def _make(tmp_path: Path, name: str, maker: Maker) -> Path:
    path = tmp_path / name
    maker(path)
    return path


def test_there_are_many_distinct_bad_files() -> None:
    ids = [c[0] for table in (FILES, SETTINGS_FILES, SETTINGS_YAML, INVENTORY_YAML) for c in table]
    assert len(ids) >= 45


@pytest.mark.parametrize(("case", "maker", "expected"), FILES, ids=[c[0] for c in FILES])
def test_an_inventory_that_is_not_a_text_file_is_named(tmp_path: Path, case: str, maker: Maker,
                                                        expected: list[str]) -> None:
    path = _make(tmp_path, "hosts.ini", maker)
    assert_refused(run_main("config", "validate", "-i", str(path)), f"{path}: inventory file", *expected)


@pytest.mark.parametrize(("case", "maker", "expected"), SETTINGS_FILES, ids=[c[0] for c in SETTINGS_FILES])
def test_a_settings_file_that_is_not_a_text_file_is_named(tmp_path: Path, case: str, maker: Maker,
                                                           expected: list[str]) -> None:
    inventory = _make(tmp_path, "hosts.ini", text(GOOD_INI))
    path = _make(tmp_path, "cluster.yaml", maker)
    assert_refused(run_main("preflight", "-i", str(inventory), "-c", str(path)), f"{path}:", *expected)


@pytest.mark.parametrize(("case", "content", "expected"), SETTINGS_YAML, ids=[c[0] for c in SETTINGS_YAML])
def test_settings_yaml_that_would_hang_or_mislead_is_refused(tmp_path: Path, case: str, content: str,
                                                             expected: list[str]) -> None:
    path = _make(tmp_path, "cluster.yaml", text(content))
    assert_refused(run_main("config", "show", "-c", str(path)), f"{path}:", *expected)


@pytest.mark.parametrize(("case", "files", "named", "expected"), INVENTORY_YAML, ids=[c[0] for c in INVENTORY_YAML])
def test_inventory_yaml_and_vars_files_that_would_hang_or_mislead_are_refused(
        tmp_path: Path, case: str, files: dict[str, str], named: str, expected: list[str]) -> None:
    for relative, content in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if case.startswith("utf16") and relative.startswith("group_vars"):
            path.write_bytes(content.encode("utf-16"))
        else:
            path.write_text(content)
    inventory = next(tmp_path / name for name in files if name.startswith("hosts"))
    assert_refused(run_main("config", "validate", "-i", str(inventory)), str(tmp_path / named), *expected)


@pytest.mark.parametrize("name", ["hosts", "hosts.txt", "inventory.inv", "hosts.json"])
def test_a_yaml_inventory_is_read_whatever_its_suffix(tmp_path: Path, name: str) -> None:
    path = _make(tmp_path, name, text(GOOD_YAML))
    outcome = run_main("config", "validate", "-i", str(path), "-o", "json")
    assert outcome.code == 0, outcome.stderr
    assert '"name": "w1"' in outcome.stdout


def test_shared_anchors_in_a_real_inventory_are_fine(tmp_path: Path) -> None:
    hosts = "".join(f"        w{i}: {{ansible_host: 10.0.{i // 250}.{i % 250 + 2}, <<: *common}}\n" for i in range(200))
    path = _make(tmp_path, "hosts.yml", text(
        "all:\n  vars:\n    common: &common {gpu: auto, ansible_user: ops}\n  children:\n"
        "    control_plane:\n      hosts:\n        cp1: {ansible_host: 10.1.0.1}\n"
        "    workers:\n      hosts:\n" + hosts))
    outcome = run_main("config", "validate", "-i", str(path), "-o", "json")
    assert outcome.code == 0, outcome.stderr


def test_ansibles_own_warnings_stay_off_the_terminal(tmp_path: Path) -> None:
    # A group name with '-' makes Ansible warn about invalid characters; the inventory is still good input.
    path = _make(tmp_path, "hosts.ini", text(GOOD_INI + "[gpu-nodes]\nw1\n[workers:children]\ngpu-nodes\n"))
    accepted = run_process("config", "validate", "-i", str(path))
    assert accepted.code == 0 and accepted.stderr == "", accepted.stderr
    broken = _make(tmp_path, "broken.ini", text(GOOD_INI + "[gpu-nodes]\nw1\n[control_plane]\nw1\n"))
    refused = run_process("config", "validate", "-i", str(broken))
    assert "[WARNING]" not in refused.stderr and "Traceback" not in refused.stderr
    assert refused.code == 2 and len(refused.lines) == 1 and str(broken) in refused.lines[0]


@pytest.mark.skipif(sys.platform != "linux", reason="reads Linux's /dev/zero")
def test_a_device_given_as_the_inventory_is_refused_at_once() -> None:
    assert_refused(run_process("config", "validate", "-i", "/dev/zero"), "/dev/zero", "character device")
