"""Findings under a table, for preflight and the doctor alike: each one once, with the nodes it holds for.

    FAIL n2: kubelet: not running (inactive): ...
         fix: `systemctl start kubelet` on the node ...
    warn all 3 nodes: containerd_1x: containerd 1.6.20 (installed) ...
         fix: ...

A finding that holds on many nodes names them (the first few and how many more when they are many; every one in
-o json); one that holds on every node says so. On a terminal lines wrap to its width, continuations indented
under their line, never inside a backticked command; without one each stays a line (cli/console.py). Every
`bootstrap ...` command in them carries this run's options (cli/invocation.py).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from provision.cli.console import wrap
from provision.cli.invocation import carry
from provision.findings import Finding, FindingGroup, Status, group_findings, subjects_text

MARK: dict[Status, str] = {"ok": "ok", "warn": "warn", "fail": "FAIL", "skip": "skip"}
STYLE: dict[Status, str] = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def render_findings(findings: Iterable[Finding], console: Console, *, every: Sequence[str] = ()) -> list[FindingGroup]:
    """Print the problems (and the checks that could not run) of `findings`, grouped; `every`: all the nodes the
    run was about (a finding on each of them says "all N nodes"). Returns the groups printed."""
    groups = [g for g in group_findings(findings) if g.status != "ok"]
    for group in groups:
        mark = MARK[group.status]
        line = Text(wrap(carry(f"{mark} {subjects_text(group.subjects, every)}: {group.check}: {group.detail}"),
                         console, 5))
        line.stylize(STYLE[group.status], 0, len(mark))
        console.print(line)
        if group.fix:
            console.print(Text(wrap(carry(f"     fix: {group.fix}"), console, 10), style="dim"))
    return groups


def groups_document(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    """The grouped problems as -o json gives them (every node named)."""
    return [{"check": g.check, "status": g.status, "detail": carry(g.detail), "fix": carry(g.fix),
             "nodes": list(g.subjects)} for g in group_findings(findings) if g.status != "ok"]
