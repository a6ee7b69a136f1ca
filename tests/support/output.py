"""What a command's text output promises about its width (provision/cli/console.py): the table it draws (the header
and one row per node) fits 80 columns; its prose (warnings, problems and their fixes) is folded to the width only
at a terminal, and printed whole where there is none, as under CliRunner, for programs and copying (issue 34)."""
from __future__ import annotations

from collections.abc import Iterable


def table_lines(output: str, names: Iterable[str]) -> list[str]:
    """The header and the rows of the nodes `names` in a command's output: the lines whose first word is one."""
    firsts = {*names, "NODE"}
    return [line for line in output.splitlines() if line.split()[:1] and line.split()[0] in firsts]


def widest_table_line(output: str, names: Iterable[str]) -> int:
    """The width of the table's widest line; a table with no node's row is no table (an AssertionError)."""
    names = list(names)
    lines = table_lines(output, names)
    assert {line.split()[0] for line in lines} >= {"NODE", *names}, output
    return max(len(line) for line in lines)
