"""What a TAB offers beyond the commands and options Typer completes itself: phase names, add-on names, and the
node names of the inventory on the command line (or in BOOTSTRAP_INVENTORY).

A TAB must answer at once, so nothing here imports the settings models or Ansible: the inventory is skimmed
for host names (INI host lines, or YAML `hosts:` keys), not validated; a file that cannot be read offers nothing.
A command run with what was completed still checks everything.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from provision.inputs.addons import ADDON_ORDER
from provision.inputs.workflows import UP_PHASES

# Inventory files are small; a TAB reads at most this much of one.
MAX_BYTES = 1 << 20
# An INI host line: a name first, then variables (`cp1 ansible_host=10.0.0.1`); not a group header or comment.
_INI_HOST = re.compile(r"^\s*([A-Za-z0-9_.:-]+)(?:\s|$)")
# The variable that names the Kubernetes node where the inventory's host name is an address (dialects.py).
_NODE_NAME = re.compile(r"\b(?:k8s_nodename|kube_override_hostname)=(\S+)")


def phases(incomplete: str) -> list[str]:
    """The phases of `up` that start with what was typed."""
    return [name for name in UP_PHASES if name.startswith(incomplete)]


def addons(incomplete: str) -> list[str]:
    return [name for name in ADDON_ORDER if name.startswith(incomplete)]


def nodes(ctx: Any, incomplete: str) -> list[str]:
    """Node names from the inventory this command line names (-i/--inventory), else BOOTSTRAP_INVENTORY."""
    inventory = (getattr(ctx, "params", None) or {}).get("inventory") or os.environ.get("BOOTSTRAP_INVENTORY")
    if not inventory:
        return []
    return [name for name in inventory_names(Path(inventory)) if name.startswith(incomplete)]


def inventory_names(path: Path) -> list[str]:
    """The node names an inventory lists, skimmed (INI or YAML); [] when it cannot be read."""
    try:
        with path.expanduser().open("rb") as handle:
            text = handle.read(MAX_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return []
    if path.suffix in (".yml", ".yaml") or text.lstrip().startswith(("all:", "---")):
        return _yaml_names(text)
    names: list[str] = []
    section = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        if stripped.startswith("["):
            section = stripped
            continue
        # Hosts are listed in plain groups; :vars and :children sections list variables and groups.
        if section.endswith((":vars]", ":children]")):
            continue
        match = _INI_HOST.match(line)
        if match:
            named = _NODE_NAME.search(line)
            names.append(named.group(1) if named else match.group(1))
    return list(dict.fromkeys(names))


def _yaml_names(text: str) -> list[str]:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    names: list[str] = []

    def walk(group: Any) -> None:
        if not isinstance(group, dict):
            return
        hosts = group.get("hosts")
        if isinstance(hosts, dict):
            for host, variables in hosts.items():
                named = variables.get("k8s_nodename") if isinstance(variables, dict) else None
                names.append(str(named or host))
        children = group.get("children")
        if isinstance(children, dict):
            for child in children.values():
                walk(child)

    if isinstance(data, dict):
        for group in data.values():
            walk(group)
    return list(dict.fromkeys(names))
