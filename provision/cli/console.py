"""The consoles the CLI prints through: text as written, and never wrapped by the tool.

A line may hold something to copy (a `bootstrap ...` command, an inventory line to write instead, a path), and a
copy taken from a line the tool broke is not what it printed: messages are printed in soft-wrap mode, the
terminal folds them on screen and a copy gives back the one line; without a terminal (a log, a pipe, CI) each
stays one line. Tables still lay out to the width; only text printed on its own is left whole. Where a message
is wrapped on purpose for a terminal (the findings under preflight's and the doctor's tables), `wrap` keeps every
backticked command on one line.
"""
from __future__ import annotations

import re
import textwrap
from typing import Any

from rich.console import Console
from rich.text import Text

# A span in backticks: a command or a value to copy, never broken.
_QUOTED = re.compile(r"`[^`\n]*`")
# Stands for a space inside a backticked span while textwrap breaks the rest (a character no message holds).
_KEEP = "\x00"


class LiteralConsole(Console):
    """rich's Console, printing text (str, Text) in soft-wrap mode unless told otherwise."""

    def print(self, *objects: Any, soft_wrap: bool | None = None, **options: Any) -> None:
        if soft_wrap is None and all(isinstance(o, (str, Text)) for o in objects):
            soft_wrap = True
        super().print(*objects, soft_wrap=soft_wrap, **options)


def literal_console(**options: Any) -> Console:
    """A console that prints text as written: no markup, no :emoji: codes, no highlighting, no wrapping. Host names,
    paths and messages come from the user's input; styles come from Text objects, never from the text itself."""
    return LiteralConsole(markup=False, emoji=False, highlight=False, **options)


# Where progress, warnings and summaries go: stderr, so that `--output json` keeps stdout to its one document.
console = literal_console(stderr=True)


def wrap(text: str, console: Console, indent: int) -> str:
    """`text` folded to the console's width for people at a terminal, continuations indented by `indent`, each
    backticked span kept whole (on a line of its own when it is longer than the width); as it is without a
    terminal, where lines are read by programs and copied whole."""
    if not console.is_terminal:
        return text
    held = _QUOTED.sub(lambda match: match.group(0).replace(" ", _KEEP), text)
    folded = textwrap.fill(held, width=max(console.width, 40), subsequent_indent=" " * indent,
                           break_on_hyphens=False, break_long_words=False)
    return folded.replace(_KEEP, " ")


def echo_json(document: Any) -> None:
    """The one document `--output json` prints on stdout (everything else goes to stderr)."""
    import json

    import typer

    typer.echo(json.dumps(document, indent=2, default=str))


def warn(warnings: list[str]) -> None:
    """Each on stderr, one line each (never wrapped: a warning may say what to write instead), so --output json
    keeps stdout to its one document: what the inventory says that this run reads differently, what the settings
    allow that upstream no longer supports."""
    from provision.cli.invocation import carry

    for line in warnings:
        console.print(f"warning: {carry(line)}", style="bold yellow")
