"""Ansible under the tool's control: which configuration, plugins, collections and environment it reads.

Ansible reads more than the inventory file a user names: a configuration file (ANSIBLE_CONFIG, else ansible.cfg in
the working folder, ~/.ansible.cfg, /etc/ansible/ansible.cfg), ANSIBLE_* environment variables, inventory plugins
and scripts (an executable inventory is run; a YAML file with `plugin:` loads that plugin), vars plugins and
plugin folders under ~/.ansible and /usr/share/ansible (a legacy vars plugin there runs by itself), collections
under ~/.ansible/collections ahead of the ones installed with the tool. Any of them could run a command on this
machine while an inventory is only being validated, or change how the run connects.

So every Ansible the tool starts, in this process (validating the inventory) or as ansible-playbook (a run),
gets `tool_environment()`: the tool's own ansible.cfg, plugin folders that hold nothing (roles, playbooks and the
tool's library bring their own), the collections installed beside the tool, the yaml and ini inventory plugins
only, host_group_vars as the only vars plugin, and a local temporary folder of its own that is removed when the
process ends (Ansible would leave ~/.ansible/tmp behind, even on a refused command). An ANSIBLE_* variable in the
operator's environment is refused in one line naming it (`environment_problem`), unless it only changes what
Ansible prints (DISPLAY_ONLY) or already holds the tool's own value.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from provision.errors import InputError
from provision.resources import ANSIBLE_CFG, PLAYBOOKS_DIR, ROLES_PATH

ENV_PREFIX = "ANSIBLE_"
# Variables that change only what Ansible prints, never what it loads, runs or connects to.
DISPLAY_ONLY = frozenset({
    "ANSIBLE_NOCOLOR", "ANSIBLE_FORCE_COLOR", "ANSIBLE_DEPRECATION_WARNINGS", "ANSIBLE_LOCALHOST_WARNING",
    "ANSIBLE_INVENTORY_UNPARSED_WARNING", "ANSIBLE_SYSTEM_WARNINGS", "ANSIBLE_ACTION_WARNINGS",
    "ANSIBLE_COMMAND_WARNINGS", "ANSIBLE_DISPLAY_SKIPPED_HOSTS", "ANSIBLE_DISPLAY_OK_HOSTS",
    "ANSIBLE_SHOW_CUSTOM_STATS", "ANSIBLE_COLOR_CHANGED", "ANSIBLE_COLOR_OK", "ANSIBLE_COLOR_SKIP",
    "ANSIBLE_COLOR_ERROR", "ANSIBLE_COLOR_WARN", "ANSIBLE_COLOR_DEBUG", "ANSIBLE_COLOR_VERBOSE",
    "ANSIBLE_COLOR_HIGHLIGHT", "ANSIBLE_COLOR_DEPRECATE", "ANSIBLE_COLOR_DIFF_ADD", "ANSIBLE_COLOR_DIFF_REMOVE",
    "ANSIBLE_COLOR_DIFF_LINES", "ANSIBLE_COLOR_CONSOLE_PROMPT", "ANSIBLE_COLOR_UNREACHABLE",
})
# Every folder Ansible looks in for plugins of its own kind (the tool's playbooks and roles carry theirs beside
# them, which Ansible finds by itself): pointed at a folder that does not exist, so none is loaded from elsewhere.
PLUGIN_PATH_VARIABLES = (
    "ANSIBLE_ACTION_PLUGINS", "ANSIBLE_BECOME_PLUGINS", "ANSIBLE_CACHE_PLUGINS", "ANSIBLE_CALLBACK_PLUGINS",
    "ANSIBLE_CLICONF_PLUGINS", "ANSIBLE_CONNECTION_PLUGINS", "ANSIBLE_DOC_FRAGMENT_PLUGINS",
    "ANSIBLE_FILTER_PLUGINS", "ANSIBLE_HTTPAPI_PLUGINS", "ANSIBLE_INVENTORY_PLUGINS", "ANSIBLE_LOOKUP_PLUGINS",
    "ANSIBLE_NETCONF_PLUGINS", "ANSIBLE_STRATEGY_PLUGINS", "ANSIBLE_TERMINAL_PLUGINS", "ANSIBLE_TEST_PLUGINS",
    "ANSIBLE_VARS_PLUGINS",
)
NO_PLUGINS = PLAYBOOKS_DIR / "no-plugins-here"
LIBRARY_DIR = PLAYBOOKS_DIR / "library"
# Our modules' shared code: found by every playbook, the ones beside playbooks/ and any other (a test's play).
MODULE_UTILS_DIR = PLAYBOOKS_DIR / "module_utils"
# The inventory plugins a run may use: the tool writes each run's inventory in YAML; a user's is INI or YAML.
INVENTORY_PLUGINS = ("yaml", "ini")
# Quiet while validating in this process: Ansible would print its own warnings, and the tool says one line.
QUIET = {"ANSIBLE_DEPRECATION_WARNINGS": "False", "ANSIBLE_LOCALHOST_WARNING": "False",
         "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False"}

_local_temp: Path | None = None


def _collections_root() -> str:
    """The folder holding the ansible_collections installed with the tool (the `ansible` package's): found on
    sys.path, not through the import system, where Ansible's own collection finder answers once a process has
    started Ansible's plugin loader (provision/bundle/plan.py does)."""
    for entry in sys.path:
        if entry and (Path(entry) / "ansible_collections").is_dir():
            return str(Path(entry))
    return str(NO_PLUGINS)


def local_temp() -> Path:
    """This process's local temporary folder for Ansible (its ansible-local-* folders go there), outside HOME and
    removed when the process ends; created on first use."""
    global _local_temp
    if _local_temp is None or not _local_temp.is_dir():
        _local_temp = Path(tempfile.mkdtemp(prefix="cluster-bootstrap-ansible-"))
        atexit.register(shutil.rmtree, _local_temp, ignore_errors=True)
    return _local_temp


def tool_environment() -> dict[str, str]:
    """The ANSIBLE_* settings every Ansible the tool starts runs with (the runner adds the run's own)."""
    return {
        "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
        "ANSIBLE_ROLES_PATH": ROLES_PATH,
        "ANSIBLE_LIBRARY": str(LIBRARY_DIR),
        "ANSIBLE_MODULE_UTILS": str(MODULE_UTILS_DIR),
        **{name: str(NO_PLUGINS) for name in PLUGIN_PATH_VARIABLES},
        "ANSIBLE_COLLECTIONS_PATH": _collections_root(),
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False",
        "ANSIBLE_INVENTORY_ENABLED": ",".join(INVENTORY_PLUGINS),
        "ANSIBLE_VARS_ENABLED": "host_group_vars",
        "ANSIBLE_LOCAL_TEMP": str(local_temp()),
    }


def environment_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """The first ANSIBLE_* variable of the operator's environment that would change what Ansible loads, runs or
    connects to, as one line; None when there is none."""
    environ = os.environ if environ is None else environ
    ours = tool_environment() | QUIET
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in DISPLAY_ONLY or ours.get(name) == environ[name]:
            continue
        return (f"environment variable {name} is set: it changes how Ansible runs, and bootstrap sets what Ansible "
                f"needs itself (its own configuration, plugins and connection options): unset it (`unset {name}`)")
    return None


def check_environment() -> None:
    """Refuse (InputError) an ANSIBLE_* variable bootstrap would not run with."""
    problem = environment_problem()
    if problem:
        raise InputError(problem)


@contextlib.contextmanager
def controlled_ansible(extra: Mapping[str, str] | None = None) -> Iterator[None]:
    """Ansible used in this process (reading an inventory) under the tool's environment: set before Ansible is
    first imported (its configuration is read then: the command line imports it here first), and put back
    afterwards."""
    check_environment()
    wanted = tool_environment() | QUIET | dict(extra or {})
    saved = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
