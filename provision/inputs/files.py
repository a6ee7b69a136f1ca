"""Reading the operator's files: bounded in size, text in UTF-8, YAML without surprises.

Every input file (inventory, cluster.yaml, group_vars, a private key) is read through here, so a directory, a
FIFO, a binary or UTF-16 file, a file too large to be an input, a YAML document whose aliases expand without
bound or whose mapping has a key twice, are all refused in one line that names the file, before anything else
reads it (Ansible included, whose own parser would hang on a bomb or keep the last of two keys).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from provision.errors import InputError

# Far above any real inventory or cluster.yaml (a thousand hosts take about 100 KB), far below what would take
# a parser more than a moment.
MAX_INPUT_BYTES = 2 * 1024 * 1024
# YAML nodes once every alias is expanded: a thousand hosts sharing anchored variables stay far below it; an
# alias bomb (each level repeating the one before) passes it within a few levels.
MAX_YAML_NODES = 200_000
VAULT_HEADER = "$ANSIBLE_VAULT;"
MERGE_TAG = "tag:yaml.org,2002:merge"


def shown(value: object, limit: int = 60) -> str:
    """A value from the user's input as it may appear inside a one-line message: quoted, control characters
    escaped, cut short."""
    text = repr(value) if isinstance(value, str) else repr(str(value))
    return text if len(text) <= limit else text[:limit - 4] + "...'"


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for a message ("a directory", "a named pipe", ...)."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a regular file"


def read_bytes(path: Path, what: str, fix: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The content of a regular file of at most `limit` bytes; anything else is refused in one line."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InputError(f"{path}: {what} not found; {fix}") from None
    except OSError as exc:
        raise InputError(f"{path}: {what} cannot be opened ({exc.strerror}); {fix}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path}: {what} is {file_kind(info.st_mode)}, not a file; {fix}")
    if info.st_size > limit:
        raise InputError(f"{path}: {what} is {info.st_size} bytes, more than the {limit} it may have: "
                         "is it the right file?")
    try:
        # O_NONBLOCK: a file swapped for a FIFO after the check must not hang the read.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise InputError(f"{path}: {what} cannot be read ({exc.strerror}): check its permissions") from None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{path}: {what} is more than the {limit} bytes it may have: is it the right file?")
    return data


def _looks_like_utf16(sample: bytes) -> bool:
    """ASCII text saved as UTF-16 without a byte-order mark: every other byte is zero, and only those."""
    if len(sample) < 4:
        return False
    even, odd = sample[0::2], sample[1::2]
    return (not any(odd) and all(even)) or (not any(even) and all(odd))


def decode_text(data: bytes, path: Path, what: str) -> str:
    """UTF-8 text (a UTF-8 byte-order mark is dropped); UTF-16, UTF-32 and binary content are refused."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or _looks_like_utf16(data[:64]):
        raise InputError(f"{path}: {what} is UTF-16 (or UTF-32) text: save it as UTF-8")
    if b"\0" in data:
        raise InputError(f"{path}: {what} is binary, not text: pass the {what} itself")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise InputError(f"{path}: {what} is not UTF-8 text (line {line}): save it as UTF-8") from None
    return text.removeprefix("\ufeff")


def read_text(path: Path, what: str, fix: str, limit: int = MAX_INPUT_BYTES) -> str:
    return decode_text(read_bytes(path, what, fix, limit), path, what)


def refuse_vault_file(text: str, path: Path, what: str) -> None:
    if text.lstrip().startswith(VAULT_HEADER):
        raise InputError(f"{path}: {what} is encrypted with ansible-vault and bootstrap has no vault password: "
                         f"decrypt it (`ansible-vault decrypt {path}`)")


# --- YAML ------------------------------------------------------------------------------------------------------

class YamlLimitError(yaml.YAMLError):
    """A document this tool will not construct (a key given twice, aliases that expand without bound)."""

    def __init__(self, problem: str, node: Node | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = node.start_mark if node is not None else None


class RefusedYamlError(InputError):
    """YAML that parses but is refused (a duplicate key, aliases past the bound): it is YAML, whatever the suffix."""


class VaultValue:
    """An Ansible `!vault` value: kept as a marker so the caller can refuse it by name."""


def expanded_size(root: Node, limit: int) -> int:
    """How many nodes the document has once every alias is expanded (shared nodes counted each time they
    are reached); raises YamlLimitError past `limit`, or on an alias inside its own anchor."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        if children_done:
            in_progress.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[key] > limit:
                raise YamlLimitError(f"aliases expand it to more than {limit} values (an alias bomb?): "
                                     "write the values out, or share fewer of them", node)
            continue
        if key in in_progress:
            raise YamlLimitError("an alias refers to the anchor it is inside: the value would be infinite", node)
        in_progress.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in in_progress:
                raise YamlLimitError("an alias refers to the anchor it is inside: the value would be infinite",
                                     child)
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader that refuses a mapping key given twice and a document whose aliases expand past
    MAX_YAML_NODES; Ansible's `!vault` and `!unsafe` tags are read (as a VaultValue marker and as text)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._checked_mappings: set[int] = set()

    def construct_document(self, node: Node) -> Any:
        expanded_size(node, MAX_YAML_NODES)
        return super().construct_document(node)

    def flatten_mapping(self, node: MappingNode) -> None:
        # Checked before merge keys (`<<`) are folded in: a key that overrides a merged one is not a duplicate.
        if id(node) not in self._checked_mappings:
            self._checked_mappings.add(id(node))
            seen: dict[Any, Node] = {}
            for key_node, _value in node.value:
                if key_node.tag == MERGE_TAG or not isinstance(key_node, ScalarNode):
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    raise YamlLimitError(f"key {shown(key)} appears twice in one mapping (lines "
                                         f"{seen[key].start_mark.line + 1} and {key_node.start_mark.line + 1}): "
                                         "keep one", key_node)
                seen[key] = key_node
        super().flatten_mapping(node)


def _vault(loader: BoundedLoader, node: Node) -> VaultValue:
    return VaultValue()


def _unsafe(loader: BoundedLoader, node: Node) -> Any:
    if isinstance(node, ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)  # type: ignore[arg-type]


BoundedLoader.add_constructor("!vault", _vault)
BoundedLoader.add_constructor("!unsafe", _unsafe)


def parse_yaml(text: str, source: str) -> Any:
    """One YAML document through BoundedLoader; any problem is one InputError line naming `source` and the line."""
    try:
        return yaml.load(text, Loader=BoundedLoader)  # a SafeLoader (bounded)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if isinstance(exc, YamlLimitError):
            raise RefusedYamlError(f"{source}: refused YAML{where}: {problem}") from None
        raise InputError(f"{source}: not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise InputError(f"{source}: not valid YAML: nested too deeply") from None
    except ValueError as exc:
        # PyYAML converts scalars with Python's own parsers: an integer of thousands of digits ends here.
        raise InputError(f"{source}: not valid YAML: {str(exc).split(':')[0]}") from None


def find_vault_value(data: Any, limit: int = MAX_YAML_NODES) -> str | None:
    """The dotted path of the first `!vault` value in parsed YAML, or None."""
    stack: list[tuple[str, Any]] = [("", data)]
    visited = 0
    while stack and visited < limit:
        where, value = stack.pop()
        visited += 1
        if isinstance(value, VaultValue):
            return where or "the document"
        if isinstance(value, dict):
            stack += [(f"{where}.{key}" if where else str(key), item) for key, item in value.items()]
        elif isinstance(value, list):
            stack += [(f"{where}[{index}]", item) for index, item in enumerate(value)]
    return None

