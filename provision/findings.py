"""What a check says about one node (or the cluster), which problems block, and the same finding on many nodes
told once.

One type for every judge: preflight's, the doctor's (node side and API side), the probe runner's (a node not
reached). A judge says what it found (ok, or a problem: warn or fail, with the fix); a command that stops on
problems holds its findings to a BlockingPolicy, the one place that decides which problems stop it (preflight's:
nodes/preflight/checks.py, PREFLIGHT_POLICY). Preflight and the doctor judge many nodes with the same checks: a
problem that holds on fifty nodes alike is one problem with fifty nodes, not fifty lines. `group_findings` folds
findings that read the same (check, status, detail and fix all equal) into one FindingGroup naming every node it
holds for, in the order they came.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

# ok: nothing wrong; warn: wrong, or will be (shown, does not stop anything); fail: broken now; skip: the check
# could not run (no API yet, node unreachable), said so that a silence is never read as health.
Status = Literal["ok", "warn", "fail", "skip"]
PROBLEMS: frozenset[Status] = frozenset({"warn", "fail"})
# Shown in this order: what is broken first.
ORDER: dict[Status, int] = {"fail": 0, "warn": 1, "skip": 2, "ok": 3}


@dataclass(frozen=True)
class Finding:
    check: str
    subject: str  # a node name, or "cluster" for what the API says of the whole
    status: Status
    detail: str
    fix: str = ""

    @property
    def problem(self) -> bool:
        return self.status in PROBLEMS

    def describe(self) -> str:
        """One line: the subject, the check, what is wrong and the fix."""
        fix = f"; fix: {self.fix}" if self.fix else ""
        return f"{self.subject}: {self.check}: {self.detail}{fix}"


def ok(check: str, detail: str, subject: str = "") -> Finding:
    """A judge's verdict that nothing is wrong (the subject given where the judge knows it, else by whoever
    settles it)."""
    return Finding(check, subject, "ok", detail)


def problem(check: str, detail: str, fix: str = "", subject: str = "") -> Finding:
    """A judge's verdict that something is wrong, as a failure until a BlockingPolicy settles how badly."""
    return Finding(check, subject, "fail", detail, fix)


def worst(statuses: Iterable[Status]) -> Status:
    """The status a row of findings shows: the first of fail, warn, skip that any has, else ok."""
    found = set(statuses)
    return next((s for s in ORDER if s in found and s != "ok"), "ok")


@dataclass(frozen=True)
class BlockingPolicy:
    """Which problems stop a command: one found by a check in `blocking` fails (blocks); by a check in
    `on_control_plane`, only on a control plane; any other problem is a warning (shown, lets the command go on)."""

    blocking: frozenset[str]
    on_control_plane: frozenset[str] = frozenset()

    def status(self, check: str, control_plane: bool) -> Status:
        if check in self.blocking or (control_plane and check in self.on_control_plane):
            return "fail"
        return "warn"

    def settle(self, finding: Finding, subject: str, control_plane: bool) -> Finding:
        """The finding about `subject`, a problem given the status this policy gives its check there."""
        status = self.status(finding.check, control_plane) if finding.problem else finding.status
        return replace(finding, subject=subject, status=status, fix=finding.fix if status != "ok" else "")

    @staticmethod
    def blocked(findings: Iterable[Finding]) -> list[Finding]:
        """The findings that stop the command (failures), in their order."""
        return [f for f in findings if f.status == "fail"]


@dataclass(frozen=True)
class NodeFindings:
    """One node's row in a command's report (preflight's, the doctor's): who it is, and what the checks found there,
    in the order they ran."""

    name: str
    role: str
    address: str
    findings: tuple[Finding, ...]

    def finding(self, check: str) -> Finding | None:
        """The first finding of `check` on this node (None when it did not run here)."""
        return next((f for f in self.findings if f.check == check), None)

    @property
    def status(self) -> Status:
        return worst(f.status for f in self.findings)


@dataclass(frozen=True)
class FindingGroup:
    check: str
    status: Status
    detail: str
    fix: str
    subjects: tuple[str, ...]


# Past this many nodes a line names the first ones and how many more.
NAMED_SUBJECTS = 6


def subjects_text(subjects: Sequence[str], every: Sequence[str] = ()) -> str:
    """The nodes a finding holds for, as a line names them: "n1, n2", "all 50 nodes", "n1, ..., n6 and 9 more"."""
    if len(subjects) > 2 and set(subjects) == set(every):
        return f"all {len(subjects)} nodes"
    if len(subjects) > NAMED_SUBJECTS:
        return f"{', '.join(subjects[:NAMED_SUBJECTS])} and {len(subjects) - NAMED_SUBJECTS} more"
    return ", ".join(subjects)


def describe(group: FindingGroup, every: Sequence[str] = ()) -> str:
    """One line: the nodes, the check, what is wrong and the fix."""
    fix = f"; fix: {group.fix}" if group.fix else ""
    return f"{subjects_text(group.subjects, every)}: {group.check}: {group.detail}{fix}"


def group_findings(findings: Iterable[Finding]) -> list[FindingGroup]:
    """Findings that read the same, once each with every subject they hold for: failures first, then warnings,
    then what could not be checked; within a status, in the order first seen."""
    groups: dict[tuple[str, Status, str, str], list[str]] = {}
    for finding in findings:
        subjects = groups.setdefault((finding.check, finding.status, finding.detail, finding.fix), [])
        if finding.subject not in subjects:
            subjects.append(finding.subject)
    ordered = sorted(groups.items(), key=lambda item: ORDER[item[0][1]])
    return [FindingGroup(check, status, detail, fix, tuple(subjects))
            for (check, status, detail, fix), subjects in ordered]
