"""Command-line parsers from provision/inputs/values.py, imported when an option is given rather than when the
command is declared: `bootstrap COMMAND --help` does not pay for the value types' pydantic models."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


def value(name: str) -> Callable[[str], Any]:
    """values.<name> (parse_port, parse_local_path, ...), looked up on first use; its ValueError is Click's usage
    error, as with the function itself."""
    def parse(text: str) -> Any:
        from provision.inputs import values

        return getattr(values, name)(text)

    parse.__name__ = name
    return parse
