"""Which unit tests depend on the Ansible controller, and so run under both controllers ./dev.sh tests with
(ansible-core 2.19 on Python 3.11, ansible-core 2.21 on Python >= 3.12): the rest run once, under the first.

A test module depends on the controller when it, or any provision or tests module it imports (directly or
through others), imports Ansible (ansible, ansible_runner, ansible_mitogen): inventories are read by Ansible's
own inventory code, playbooks run through ansible-runner, preflight asks which ansible-core runs. It also does
when its source names Ansible or the roles' files (playbooks/): it runs ansible-lint or
ansible-playbook, or loads a module that imports Ansible's module_utils. Found from the code, so a new test
module is placed without anyone listing it.
"""
from __future__ import annotations

import re
from pathlib import Path

import grimp

ANSIBLE_PACKAGES = frozenset({"ansible", "ansible_runner", "ansible_mitogen"})
# Ansible named in the test's own source: a command it runs, a module it loads, a variable it reads. The
# inventory variables every test writes (ansible_host, ansible_user, ...) say nothing about the controller.
NAMES_ANSIBLE = re.compile(r"ansible(?!_(?:host|user|port|ssh_private_key_file|become|python_interpreter)\b)|"
                           r"PLAYBOOKS_DIR|playbooks/", re.ASCII)


def controller_independent(test_files: list[Path]) -> set[Path]:
    """The test modules among `test_files` (tests/test_*.py) that do not depend on the controller."""
    graph = grimp.build_graph("provision", "tests", include_external_packages=True)
    importers = {module for module in graph.modules
                 if graph.find_modules_directly_imported_by(module) & ANSIBLE_PACKAGES}
    independent = set()
    for path in test_files:
        module = f"tests.{path.stem}"
        if module not in graph.modules:
            continue
        reached = graph.find_upstream_modules(module) | {module}
        if not reached & importers and not NAMES_ANSIBLE.search(path.read_text()):
            independent.add(path)
    return independent
