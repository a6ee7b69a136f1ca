"""Values handed to Ansible as data it will never evaluate.

Ansible templates the strings it is given: an extra variable or an inventory value such as
`{{ lookup('pipe', 'id') }}` would run a command on this machine when a task reads it, and ansible-core 2.19 and
2.21 still trust extra variables given on the command line. Every value the tool hands Ansible (each run's
inventory and its extra variables) is written here as YAML in which every string carries Ansible's own tag for
untrusted data, `!unsafe`: Ansible then uses it as the text it is, whatever it holds. Mapping keys stay plain (the
tool's own names, and node names that the inventory's checks allow only letters, digits, '.' and '-' in).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

UNSAFE_TAG = "!unsafe"


class _Unsafe(str):
    """A string to be written with the !unsafe tag."""


class _UnsafeDumper(yaml.SafeDumper):
    """SafeDumper that writes _Unsafe strings tagged !unsafe (double-quoted: any character survives)."""


def _represent_unsafe(dumper: yaml.SafeDumper, value: _Unsafe) -> yaml.ScalarNode:
    return dumper.represent_scalar(UNSAFE_TAG, str(value), style='"')


_UnsafeDumper.add_representer(_Unsafe, _represent_unsafe)


def _marked(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        return _Unsafe(value)
    if isinstance(value, Mapping):
        return {str(key): _marked(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_marked(item) for item in value]
    raise TypeError(f"internal: {type(value).__name__} is not data Ansible can be given")


def unsafe_yaml(document: Mapping[str, Any]) -> str:
    """`document` as YAML for Ansible (an inventory, an extra-variables file), every string tagged !unsafe."""
    return yaml.dump(_marked(document), Dumper=_UnsafeDumper, sort_keys=False, allow_unicode=False, width=4096)
