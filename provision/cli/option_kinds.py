"""The parsers of option_table.py's kinds that are more than one shape: lists, names checked against a table, the
paths with a role of one command's own. Each takes the text Click read and returns the value, or raises ValueError
with one line (Click names the option and exits 2). Imported when an option of such a kind is first given."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from provision.inputs.files import shown
from provision.inputs.local_paths import (
    LOCAL_PATH,
    creatable_directory_problem,
    new_file,
    output_directory,
    spelling_problem,
)
from provision.inputs.shapes import IPV4_UNICAST, Shape, WholeNumber, _shape

# What `bundle build` leaves in a bundle's folder (its resumable store), and `smoke-test --save` in its folder:
# with it there, a re-run into the same folder is the same work going on, not another folder's files replaced.
BUNDLE_BUILD_MARK = ".build"
SAVE_MARK = "verdict.json"
# A node as the command line names it: its inventory host name or its Kubernetes node name (whether the
# inventory has it is asked once it is read).
NODE = _shape("a node name", r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?",
              "letters, digits, '.', '_', '-', as the inventory names it", "worker-1")
CONTEXT = _shape("a kubeconfig context name", r"[A-Za-z0-9][A-Za-z0-9._@:/-]{0,252}",
                 "letters, digits, '.', '_', '@', ':', '/', '-'", "bootstrap-cp1")
# A Vagrant box name: owner/name (the Vagrantfile hands it to Vagrant as it is).
BOX = _shape("a Vagrant box name", r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*",
             "owner/name of letters, digits, '.', '_', '-'", "debian/bookworm64", max_length=128)
LAB_MACHINE = _shape("a lab machine name", r"lab-[a-z0-9](?:[-a-z0-9]{0,40}[a-z0-9])?",
                     "lab- and lower-case letters, digits and '-'", "lab-control-plane", max_length=48)


def whole_number(value: str, *, low: int, high: int, unit: str = "") -> int:
    return WholeNumber(low, high, unit)(value)


def _parsed(shape: Shape, value: str) -> str:
    return shape.parse(value)


def node_name(value: str) -> str:
    return _parsed(NODE, value)


def node_names(value: str) -> tuple[str, ...]:
    """Comma-separated node names, each once."""
    names = [part.strip() for part in value.split(",")]
    for name in names:
        node_name(name)
    if len(set(names)) != len(names):
        raise ValueError(f"{shown(value)} names a node twice: name each once")
    return tuple(names)


def context_name(value: str) -> str:
    return _parsed(CONTEXT, value)


def box(value: str) -> str:
    return _parsed(BOX, value)


def lab_machine(value: str) -> str:
    return _parsed(LAB_MACHINE, value)


def one_of(value: str, *, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{shown(value)} is not one of {', '.join(choices)}")
    return value


def lab_os(value: str) -> str:
    from provision.lab.boxes import lab_os_choices

    return one_of(value, choices=lab_os_choices())


def merge_target(value: str) -> Path:
    """A kubeconfig `bootstrap kubeconfig --merge` writes into: a file, existing or not, not a folder."""
    problem = spelling_problem(value)
    if problem:
        raise ValueError(problem)
    path = Path(value).expanduser()
    if path.is_dir():
        raise ValueError(f"{path} is a folder: name the kubeconfig file, e.g. {path / 'config'}")
    return path


def addresses(value: str) -> list[str]:
    """`a,b` -> [a, b], each an address as an inventory's ansible_host must be (`bootstrap init` writes them into
    hosts.ini: a space or a newline would add variables or sections of its own)."""
    from provision.inputs.inventory import address_problem

    found = [part.strip(" ") for part in value.split(",")]
    if any(not part for part in found):
        raise ValueError("an empty address in the list: write addresses separated by commas, e.g. 10.0.0.11,10.0.0.12")
    for address in found:
        problem = address_problem(address)
        if problem:
            raise ValueError(f"{shown(address)} {problem}")
    return found


def platforms(value: str) -> list[Any]:
    """Platform rows of the table (debian-12,rocky-9), each one this release supports."""
    from provision.inputs.platforms import Platform, platform_named, supported_text
    from provision.inputs.shapes import parse_platform_key

    found = []
    for key in [part.strip() for part in value.split(",") if part.strip()]:
        parse_platform_key(key)
        row = platform_named(key)
        if row is None:
            raise ValueError(f"{key} is not a platform this release knows: use one of {supported_text()}, written as "
                             "debian-12, ubuntu-24.04, rocky-9")
        if not isinstance(row, Platform):
            raise ValueError(f"{key} is refused: {row.reason}: {row.fix}")
        found.append(row)
    if not found:
        raise ValueError("name at least one platform, e.g. debian-12")
    return found


def addon_name(value: str) -> str:
    import difflib

    from provision.inputs.addons import ADDON_ORDER

    if value not in ADDON_ORDER:
        close = difflib.get_close_matches(value, ADDON_ORDER, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"add-ons are {', '.join(ADDON_ORDER)}"
        raise ValueError(f"unknown add-on {shown(value)}: {hint}")
    return value


def addon_names(value: str) -> tuple[str, ...]:
    """Comma-separated add-ons, in the order they install in."""
    from provision.inputs.addons import ADDON_ORDER

    names = [part.strip() for part in value.split(",") if part.strip()]
    for name in names:
        if name not in ADDON_ORDER:
            raise ValueError(f"{shown(name)} is not an add-on: use {', '.join(ADDON_ORDER)}")
    return tuple(name for name in ADDON_ORDER if name in names)


def phase(value: str) -> str:
    from provision.inputs.workflows import UP_PHASES

    if value not in UP_PHASES:
        raise ValueError(f"unknown phase {shown(value)}; phases are {', '.join(UP_PHASES)}")
    return value


def bind_address(value: str) -> str:
    """The IPv4 address a server listens on, as given: the nodes reach it there (a name would bind to whatever it
    resolves to here)."""
    return IPV4_UNICAST.named("an IPv4 address of this machine", "10.0.0.5").parse(value)


def state_directory(value: str) -> Path:
    problem = spelling_problem(value)
    if problem:
        raise ValueError(problem)
    path = Path(value).expanduser().absolute()
    problem = creatable_directory_problem(path)
    if problem:
        raise ValueError(problem)
    return path


def bundle_output(value: str) -> Path:
    """A bundle's folder (new, empty, or one an earlier build of it left), or FILE.tar (new, or one an earlier build
    packed from FILE.tar.d beside it)."""
    if value.endswith(".tar"):
        path = Path(value).expanduser().absolute()
        beside = path.with_name(path.name + ".d")
        output_directory(str(beside), own_mark=BUNDLE_BUILD_MARK)
        if (path.exists() or path.is_symlink()) and not (beside / BUNDLE_BUILD_MARK).is_dir():
            raise ValueError(f"{path} exists and no build of it is beside it ({beside}): name a new file")
        return path if path.exists() else new_file(value)
    return output_directory(value, own_mark=BUNDLE_BUILD_MARK)


def save_directory(value: str) -> Path:
    return output_directory(value, own_mark=SAVE_MARK)


def snapshot(value: str) -> str:
    """A snapshot's path, or its name in the cluster's state folder: a path's spelling (it is read bounded)."""
    problem = spelling_problem(value) if "/" in value or value.startswith("~") else LOCAL_PATH.problem(value)
    if problem is None and not re.fullmatch(r"[^$`*?]+", value):
        problem = f"{shown(value)} has a character a shell would have expanded: write the path itself"
    if problem:
        raise ValueError(problem)
    return value
