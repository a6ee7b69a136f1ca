"""Counting a playbook run from ansible-runner's event stream: per host ok, changed, failed, skipped and
unreachable, the failures that count, the play and task under way, and what a host is waiting for (a task being
retried: another process's package lock, a download that failed transiently). Pure: events in, counts out; the
runner feeds it live and writes the log, the tests feed it recorded events."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from provision.nodes.documents import parsed, result_document

# How one task ended on one host, as the run log spells it.
ResultState = Literal["ok", "changed", "skipped", "failed (ignored)", "FAILED", "UNREACHABLE", "RETRYING"]
# The key under which the package-lock wait (playbooks/roles/packages/library/cb_package_lock.py) reports who holds a lock.
PACKAGE_LOCK_KEY = "cb_package_lock"


@dataclass
class HostTally:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    unreachable: bool = False


@dataclass(frozen=True)
class TaskFailure:
    host: str
    task: str
    message: str
    unreachable: bool = False

    def describe(self) -> str:
        kind = "unreachable" if self.unreachable else "failed"
        return f"{self.host}: {kind} at '{self.task}': {self.message}"


@dataclass(frozen=True)
class HostResult:
    """One task's result on one host."""

    host: str
    task: str
    state: ResultState
    message: str = ""  # why, for FAILED and UNREACHABLE
    duration_s: float | None = None


class LockHolder(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    lock: str | None = None
    pid: int | None = None
    command: str | None = None
    running_s: float | None = None


class PackageLock(BaseModel):
    """cb_package_lock's document (playbooks/roles/packages/library/cb_package_lock.py): is a lock held, by whom."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    held: bool = False
    holders: list[LockHolder] = []


def lock_wait_note(report: PackageLock) -> str:
    """What a host waits for, from cb_package_lock's report: the lock and the process that holds it."""
    holders = report.holders
    if not holders:
        return "waits for the package manager's lock"
    first = holders[0]
    since = f", running for {int(first.running_s)} s" if first.running_s is not None else ""
    more = f" (and {len(holders) - 1} more)" if len(holders) > 1 else ""
    return (f"waits for {first.lock}: held by pid {first.pid} ({first.command or '?'}{since})"
            f"{more}")


def retry_note(task: str, result: Mapping[str, Any]) -> str:
    """What a host waits for while a task is retried: a lock's holder, or the attempt and why the last one failed."""
    lock = parsed(PackageLock, result_document(result, PACKAGE_LOCK_KEY))
    if lock is not None and lock.held:
        return lock_wait_note(lock)
    attempt = f" (attempt {result['attempts']} of {result['retries']})" if "attempts" in result and "retries" in result \
        else ""
    return f"retrying '{task}'{attempt}: {failure_message(result)}"


# Mitogen's word for a node whose connection went away while a forked task ran there (modules that import
# module_utils of ours are forked): a lost node, as Ansible's unreachable is, not a task that failed.
MITOGEN_CONTEXT_LOST = "the respondent Context has disconnected"


def unreachable_message(result: Mapping[str, Any]) -> str:
    """Why a host became unreachable; Mitogen's long apology for a connection lost mid-task said in a few words."""
    text = failure_message(result).removeprefix("Task failed: ")
    if "Mitogen was disconnected" in text:
        original = text.split("Original error was:", 1)[1].strip() if "Original error was:" in text else ""
        return "the connection to it was lost in the middle of the task" + (f" ({original})" if original else "")
    if text == MITOGEN_CONTEXT_LOST:
        return f"the connection to it was lost in the middle of the task ({text})"
    return text


def failure_message(result: Mapping[str, Any]) -> str:
    """The one line that says why a task failed, from a module's result."""
    if result.get("censored"):
        return str(result["censored"])
    for key in ("msg", "stderr", "reason", "module_stderr", "stdout"):
        text = result.get(key)
        if text:
            lines = str(text).strip().splitlines()
            return lines[-1] if key in ("module_stderr", "stderr") else " ".join(lines)[:500]
    return "no message"


@dataclass
class EventTally:
    tally: dict[str, HostTally] = field(default_factory=dict)
    failures: list[TaskFailure] = field(default_factory=list)
    # Every host's task results, in the order they arrived.
    results: list[HostResult] = field(default_factory=list)
    play: str = ""
    task: str = ""
    # Host -> what it waits for now (the last retry's note), until its next result.
    waiting: dict[str, str] = field(default_factory=dict)
    # Host -> the task it runs now (the last one started there), for the live view's per-node line.
    current: dict[str, str] = field(default_factory=dict)

    def done(self, host: str) -> int:
        """The tasks that have ended on `host` (ok, changed, skipped or failed)."""
        tally = self.tally.get(host)
        return tally.ok + tally.skipped + tally.failed if tally else 0

    def feed(self, event: Mapping[str, Any]) -> bool:
        """Count one ansible-runner event; True when it changed the counts, the play or the task."""
        kind = event.get("event", "")
        data = event.get("event_data", {})
        if kind == "playbook_on_play_start":
            self.play = data.get("play", "")
        elif kind == "playbook_on_task_start":
            self.task = data.get("task", "")
        elif kind == "playbook_on_stats":
            self._settle(data.get("failures") or {})
        elif kind == "runner_on_start" and data.get("host"):
            # A host is known from its first task's start (the order failures are told in).
            self.tally.setdefault(data["host"], HostTally())
            self.current[data["host"]] = data.get("task", "")
        elif kind == "runner_retry" and data.get("host"):
            host, task = data["host"], data.get("task", "")
            note = retry_note(task, data.get("res") or {})
            self.tally.setdefault(host, HostTally())
            self.waiting[host] = note
            self.results.append(HostResult(host, task, "RETRYING", note))
        elif kind.startswith("runner_on_") and data.get("host"):
            result = self._count(kind, data)
            if result is None:
                return False
            self.waiting.pop(result.host, None)
            self.results.append(result)
        else:
            return False
        return True

    def _count(self, kind: str, data: Mapping[str, Any]) -> HostResult | None:
        host, task, res = data["host"], data.get("task", ""), data.get("res", {}) or {}
        tally = self.tally.setdefault(host, HostTally())
        message = ""
        state: ResultState
        if kind == "runner_on_ok":
            tally.ok += 1
            tally.changed += bool(res.get("changed"))
            state = "changed" if res.get("changed") else "ok"
        elif kind == "runner_on_skipped":
            tally.skipped += 1
            state = "skipped"
        elif kind == "runner_on_failed" and data.get("ignore_errors"):
            tally.ok += 1
            state = "failed (ignored)"
        elif kind == "runner_on_failed" and failure_message(res).removeprefix("Task failed: ") == MITOGEN_CONTEXT_LOST:
            # Ansible counts it failed (its closing stats too): the host is lost all the same.
            tally.failed += 1
            tally.unreachable = True
            message = unreachable_message(res)
            self.failures.append(TaskFailure(host, task, message, unreachable=True))
            state = "UNREACHABLE"
        elif kind == "runner_on_failed":
            tally.failed += 1
            message = failure_message(res)
            self.failures.append(TaskFailure(host, task, message))
            state = "FAILED"
        elif kind == "runner_on_unreachable":
            tally.unreachable = True
            message = unreachable_message(res)
            self.failures.append(TaskFailure(host, task, message, unreachable=True))
            state = "UNREACHABLE"
        else:
            return None
        duration = data.get("duration")
        return HostResult(host, task, state, message, float(duration) if isinstance(duration, (int, float)) else None)

    def first_failures(self) -> dict[str, TaskFailure]:
        """Each failed or unreachable host's own first cause (the failure that ended its play), in host order."""
        found: dict[str, TaskFailure] = {}
        for failure in self.failures:
            found.setdefault(failure.host, failure)
        order = list(self.tally)
        return dict(sorted(found.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)))

    def _settle(self, final_failures: Mapping[str, Any]) -> None:
        # A failure a rescue block handled is not a failure of the run: trust Ansible's final count. The
        # failures that count are a host's last ones, since a failure that counts ends the host's play.
        kept: list[TaskFailure] = []
        for host, tally in self.tally.items():
            tally.failed = int(final_failures.get(host, 0))
            own = [f for f in self.failures if f.host == host and not f.unreachable]
            kept += own[len(own) - tally.failed:] if tally.failed else []
        self.failures[:] = [f for f in self.failures if f.unreachable or f in kept]
