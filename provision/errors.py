"""The one exception type for failures a user can act on."""
from __future__ import annotations

from collections.abc import Mapping


class BootstrapError(Exception):
    """A failure whose message is shown to the user as is: one line naming what is wrong and the fix (one line per
    node when several nodes failed)."""

    exit_code = 1

    def __init__(self, message: str, *, nodes: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        # Node name -> how it failed, in a word or two ("failed", "unreachable", "not ready"), for the summary
        # table; empty when the failure is not one node's.
        self.nodes: dict[str, str] = dict(nodes or {})


class InputError(BootstrapError):
    """Bad input (inventory, settings, arguments), found before any node is touched."""

    exit_code = 2
