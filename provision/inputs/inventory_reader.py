"""Reading an inventory file into plain data (inventory_model.InventoryData): the file read safely (size,
encoding, YAML bounds: files.py), bounded in hosts and group depth before Ansible resolves anything, then parsed by
Ansible's own INI or YAML plugin under the tool's control, silently, and every host's variables resolved as
Ansible resolves them. Ansible's objects stay in this module; what leaves it is str, int, float, bool, list and
dict (and files.VaultValue for a vault-encrypted value, refused by name by the builder).
"""
from __future__ import annotations

import contextlib
import io
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inputs.ansible_control import controlled_ansible
from provision.inputs.ansible_variables import MAGIC
from provision.inputs.files import (
    RefusedYamlError,
    VaultValue,
    find_vault_value,
    parse_yaml,
    read_text,
    refuse_vault_file,
    shown,
)
from provision.inputs.host_values import vault_refusal
from provision.inputs.inventory_model import InventoryData, InventoryFormat

YAML_SUFFIXES = (".yml", ".yaml", ".json")
# The yaml inventory plugin takes a file by its suffix; these, or none, are the ones it takes by default.
ANSIBLE_YAML_SUFFIXES = ("", *YAML_SUFFIXES)
# Kubernetes' largest supported cluster.
MAX_HOSTS = 5000
# Groups nested deeper than this are no inventory a person wrote (kubespray's deepest is 3): refused before Ansible
# resolves them, which would take minutes on an inventory at MAX_HOSTS.
MAX_GROUP_DEPTH = 16
# What Ansible itself adds to a host's variables (never the inventory's).
ANSIBLE_MAGIC = MAGIC | {"groups", "group_names", "hostvars", "omit", "inventory_hostname", "inventory_hostname_short",
                         "inventory_file", "inventory_dir", "playbook_dir", "play_hosts", "role_names", "environment"}


def ansible_inventory_env(path: Path, inventory_format: InventoryFormat) -> dict[str, str]:
    """Environment under which Ansible reads this inventory as we did: a YAML inventory whose suffix the yaml
    plugin would not take (hosts.txt) is named to it."""
    if inventory_format == "yaml" and path.suffix not in ANSIBLE_YAML_SUFFIXES:
        return {"ANSIBLE_YAML_FILENAME_EXT": ",".join([*YAML_SUFFIXES, path.suffix])}
    return {}


def _inventory_format(path: Path, text: str) -> tuple[InventoryFormat, Any]:
    """YAML when the suffix says so or the content is a YAML mapping (Ansible's YAML inventories are), else INI;
    with the parsed YAML. A YAML inventory is parsed here once with the bounded loader, so Ansible never meets a
    bomb or a duplicate."""
    first = next((line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith(("#", ";"))),
                 "")
    if path.suffix in YAML_SUFFIXES:
        data = parse_yaml(text, str(path))
    elif first.startswith("[") and first.endswith("]"):
        # An INI section header first: no YAML mapping (parsing it as YAML would only cost time on a large file).
        return "ini", None
    else:
        try:
            data = parse_yaml(text, str(path))
        except RefusedYamlError:
            raise
        except InputError:
            return "ini", None
        if not isinstance(data, dict):
            return "ini", None
    vault = find_vault_value(data)
    if vault:
        raise vault_refusal(str(path), vault)
    return "yaml", data


def _pattern_count(name: str) -> int:
    """How many hosts an Ansible host pattern such as `gpu[01:16]-[a:b]` stands for (1 without a range)."""
    count = 1
    for bounds in re.findall(r"\[([^\]]*)\]", name):
        parts = bounds.split(":")
        step = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else 1 if len(parts) == 2 else 0
        if step == 0:
            continue  # a malformed range: Ansible's parser names it
        if parts[0].isdigit() and parts[1].isdigit():
            count *= max(0, (int(parts[1]) - int(parts[0])) // step + 1)
        elif len(parts[0]) == 1 and len(parts[1]) == 1:
            count *= max(0, (ord(parts[1]) - ord(parts[0])) // step + 1)
    return count


def _host_count(text: str, data: Any) -> int:
    """Hosts the inventory names, ranges expanded, counted before Ansible expands them (a range such as
    w[1:100000000] would hold it for minutes)."""
    if data is None:
        count, hosts_section = 0, True
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("["):
                hosts_section = ":" not in line.split("]", 1)[0] or line.split("]", 1)[0].endswith(":hosts")
            elif line and not line.startswith(("#", ";")) and hosts_section:
                count += _pattern_count(line.split()[0])
        return count
    count, stack = 0, [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "hosts" and isinstance(item, dict):
                    count += sum(_pattern_count(str(name)) for name in item)
                stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)
    return count


def _ini_duplicate_problem(text: str) -> str | None:
    """A variable an INI inventory sets twice for one host or group, with the last one silently winning."""
    section, kind = "ungrouped", "hosts"
    group_vars: dict[tuple[str, str], int] = {}
    host_vars: dict[tuple[str, str], tuple[int, str]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        header = re.match(r"^\[([^\]]*)\]", line)
        if header:
            section, _, kind = header.group(1).partition(":")
            kind = kind or "hosts"
            continue
        if kind == "vars":
            key = line.split("=", 1)[0].strip()
            if (section, key) in group_vars:
                return (f"[{section}:vars] sets {shown(key)} twice (lines {group_vars[section, key]} and {number}): "
                        "keep one")
            group_vars[section, key] = number
        elif kind == "hosts":
            try:
                # shlex only where the line has what shlex reads (it is the slow part on a large inventory).
                words = shlex.split(line, comments=True) if any(c in line for c in "'\"\\#") else line.split()
            except ValueError:
                continue  # Ansible's parser names the unbalanced quote
            for word in words[1:]:
                key, sep, value = word.partition("=")
                before = host_vars.get((words[0], key))
                if sep and before and before[1] != value:
                    return (f"host {shown(words[0])} sets {key} twice, differently (lines {before[0]} and {number}): "
                            "keep one")
                if sep:
                    host_vars[words[0], key] = (number, value)
    return None


@contextlib.contextmanager
def _ansible_quietly(environment: dict[str, str]) -> Iterator[None]:
    """Ansible under the tool's control (ansible_control.py), and silent: it prints its warnings (and some errors)
    itself, and we report one line of our own instead."""
    with controlled_ansible(environment), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        yield


def _plain(value: Any, depth: int = 0) -> Any:
    """Ansible's values (its tagged strings and numbers, its lists and mappings) as the plain Python values they
    stand for, so that nothing downstream meets Ansible's types (yaml.safe_dump cannot write them); vault values
    stay as they are, to be refused by name."""
    from ansible.parsing.vault import EncryptedString

    if depth > 64:
        raise InputError("a variable is nested more than 64 levels deep: no inventory needs that")
    if isinstance(value, EncryptedString):
        return VaultValue()  # refused by name by the builder (files.find_vault_value)
    if value is None:
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {_plain(key, depth + 1): _plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    return value


def _first_line(exc: BaseException) -> str:
    lines = str(getattr(exc, "message", "") or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _inventory_manager(path: Path, inventory_format: InventoryFormat) -> tuple[Any, Any]:
    """Ansible's InventoryManager over this one file, read by the one plugin of its format: no inventory script (an
    executable file is not run), no `plugin:` file, no other source; InputError with the plugin's own words if it
    cannot read it."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import inventory_loader

    failures: list[BaseException] = []

    class OneFormat(InventoryManager):
        def _fetch_inventory_plugins(self) -> list[Any]:
            plugin = inventory_loader.get(inventory_format)
            parse = plugin.parse

            def parse_noting_failure(*args: Any, **kwargs: Any) -> Any:
                try:
                    return parse(*args, **kwargs)
                except Exception as exc:
                    failures.append(exc)
                    raise

            plugin.parse = parse_noting_failure
            return [plugin]

    loader = DataLoader()
    try:
        manager = OneFormat(loader=loader, sources=[str(path.resolve())])
    except Exception as exc:  # noqa: BLE001 - any parser failure becomes the user's one-line message
        failures.append(exc)
    if failures:
        raise InputError(f"{path}: not a valid Ansible inventory: {_first_line(failures[0])}") from None
    return manager, loader


def _check_vars_files(path: Path, names: set[str]) -> None:
    """The group_vars and host_vars files Ansible will read for these groups and hosts, read safely first."""
    from ansible.parsing.dataloader import DataLoader

    loader = DataLoader()
    for folder in ("group_vars", "host_vars"):
        base = path.parent / folder
        if not base.is_dir():
            continue
        for name in sorted(names):
            for found in loader.find_vars_files(str(base), name):
                file = Path(found)
                text = read_text(file, f"{folder} file", "remove it or make it a YAML file")
                refuse_vault_file(text, file, f"{folder} file")
                vault = find_vault_value(parse_yaml(text, str(file)))
                if vault:
                    raise vault_refusal(str(file), vault)


VARS_FILE_SUFFIXES = ("", ".yml", ".yaml", ".json")


def unread_vars_files(path: Path, groups: set[str], hosts: set[str]) -> list[str]:
    """A line for each file or folder under group_vars/ or host_vars/ that no group or host of the inventory reads
    (Ansible reads `group_vars/<group>` only for a group the inventory has): the run reads exactly what
    validation read, so such a file changes nothing, and is said rather than left to look in effect."""
    lines = []
    for folder, names, what in (("group_vars", groups, "group"), ("host_vars", hosts, "host")):
        base = path.parent / folder
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            name = entry.name if entry.is_dir() else entry.name.rsplit(".", 1)[0] if entry.suffix in \
                VARS_FILE_SUFFIXES else None
            if name is None or name.startswith(".") or name in names:
                continue
            own = " (it is the name of a group bootstrap adds for its own plays, which takes no variables)" \
                if name in ("control_plane", "first_control_plane", "workers", "k8s_cluster") else ""
            lines.append(f"{entry}: not read: the inventory has no {what} {shown(name)}{own}; put these variables "
                         f"where its hosts are (group_vars/all.yml, or the group they are in)")
    return lines


def _group_depth(text: str, data: Any) -> int:
    """How deep groups nest (a group in `all` is 1), read from the text before Ansible resolves anything: INI's
    [group:children] sections, or YAML's children mappings."""
    if data is None:
        children: dict[str, list[str]] = {}
        section = None
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("["):
                name = line[1:].split("]", 1)[0]
                section = name.removesuffix(":children") if name.endswith(":children") else None
                if section is not None:
                    children.setdefault(section, [])
            elif section is not None and line and not line.startswith(("#", ";")):
                children[section].append(line.split()[0])
        depths: dict[str, int] = {}

        def depth(group: str, seen: frozenset[str]) -> int:
            if group in depths:
                return depths[group]
            if group in seen or len(seen) > MAX_GROUP_DEPTH:
                return len(seen) + 1  # a cycle, or past the limit: deep enough to refuse (Ansible names cycles)
            found = 1 + max((depth(child, seen | {group}) for child in children.get(group, [])), default=0)
            depths[group] = found
            return found

        return max((depth(group, frozenset()) for group in children), default=1)
    deepest, stack = 0, [(data, 0)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "children" and isinstance(item, dict):
                    deepest = max(deepest, level + 1)
                    stack += [(group, level + 1) for group in item.values() if group is not None]
                elif key not in ("hosts", "vars"):
                    stack.append((item, level))
    return deepest


def _variables_of(manager: Any, loader: Any, path: Path) -> Callable[[Any], dict[str, Any]]:
    """A host's variables as Ansible's VariableManager resolves an inventory's (the `all` group, the host's groups in
    Ansible's order, each with its group_vars files, in VARIABLE_PRECEDENCE's order; then the host's own and its
    host_vars file), with Ansible's own functions; what a set of groups gives is worked out once for every host of
    that set, not once per host (VariableManager would also clean a fact cache per host: at MAX_HOSTS, seconds)."""
    import ansible.constants as constants
    from ansible.inventory.helpers import get_group_vars, sort_groups
    from ansible.utils.vars import combine_vars
    from ansible.vars.plugins import get_vars_from_inventory_sources

    sources = [str(path.resolve())]
    all_group = manager.groups["all"]
    # host_group_vars is the one vars plugin (ansible_control.py): with no host_vars folder beside the inventory a
    # host's own plugin variables are none, and asking the plugin once per host costs seconds at MAX_HOSTS.
    host_files = (path.parent / "host_vars").is_dir() or constants.VARIABLE_PLUGINS_ENABLED != ["host_group_vars"]
    by_groups: dict[tuple[str, ...], dict[str, Any]] = {}

    # VariableManager's own choice of stage: vars plugins run on demand (at task time) unless configured otherwise.
    stage = "task" if constants.RUN_VARS_PLUGINS == "demand" else "inventory"

    def plugins(entities: list[Any]) -> dict[str, Any]:
        return dict(get_vars_from_inventory_sources(loader, sources, entities, stage))

    def of_groups(groups: list[Any]) -> dict[str, Any]:
        parts: dict[str, Callable[[], Mapping[str, Any]]] = {
            "all_inventory": all_group.get_vars, "all_plugins_inventory": lambda: plugins([all_group]),
            "groups_inventory": lambda: get_group_vars(groups), "groups_plugins_inventory": lambda: plugins(groups),
        }
        data: dict[str, Any] = {}
        for entry in constants.VARIABLE_PRECEDENCE:
            if entry == "plugins_by_groups":
                for group in groups:
                    data = combine_vars(data, plugins([group]))
            elif entry in parts:
                data = combine_vars(data, parts[entry]())
        return data

    def resolve(host: Any) -> dict[str, Any]:
        groups = sort_groups([group for group in host.get_groups() if group.name != "all"])
        key = tuple(str(group.name) for group in groups)
        if key not in by_groups:
            by_groups[key] = of_groups(groups)
        own = combine_vars(by_groups[key], host.get_vars())
        return dict(combine_vars(own, plugins([host])) if host_files else own)

    return resolve


def read_inventory(path: Path) -> InventoryData:
    """The inventory at `path` as plain data. Raises InputError (one line naming the file) on what cannot be read."""
    text = read_text(path, "inventory file", "pass an existing INI or YAML inventory")
    refuse_vault_file(text, path, "inventory file")
    inventory_format, data = _inventory_format(path, text)
    hosts = _host_count(text, data)
    if hosts > MAX_HOSTS:
        raise InputError(f"{path}: names {hosts} hosts (host ranges expanded), more than the {MAX_HOSTS} nodes of "
                         "Kubernetes' largest supported cluster: check the ranges")
    depth = _group_depth(text, data)
    if depth > MAX_GROUP_DEPTH:
        raise InputError(f"{path}: groups are nested {depth} deep, more than the {MAX_GROUP_DEPTH} bootstrap reads: "
                         "put the hosts in [control_plane] and [workers] (or their aliases) directly")
    if inventory_format == "ini":
        problem = _ini_duplicate_problem(text)
        if problem:
            raise InputError(f"{path}: {problem}")
    with _ansible_quietly(ansible_inventory_env(path, inventory_format)):
        from ansible.errors import AnsibleError

        manager, loader = _inventory_manager(path, inventory_format)
        groups, host_names = set(manager.groups), {str(host.name) for host in manager.get_hosts()}
        _check_vars_files(path, groups | host_names)
        try:
            found = _plain_data(path, inventory_format, manager, loader)
        except AnsibleError as exc:
            raise InputError(f"{path}: Ansible cannot read the inventory: {_first_line(exc)}") from None
    return InventoryData(path=found.path, inventory_format=found.inventory_format, groups=found.groups,
                         hosts=found.hosts, host_groups=found.host_groups, variables=found.variables,
                         warnings=tuple(unread_vars_files(path, groups, host_names)))


def _plain_data(path: Path, inventory_format: InventoryFormat, manager: Any, loader: Any) -> InventoryData:
    """Ansible's InventoryManager as InventoryData."""
    variables_of = _variables_of(manager, loader, path)
    hosts = manager.get_hosts()
    # The inventory's own variables (Ansible adds its magic ones: `groups` alone lists every host, and walking it for
    # every host would take minutes at MAX_HOSTS), as plain values: the model holds str, int and dict, never
    # Ansible's tagged types.
    return InventoryData(
        path=path, inventory_format=inventory_format,
        groups={str(name): tuple(str(h.name) for h in group.get_hosts()) for name, group in manager.groups.items()},
        hosts=tuple(str(host.name) for host in hosts),
        host_groups={str(host.name): tuple(str(g.name) for g in host.get_groups()) for host in hosts},
        variables={str(host.name): _plain({key: value for key, value in variables_of(host).items()
                                            if key not in ANSIBLE_MAGIC and not key.startswith("ansible_play")})
                   for host in hosts})
