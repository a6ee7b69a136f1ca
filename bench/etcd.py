"""Benchmark: `bootstrap etcd snapshot` and `bootstrap etcd restore` on a real 3-member etcd (tests/lab/etcd.py:
Debian's etcd 3.5 under systemd on lab nodes, kubeadm's layout), for databases of a few sizes.

    .venv-modern/bin/python -m bench.etcd                    # sizes 0 and 32 MB of values, 2 runs each
    .venv-modern/bin/python -m bench.etcd --sizes 0 8 64 --runs 3

For each size: the values written (10 KB each, incompressible), then `bootstrap etcd snapshot --output json` and
`bootstrap etcd restore --yes --output json` run as a user runs them, each timed whole (wall clock, from the
command's start to its exit) and by phase (the command's own JSON). Beside each: the database's size and this
machine's load average over the run, since the controller and the three nodes share its cores. Needs root (the
lab). Goals are read, not asserted. Prints a markdown table for docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.lab.etcd import LabEtcd, cluster_config, control_plane_inventory
from tests.lab.lab import Lab

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Run:
    command: str
    size_mb: int
    db_bytes: int
    wall_s: float
    phases: dict[str, float] = field(default_factory=dict)
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average at the start and at the end


def bootstrap(args: list[str], env: dict[str, str]) -> tuple[float, dict[str, object]]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "provision", *args, "--output", "json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"bootstrap {' '.join(args)} failed: {done.stderr[-2000:]}")
    return wall, json.loads(done.stdout)


def measure(sizes: list[int], runs: int) -> list[Run]:
    results: list[Run] = []
    with Lab.up(3) as lab, tempfile.TemporaryDirectory() as work:
        etcd = LabEtcd.up(lab)
        inventory = control_plane_inventory(lab, Path(work) / "hosts.ini")
        config = cluster_config(lab, Path(work) / "cluster.yaml", snapshot_keep=runs + 1)
        env = os.environ | {"BOOTSTRAP_STATE_DIR": str(Path(work) / "state")}
        common = ["--inventory", str(inventory), "--config", str(config)]
        n1 = lab.node("n1")
        written = 0
        for size in sorted(sizes):
            if size > written:
                etcd.bulk(n1, size - written, prefix=f"/bench/{size}/")
                written = size
            for _ in range(runs):
                load = os.getloadavg()[0]
                wall, document = bootstrap(["etcd", "snapshot", *common], env)
                snapshot = document["snapshot"]
                assert isinstance(snapshot, dict)
                results.append(Run("snapshot", size, int(snapshot["size"]), wall, phase_times(document),
                                   (load, os.getloadavg()[0])))
                load = os.getloadavg()[0]
                wall, document = bootstrap(["etcd", "restore", str(snapshot["path"]), "--yes", *common], env)
                results.append(Run("restore", size, int(snapshot["size"]), wall, phase_times(document),
                                   (load, os.getloadavg()[0])))
    return results


def phase_times(document: dict[str, object]) -> dict[str, float]:
    phases = document.get("phases")
    return {str(p["name"]): float(p["seconds"]) for p in phases if isinstance(p, dict)} if isinstance(phases, list) \
        else {}


def size_text(size: int) -> str:
    """The database's size, in KiB below a MiB (an empty etcd's is a few dozen KiB)."""
    return f"{size / (1 << 20):.1f} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def table(results: list[Run]) -> str:
    lines = ["| command | values | database | runs | wall (median, min-max) | phases (median s) | load avg (1 min) |",
             "|---|---|---|---|---|---|---|"]
    keys = sorted({(r.command, r.size_mb) for r in results}, key=lambda k: (k[0] != "snapshot", k[1]))
    for command, size in keys:
        runs = [r for r in results if (r.command, r.size_mb) == (command, size)]
        walls = [r.wall_s for r in runs]
        names = list(runs[0].phases)
        phases = ", ".join(f"{name} {statistics.median(r.phases.get(name, 0.0) for r in runs):.1f}" for name in names)
        loads = [value for r in runs for value in r.load]
        lines.append(f"| {command} | {size} MB | {size_text(runs[0].db_bytes)} | {len(runs)} | "
                     f"{statistics.median(walls):.1f} s ({min(walls):.1f}-{max(walls):.1f}) | {phases} | "
                     f"{min(loads):.1f}-{max(loads):.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[0, 32], help="MB of values written before each")
    parser.add_argument("--runs", type=int, default=2)
    options = parser.parse_args()
    print(table(measure(options.sizes, options.runs)))


if __name__ == "__main__":
    main()
