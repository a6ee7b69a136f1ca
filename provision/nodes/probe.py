"""The one probe runner: a script read on many nodes at once over SSH, one connection and one command per node.

Preflight (nodes/preflight), the doctor (nodes/doctor), the sources check (nodes/sources_check.py) and the support
bundle (diagnose/bundle.py) each plug a script and a parser in (a NodeProbe); the runner does the rest the same way
for all four: the nodes in parallel, each connected, its command run (through sudo where asked) and timed, the
node's clock read against this machine's at the round trip's midpoint, what it printed read in sections (`@@name`
lines, the script ending with `@@end` so that a cut output is told from a short one), and whatever stopped a node
turned into one finding of the one type (provision/findings.py): `ssh` (not reached), `sudo` (reached, sudo
refused) or the probe's own check (the command failed, or its output could not be read). A node that cannot be
probed never stops the others.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Generic, TypeVar

from provision.findings import Finding
from provision.inputs.inventory import Node
from provision.inputs.settings import SshSettings
from provision.nodes.ssh import CommandResult, Shell, SshError, SshShell, SudoRefused

T = TypeVar("T")
Sections = Mapping[str, list[str]]

MARK = "@@"
# Nodes probed at once (each a thread here and an SSH connection).
MAX_PARALLEL = 32
# Every section script starts with these: `section NAME` heads what follows, and the node's clock comes first.
SECTION_HEAD = f'section() {{ echo "{MARK}$1"; }}\nsection time; date +%s.%N\n'
SECTION_END = "section end\n"


def sectioned(body: str) -> str:
    """A POSIX sh script whose output the runner reads in sections: `body` (its `section NAME` lines head what
    follows), after the node's clock, and closed by the end mark."""
    return SECTION_HEAD + body.rstrip("\n") + "\n" + SECTION_END


def read_sections(text: str, mark: str = MARK) -> dict[str, list[str]]:
    """`<mark>name` lines -> name -> the lines under it (trailing white space dropped)."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(mark):
            current = found.setdefault(line[len(mark):].strip(), [])
        elif current is not None:
            current.append(line.rstrip())
    return found


def ended(sections: dict[str, list[str]]) -> dict[str, list[str]]:
    """The sections of an output that ran to its end mark; raises ValueError for one cut short."""
    if "end" not in sections:
        raise ValueError("the probe's output ended early")
    return sections


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_node_time(sections: Sections) -> float | None:
    """The node's clock (`date +%s.%N`), or None where it printed none."""
    return next((t for t in map(_float_or_none, sections.get("time", [])) if t is not None), None)


@dataclass(frozen=True)
class Clock:
    """The node's clock against this machine's. The node read it somewhere within the command's round trip: taken
    as read halfway, give or take half of it."""

    node_s: float
    offset_s: float
    uncertainty_s: float


@dataclass(frozen=True)
class Reading:
    """What one node printed, and when (this machine's clock before and after the command)."""

    node: Node
    result: CommandResult
    started: float
    finished: float

    @property
    def stdout(self) -> str:
        return self.result.stdout

    @cached_property
    def sections(self) -> dict[str, list[str]]:
        return read_sections(self.result.stdout)

    @property
    def clock(self) -> Clock | None:
        """Where the script printed the node's time (SECTION_HEAD does): the node's offset from here."""
        node_s = parse_node_time(self.sections)
        if node_s is None:
            return None
        return Clock(node_s, node_s - (self.started + self.finished) / 2, (self.finished - self.started) / 2)


@dataclass(frozen=True)
class NodeProbe(Generic[T]):
    """What to run on each node and how to read it. `parse` raises ValueError where the output cannot be read;
    `check` names the finding that says so (and that the command itself failed)."""

    check: str
    script: Callable[[Node], str]
    parse: Callable[[Reading], T]
    sudo: bool = True
    timeout_s: float = 60
    # Said before why a node could not be probed (the doctor's "not checked: ").
    unprobed: str = ""


@dataclass(frozen=True)
class Probed(Generic[T]):
    """One node's outcome: what the parser read (None where the node could not be probed), the findings about
    reaching it (ssh and sudo ok, or what stopped the probe), and how long it took, connection included."""

    node: Node
    value: T | None
    reach: tuple[Finding, ...]
    elapsed_s: float

    @property
    def problems(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.reach if f.problem)


UNREADABLE_FIX = "run it again with the node reachable and /bin/sh working"


def _probe(node: Node, probe: NodeProbe[T], shell: Shell, become_password: str | None) -> Probed[T]:
    started = time.monotonic()
    reach: list[Finding] = []

    def stopped(check: str, detail: str, fix: str) -> Probed[T]:
        why = Finding(check, node.name, "fail", probe.unprobed + detail, fix)
        return Probed(node, None, (*reach, why), time.monotonic() - started)

    try:
        try:
            shell.open()
        except SshError as exc:
            return stopped("ssh", exc.problem, exc.fix)
        reach.append(Finding("ssh", node.name, "ok", f"as {node.user}"))
        before = time.time()
        try:
            result = shell.run(probe.script(node), sudo=probe.sudo, timeout_s=probe.timeout_s)
        except SudoRefused as exc:
            return stopped("sudo", exc.problem, exc.fix)
        except SshError as exc:
            return stopped(probe.check, exc.problem, exc.fix)
        reading = Reading(node, result, before, time.time())
        if probe.sudo:
            reach.append(Finding("sudo", node.name, "ok", "sudo" if become_password is None else "sudo -S"))
        try:
            value = probe.parse(reading)
        except ValueError as exc:
            return stopped(probe.check, f"could not read what the probe printed: {exc} ({result.first_error_line()})",
                           UNREADABLE_FIX)
        return Probed(node, value, tuple(reach), time.monotonic() - started)
    finally:
        shell.close()


def probe_nodes(nodes: Iterable[Node], probe: NodeProbe[T], ssh: SshSettings, *, become_password: str | None = None,
                max_parallel: int = MAX_PARALLEL, on_probed: Callable[[Probed[T]], None] | None = None,
                shell_for: Callable[[Node], Shell] | None = None) -> dict[str, Probed[T]]:
    """Run `probe` on every node at once; node name -> its outcome, in the nodes' order. `on_probed` is told of
    each node as it is done (one at a time); `shell_for` gives another Shell than SSH (this machine, in tests)."""
    chosen: Sequence[Node] = list(nodes)
    lock = threading.Lock()

    def one(node: Node) -> Probed[T]:
        shell = shell_for(node) if shell_for else SshShell(node, ssh, become_password)
        outcome = _probe(node, probe, shell, become_password)
        if on_probed is not None:
            with lock:
                on_probed(outcome)
        return outcome

    if not chosen:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(chosen)))) as pool:
        return {outcome.node.name: outcome for outcome in pool.map(one, chosen)}
