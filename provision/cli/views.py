"""Rendering shared by commands: the live view of a playbook run and the failure summary."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from provision.nodes.runner import PlaybookResult, RunProgress

console = Console(stderr=True, highlight=False)


def progress_table(progress: RunProgress) -> Group:
    header = Text.assemble((f"{progress.phase}", "bold cyan"), f"  {progress.elapsed:5.1f}s  ",
                           (progress.task or progress.play or "starting", "white"))
    table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
    for column in ("host", "ok", "changed", "failed", "skipped"):
        table.add_column(column, justify="left" if column == "host" else "right")
    for host in progress.hosts:
        tally = progress.tally.get(host)
        if tally is None:
            continue
        failed = "unreachable" if tally.unreachable else str(tally.failed)
        style = "red" if tally.failed or tally.unreachable else ""
        table.add_row(host, str(tally.ok), str(tally.changed), failed, str(tally.skipped), style=style)
    return Group(header, table)


@contextmanager
def live_progress(verbose: bool) -> Iterator[Callable[[RunProgress], None] | None]:
    """A progress callback drawing a live table; with --verbose Ansible prints its own output instead."""
    if verbose or not console.is_terminal:
        yield None
        return
    with Live(console=console, refresh_per_second=8, transient=True) as live:
        yield lambda progress: live.update(progress_table(progress))


def print_result(result: PlaybookResult) -> None:
    changed = sum(result.changed.values())
    status = "[green]ok[/]" if result.ok else "[red]FAILED[/]"
    console.print(f"{result.phase}: {status} in {result.elapsed_s:.1f}s, {changed} changes on "
                  f"{len(result.tally)} hosts  (log: {result.run_dir / 'run.log'})")
    for failure in result.failures:
        console.print(f"  [red]{escape(failure.describe())}[/]")
