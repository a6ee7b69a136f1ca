"""Benchmark: `bootstrap upgrade`'s own overhead on lab nodes (3 and 8), the time per node beyond the stand-in calls.

    .venv-modern/bin/python -m bench.upgrade                   # sizes 3 and 8
    .venv-modern/bin/python -m bench.upgrade --sizes 3 --write-doc

For each size: fresh lab nodes (tests/lab), one control plane and the rest workers, made at 1.35.2 with the stand-in
kubeadm, kubelet and kubectl (tests/lab/cluster.py), then `bootstrap upgrade --to 1.36 --yes
--skip-etcd-snapshot` as a user runs it. The stand-ins' own calls (every kubeadm, kubelet, kubectl and crictl call,
timed on its node) and the stand-in API server's reads of the nodes (what a real API server answers from memory) are
taken out of the whole: what is left is the orchestration's own, per node. Beside it: where that time goes (the
playbook runs, within them the package transactions, and the rest: Python, the API, the waits) and the machine's
load average, since the controller and every node share this machine's cores. Needs root (the lab).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tests.lab.cluster import KubeLab, form_cluster
from tests.lab.lab import Lab

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
SECTION = "## upgrade"
TASK_LINE = re.compile(r"^(?P<host>\S+)\t(?P<state>[^\t]+)\t(?P<task>.*) \((?P<seconds>[\d.]+)s\)$")
ELAPSED = re.compile(r"^elapsed (?P<seconds>[\d.]+)s$")
T = TypeVar("T")


@dataclass
class Result:
    size: int
    wall_s: float
    stand_in_s: float  # the stand-ins' calls on the nodes, summed
    api_reads_s: float  # the stand-in API server reading the nodes over SSH
    playbooks_s: float  # every playbook run of the upgrade, summed (they run one after another)
    packages_s: float  # within them, the package transactions (apt-get), summed over nodes
    phases: dict[str, float]
    load: tuple[float, float]

    @property
    def own_s(self) -> float:
        return self.wall_s - self.stand_in_s - self.api_reads_s

    @property
    def per_node_s(self) -> float:
        return self.own_s / self.size


class Timed:
    """Wraps the stand-in API server's reads of the nodes and adds up their time (they run in its threads)."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self.lock = threading.Lock()

    def wrap(self, function: Callable[..., T]) -> Callable[..., T]:
        def timed(*args: object) -> T:
            started = time.monotonic()
            try:
                return function(*args)
            finally:
                with self.lock:
                    self.total_s += time.monotonic() - started
        return timed


def _runs(kube: KubeLab) -> tuple[float, float]:
    """The playbook runs' elapsed time, and the package transactions' within them."""
    playbooks = packages = 0.0
    for log in (kube.state_dir / "runs").glob("*/run.log"):
        for line in log.read_text().splitlines():
            if found := ELAPSED.match(line):
                playbooks += float(found["seconds"])
            elif (found := TASK_LINE.match(line)) and found["task"].startswith("Install the missing packages (apt)"):
                packages += float(found["seconds"])
    return playbooks, packages


def measure(size: int, work: Path) -> Result:
    lab = Lab.up(size)
    try:
        kube = form_cluster(lab, work, ("n1",), tuple(f"n{i}" for i in range(2, size + 1)))
        reads = Timed()
        kube.fake.kubelet = reads.wrap(kube.fake.kubelet)
        kube.fake.api_version = reads.wrap(kube.fake.api_version)
        kube.fake.etcd_members = reads.wrap(kube.fake.etcd_members)
        before = os.getloadavg()[0]
        started = time.monotonic()
        outcome = kube.bootstrap("upgrade", "--to", "1.36", "--yes", "--skip-etcd-snapshot", "-o", "json",
                                 timeout_s=3600)
        wall = time.monotonic() - started
        after = os.getloadavg()[0]
        if outcome.code != 0:
            raise SystemExit(f"the upgrade failed on {size} nodes: {outcome.stderr[-2000:]}")
        document = json.loads(outcome.stdout)
        stand_in = sum(call.end - call.start for call in kube.calls())
        playbooks, packages = _runs(kube)
        kube.fake.server.stop()
        return Result(size, wall, stand_in, reads.total_s, playbooks, packages,
                      {p["name"]: p["seconds"] for p in document["phases"]}, (before, after))
    finally:
        lab.down()


def report(results: list[Result]) -> str:
    lines = [SECTION, "",
             "`bootstrap upgrade --to 1.36 --skip-etcd-snapshot` of a cluster made at 1.35.2 on fresh lab nodes (one "
             "control plane, the rest workers; stand-in kubeadm, kubelet and kubectl, no etcd, the stand-in API "
             "server), measured by `bench/upgrade.py` "
             f"on {time.strftime('%Y-%m-%d')} on this machine (2 cores, shared with other sessions: the load average "
             "is beside each figure). *Own* is the wall time less the stand-ins' own calls on the nodes and the stand-in "
             "API server's reads of them; per node, that divided by the nodes.", "",
             "| nodes | wall | stand-in calls | API stand-in's reads | own | own per node | playbook runs | package "
             "transactions in them | load (1 min) before, after |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.size} | {r.wall_s:.0f} s | {r.stand_in_s:.1f} s | {r.api_reads_s:.1f} s | {r.own_s:.0f} s | "
                     f"{r.per_node_s:.1f} s | {r.playbooks_s:.0f} s | {r.packages_s:.0f} s | {r.load[0]:.1f}, "
                     f"{r.load[1]:.1f} |")
    lines += ["", "Phases (seconds):", ""]
    names = list(dict.fromkeys(name for r in results for name in r.phases))
    lines.append("| phase | " + " | ".join(f"{r.size} nodes" for r in results) + " |")
    lines.append("|---|" + "---|" * len(results))
    for name in names:
        lines.append(f"| {name} | " + " | ".join(f"{r.phases.get(name, 0):.1f}" for r in results) + " |")
    return "\n".join(lines) + "\n"


def write_doc(text: str, notes: str) -> None:
    """The section replaced (or added) in docs/benchmarks.md, the notes kept after the figures."""
    doc = DOC.read_text()
    block = text + ("\n" + notes if notes else "")
    if SECTION in doc:
        start = doc.index(SECTION)
        end = doc.find("\n## ", start + len(SECTION))
        doc = doc[:start] + block + (doc[end + 1:] if end != -1 else "")
    else:
        doc = doc.rstrip("\n") + "\n\n" + block
    DOC.write_text(doc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 8])
    parser.add_argument("--write-doc", action="store_true", help="put the results into docs/benchmarks.md")
    parser.add_argument("--notes", default="", help="text kept after the figures in the doc")
    args = parser.parse_args()
    results = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix=f"bench-upgrade-{size}-") as work:
            results.append(measure(size, Path(work)))
            print(report(results), flush=True)
    if args.write_doc:
        write_doc(report(results), args.notes)


if __name__ == "__main__":
    main()
