"""A join token and a certificate key appear in no output and no log: every task of every playbook and role that
handles one carries `no_log: true` (itself, or the block around it). Checked on the roles' own files, without a
lab: tests/test_phases_lab.py joins real nodes and looks for the token in the run's log.

A task handles one when its command mints or uses one (kubeadm token, kubeadm certs certificate-key, the
control-plane certificates' upload, kubeadm init and join), or when it reads a variable that holds one: what such
a task registered, a fact set from one, a role default built from one (found by following the variables, not by a
list of names). Reading only what carries no secret is allowed without no_log: a result's return code and message,
whether it is defined or skipped, and its error lines once the lines naming a token or certificate key are dropped.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from tests.support.paths import REPO_ROOT

PLAYBOOKS = REPO_ROOT / "playbooks"
# Commands that print or take a join token or a certificate key.
SECRET_COMMANDS = re.compile(r"\bkubeadm\b.*\b(token|certificate-key|upload-certs|init|join)\b")
# Fields Ansible evaluates without showing what they read.
CONDITIONS = frozenset({"when", "changed_when", "failed_when", "until", "that"})
NOT_TEMPLATED = frozenset({"name", "no_log", "register", "tags"}) | CONDITIONS
# What may be read of a secret-holding variable without no_log (what follows the variable's name).
HARMLESS = re.compile(r"\.(rc|msg)\b|\s+is\s+(not\s+)?(defined|undefined|skipped)\b|"
                      r"\.stderr_lines \| default\(\[\]\) \| reject\('search', '\(\?i\)token\|certificate-key'\)")
TASK_LISTS = ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always")


class _Loader(yaml.SafeLoader):
    """YAML as Ansible writes it: tags such as !unsafe read as the plain value."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node)
                              if isinstance(node, yaml.ScalarNode) else None)


@dataclass(frozen=True)
class Task:
    where: str
    name: str
    body: dict[str, Any]
    no_log: bool


def _tasks(items: Any, where: str, no_log: bool = False) -> Iterator[Task]:
    for item in items or []:
        if not isinstance(item, dict):
            continue
        inherited = no_log or item.get("no_log") is True
        nested = [key for key in TASK_LISTS if key in item]
        for key in nested:
            yield from _tasks(item[key], where, inherited)
        # A play or a block holds tasks; what it says itself (its vars) is shown nowhere.
        if not nested and "hosts" not in item:
            yield Task(where, str(item.get("name", "?")), item, inherited)


def every_task() -> list[Task]:
    found = []
    for path in sorted(PLAYBOOKS.glob("*.yml")):
        for play in yaml.load(path.read_text(), Loader=_Loader) or []:
            found += _tasks([play], str(path.relative_to(REPO_ROOT)))
    for path in sorted(PLAYBOOKS.glob("roles/*/*/*.yml")):
        if path.parent.name in ("tasks", "handlers"):
            found += _tasks(yaml.load(path.read_text(), Loader=_Loader), str(path.relative_to(REPO_ROOT)))
    return found


def role_variables() -> dict[str, str]:
    """Every role default and var, as the text it is defined by."""
    found = {}
    for path in sorted(PLAYBOOKS.glob("roles/*/defaults/**/*.yml")) + sorted(PLAYBOOKS.glob("roles/*/vars/**/*.yml")):
        document = yaml.load(path.read_text(), Loader=_Loader) or {}
        found |= {name: yaml.safe_dump(value) for name, value in document.items()}
    return found


def _text(value: Any, skip: frozenset[str] = frozenset()) -> str:
    """Every string of a task's fields but `skip`, one per line."""
    if isinstance(value, dict):
        return "\n".join(_text(v) for k, v in value.items() if k not in skip)
    if isinstance(value, list):
        return "\n".join(_text(v) for v in value)
    return str(value) if value is not None else ""


def _reads(text: str, variable: str) -> list[str]:
    """What follows each mention of `variable` in `text` (up to the end of the line)."""
    return [match.group(1) for match in re.finditer(rf"\b{re.escape(variable)}\b(.*)$", text, re.MULTILINE)]


def secret_variables(tasks: list[Task], variables: dict[str, str]) -> set[str]:
    """The variables that hold a join token or certificate key: registered by a task that handles one, set from one
    (set_fact), or defined from one (role defaults), followed until nothing new is found."""
    secret: set[str] = set()
    while True:
        before = set(secret)
        for task in tasks:
            if handles_secret(task, secret):
                if "register" in task.body:
                    secret.add(task.body["register"])
                facts = task.body.get("ansible.builtin.set_fact") or task.body.get("set_fact")
                if isinstance(facts, dict):
                    secret |= {name for name, value in facts.items() if _mentions_secret(_text(value), secret)}
        secret |= {name for name, text in variables.items() if _mentions_secret(text, secret)}
        if secret == before:
            return secret


def _mentions_secret(text: str, secret: set[str]) -> bool:
    return any(_reads(text, variable) for variable in secret)


def handles_secret(task: Task, secret: set[str]) -> bool:
    """The task runs a command that mints or takes a secret, or reads more of a secret-holding variable than its
    return code, message and filtered error lines."""
    module = next((task.body[k] for k in ("ansible.builtin.command", "command", "ansible.builtin.shell", "shell")
                   if k in task.body), None)
    if module is not None and SECRET_COMMANDS.search(" ".join(_text(module).split())):
        return True
    shown = _text(task.body, NOT_TEMPLATED)
    return any(not HARMLESS.match(after) for variable in secret for after in _reads(shown, variable))


def test_every_task_that_handles_a_join_token_or_certificate_key_has_no_log() -> None:
    tasks = every_task()
    secret = secret_variables(tasks, role_variables())
    handling = [task for task in tasks if handles_secret(task, secret)]
    # The walk found what it is about: the mint, the join and the init, and what they registered.
    assert {"kubeadm_join_command", "kubeadm_join_certificate_key", "kubeadm_join_key", "kubeadm_join_minted",
            "kubeadm_join_control_plane_args", "kubeadm_join_result", "kubeadm_control_plane_init"} <= secret
    assert {t.name for t in handling} >= {"Mint a join command with a short-lived token",
                                          "Mint a certificate key for the control planes that join",
                                          "Upload the control-plane certificates, encrypted with that key",
                                          "Keep the certificate key in memory for the control planes",
                                          "Keep the join command in memory for the joining nodes",
                                          "Run kubeadm join", "Run kubeadm init"}
    assert [f"{t.where}: {t.name}" for t in handling if not t.no_log] == []


def test_the_check_sees_a_task_that_would_show_a_secret() -> None:
    """The rule itself: a debug of the join command, or an unfiltered error line of the join, is caught; its return
    code is not."""
    secret = {"kubeadm_join_command", "kubeadm_join_result"}

    def task(body: dict[str, Any]) -> Task:
        return Task("here", "planted", body, bool(body.get("no_log")))

    assert handles_secret(task({"ansible.builtin.debug": {"msg": "{{ kubeadm_join_command }}"}}), secret)
    assert handles_secret(task({"ansible.builtin.fail": {"msg": "{{ kubeadm_join_result.stderr_lines | last }}"}}),
                          secret)
    assert handles_secret(task({"ansible.builtin.command": {"argv": ["kubeadm", "token", "list"]}}), set())
    assert not handles_secret(task({"ansible.builtin.fail": {"msg": "rc {{ kubeadm_join_result.rc }}"},
                                    "when": "kubeadm_join_result.rc != 0"}), secret)
    assert not handles_secret(task({"ansible.builtin.command": {"argv": ["kubeadm", "version"]}}), secret)
