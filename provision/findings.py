"""What a check says about one node (or the cluster), and the same finding on many nodes told once.

Preflight and the doctor judge many nodes with the same checks: a problem that holds on fifty nodes alike is one
problem with fifty nodes, not fifty lines. `group_findings` folds findings that read the same (check, status,
detail and fix all equal) into one FindingGroup naming every node it holds for, in the order they came.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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
