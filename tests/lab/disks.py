"""How full a lab node's disks are, by `df` on the node itself.

A lab node's filesystems are this host's: on a host fuller than the doctor's marks (80% for /var/lib/containerd)
every node's disk check rightly warns. The doctor's lab tests expect that finding exactly where `df` on the node
says so, measured before and after the doctor ran; a node whose fullness crossed a mark in between is not judged.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from provision.nodes.doctor.checks import DISK_LIMITS, INODE_LIMITS
from tests.lab.lab import LabNode

# One line per existing path: the path, then Use% and IUse% as df prints them ("-" where a filesystem has no inodes).
_DF = ("for p in {paths}; do [ -d \"$p\" ] && echo \"$p $(df --output=pcent \"$p\" | tail -n 1) "
       "$(df --output=ipcent \"$p\" | tail -n 1)\"; done; true")


def _percent(text: str) -> int:
    return int(text.rstrip("%")) if text.rstrip("%").isdigit() else 0


def past_marks(node: LabNode) -> bool:
    """Whether one of the doctor's disk paths on the node is at or past its warn mark, in space or in inodes."""
    listing = node.ssh(_DF.format(paths=" ".join(DISK_LIMITS))).stdout
    for line in listing.splitlines():
        path, space, inodes = line.split()
        if _percent(space) >= DISK_LIMITS[path][0] or _percent(inodes) >= INODE_LIMITS[0]:
            return True
    return False


@dataclass(frozen=True)
class Fullness:
    """Nodes past the marks both before and after (their disk check must warn or fail), and nodes that crossed a
    mark while the doctor ran (their disk check is not judged)."""
    full: frozenset[str]
    crossing: frozenset[str]

    def judged_ok(self, node: str) -> bool:
        return node not in self.full and node not in self.crossing


def measure(nodes: Iterable[LabNode]) -> dict[str, bool]:
    return {node.name: past_marks(node) for node in nodes}


def between(before: dict[str, bool], after: dict[str, bool]) -> Fullness:
    return Fullness(frozenset(n for n in before if before[n] and after[n]),
                    frozenset(n for n in before if before[n] != after[n]))
