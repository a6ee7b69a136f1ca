"""Rendering shared by commands: the live view while phases run (a playbook's table, the smoke test's pods), and
the summary table after them."""
from __future__ import annotations

from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from provision.cli.console import console
from provision.cli.invocation import carry
from provision.nodes.runner import PlaybookResult, RunProgress
from provision.phases import PipelineResult
from provision.smoke.driver import SmokeProgress
from provision.smoke.verdict import Bandwidth, TrainerMetrics

STATUS_STYLE = {"ok": "green", "failed": "bold red", "skipped": "yellow", "not run": "dim"}


def progress_table(progress: RunProgress) -> Group:
    header = Text.assemble((f"{progress.phase}", "bold cyan"), f"  {progress.elapsed:5.1f}s  ",
                           (progress.task or progress.play or "starting", "white"))
    table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
    for column in ("host", "done", "ok", "changed", "failed", "skipped"):
        table.add_column(column, justify="left" if column == "host" else "right")
    # Each node's own task: nodes move through a play at their own pace (a GPU node has the driver to install).
    table.add_column("now", no_wrap=True, overflow="ellipsis", max_width=48)
    for host in progress.hosts:
        tally = progress.tally.get(host)
        if tally is None:
            continue
        failed = "unreachable" if tally.unreachable else str(tally.failed)
        style = "red" if tally.failed or tally.unreachable else ""
        table.add_row(host, tasks_done(progress, host), str(tally.ok), str(tally.changed), failed, str(tally.skipped),
                      progress.current.get(host, ""), style=style)
    # What a host waits for (another process's package lock, a download being retried), under the table.
    notes = [Text(f"  {host} {note}", style="yellow") for host, note in progress.waiting.items()]
    return Group(header, table, *notes)


def tasks_done(progress: RunProgress, host: str) -> str:
    """`34/61`: tasks ended on the node, of about as many as the last run of this phase ran there (`34` without
    one; the count may pass it where this run does more)."""
    done = progress.done(host)
    expected = progress.expected.get(host)
    return f"{done}/{max(expected, done)}" if expected else str(done)


def progress_line(progress: RunProgress, host: str) -> str:
    """One node's progress as a plain line (no terminal): `prepare n2: 34/61 tasks, now: Install containerd`."""
    now = progress.current.get(host)
    return f"  {progress.phase} {host}: {tasks_done(progress, host)} tasks" + (f", now: {now}" if now else "")


# Without a terminal, a node's progress line is printed at most this often (and when its play ends).
PLAIN_EVERY_S = 15.0


def print_result(result: PlaybookResult) -> None:
    changed = sum(result.changed.values())
    status = ("ok", "green") if result.ok else ("FAILED", "red")
    console.print(Text.assemble(f"{result.phase}: ", status, f" in {result.elapsed_s:.1f}s, {changed} changes on "
                                f"{len(result.tally)} hosts  (log: {result.run_dir / 'run.log'})"))
    for failure in result.failures:
        console.print(Text(f"  {carry(failure.describe())}", style="red"))


class PhaseView:
    """What the operator sees while phases run: a live table for a playbook or the smoke test, status lines
    for the checks in between. Without a terminal (or with --verbose), plain lines only."""

    def __init__(self, verbose: bool) -> None:
        self.interactive = console.is_terminal and not verbose
        self.live: Live | None = None
        self.last_wait = ""
        # Host -> the wait note last printed for it (without a terminal each change is printed once).
        self.host_waits: dict[str, str] = {}
        # Without a terminal: when each node's progress line was last printed, and the play it was in then.
        self.host_printed: dict[str, float] = {}
        self.last_play = ""

    def _live(self) -> Live:
        if self.live is None:
            self.live = Live(console=console, refresh_per_second=8, transient=True)
            self.live.start()
        return self.live

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def message(self, text: str) -> None:
        text = carry(text)
        if text.startswith("waiting: "):
            # Repeated on every poll: a transient status line, printed once per change without a terminal.
            if self.interactive:
                self._live().update(Text(text, style="dim"))
            elif text != self.last_wait:
                console.print(f"  {text}", soft_wrap=True)
            self.last_wait = text
            return
        self.stop()
        console.print(Text.assemble((">", "bold cyan"), f" {text}"), soft_wrap=True)

    def playbook(self, progress: RunProgress) -> None:
        if self.interactive:
            self._live().update(progress_table(progress))
            return
        for host, note in progress.waiting.items():
            if self.host_waits.get(host) != note:
                console.print(f"  {host} {note}", markup=False, soft_wrap=True)
        self.host_waits = dict(progress.waiting)
        # A line per node every PLAIN_EVERY_S, and every node's when a play starts (a log shows where each one was).
        now = progress.elapsed
        new_play = progress.play != self.last_play
        self.last_play = progress.play
        for host in progress.hosts:
            if host not in progress.current:
                continue
            if new_play or now - self.host_printed.get(host, 0.0) >= PLAIN_EVERY_S:
                console.print(progress_line(progress, host), soft_wrap=True)
                self.host_printed[host] = now

    def smoke(self, progress: SmokeProgress) -> None:
        for line in progress.new_lines:
            (self._live().console if self.interactive else console).print(f"  {line}")
        if self.interactive:
            self._live().update(smoke_view(progress))


def smoke_view(progress: SmokeProgress) -> Group:
    hardware = f"{progress.nodes} node(s) x {progress.gpus} GPU" if progress.mode == "gpu" else f"{progress.nodes} node(s), CPU"
    header = Text.assemble(("smoke test", "bold cyan"), f"  {progress.elapsed:5.1f}s  ", (progress.stage, "white"),
                           f"  {progress.namespace}  {hardware}")
    table = Table(box=None, pad_edge=False, header_style="dim")
    for column in ("pod", "index", "node", "state"):
        table.add_column(column)
    for pod in progress.pods:
        style = "red" if "Failed" in pod.state or "BackOff" in pod.state or "Err" in pod.state else ""
        table.add_row(pod.name, pod.index or "-", pod.node or "-", pod.state, style=style)
    parts: list[Text | Table] = [header, table]
    if progress.epochs:
        done = round(20 * progress.epoch / progress.epochs)
        parts.append(Text(f"epoch {progress.epoch}/{progress.epochs}  [" + "#" * done + "." * (20 - done) + "]"))
    return Group(*parts)


def smoke_log_lines(progress: SmokeProgress) -> list[str]:
    """The trainer's new log lines, less its JSON reports (the verdict shows those as a table)."""
    return [line for line in progress.new_lines if TrainerMetrics.parse(line) is None and Bandwidth.parse(line) is None]


def print_summary(result: PipelineResult, title: str) -> None:
    table = Table(title=title, title_justify="left", box=None, pad_edge=False, header_style="bold")
    table.add_column("phase")
    table.add_column("status")
    table.add_column("time", justify="right")
    table.add_column("detail", overflow="fold")
    for outcome in result.outcomes:
        seconds = f"{outcome.seconds:.1f}s" if outcome.status in ("ok", "failed") else "-"
        detail = outcome.detail if outcome.status != "failed" else "see the error below"
        if outcome.status == "failed" and outcome.nodes:
            # Every node it failed on, by how: "failed: n2; unreachable: n3".
            kinds: dict[str, list[str]] = {}
            for node, kind in outcome.nodes.items():
                kinds.setdefault(kind, []).append(node)
            detail = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in kinds.items()) + " (see below)"
        table.add_row(outcome.name, Text(outcome.status, style=STATUS_STYLE[outcome.status]), seconds, Text(carry(detail)))
    table.add_row("total", "", f"{result.total_seconds:.1f}s", "", style="bold")
    console.print(table)
