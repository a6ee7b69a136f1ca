"""Values handed to Ansible as data it will never evaluate.

Ansible templates the strings it is given: an extra variable or an inventory value such as
`{{ lookup('pipe', 'id') }}` would run a command on this machine when a task reads it, and ansible-core 2.19 and
2.21 still trust extra variables given on the command line. Every document the tool hands Ansible (each run's
inventory and its extra variables) is written here as YAML whose top-level mapping carries Ansible's own tag for
untrusted data, `!unsafe`: Ansible constructs everything under it as untrusted, so every string in it is used as
the text it is, whatever it holds.

The tag sits on the mapping, not on each string: Ansible resolves an `!unsafe` scalar's type again as if it were
unquoted (`!unsafe "1.30"` becomes the number 1.3), while inside an `!unsafe` mapping a quoted "1.30" stays the
string it is.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

UNSAFE_TAG = "!unsafe"


class _UnsafeRoot(dict[str, Any]):
    """The top-level mapping, to be written with the !unsafe tag."""


class _UnsafeDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """SafeDumper (libyaml's where PyYAML has it: a run's variables are large) that writes the top-level mapping
    tagged !unsafe."""


def _represent_unsafe(dumper: yaml.SafeDumper, value: _UnsafeRoot) -> yaml.MappingNode:
    return dumper.represent_mapping(UNSAFE_TAG, dict(value))


_UnsafeDumper.add_representer(_UnsafeRoot, _represent_unsafe)


def unsafe_yaml(document: Mapping[str, Any]) -> str:
    """`document` as YAML for Ansible (an inventory, an extra-variables file), nothing in it a template."""
    return yaml.dump(_UnsafeRoot(document), Dumper=_UnsafeDumper, sort_keys=False, allow_unicode=False, width=4096)
