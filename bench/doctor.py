"""Benchmark: `bootstrap doctor` on 3 and 8 prepared lab nodes (issue #35: at most 2 s for 8 nodes).

    .venv-modern/bin/python -m bench.doctor                    # sizes 3 8, 5 runs each
    .venv-modern/bin/python -m bench.doctor --sizes 8 --runs 10
    .venv-modern/bin/python -m bench.doctor --write-doc        # the results into docs/benchmarks.md

For each size: fresh Debian 12 lab nodes (tests/lab), prepared by `bootstrap prepare` (containerd configured, the
Kubernetes packages from a mirror stand-in on the lab's hub, which the doctor's package-source check fetches from
each node), each given a kubelet stand-in that runs. Then the doctor as the CLI runs it (run_doctor: every node's
probe over SSH in parallel, the API side, the judges), timed several times; and once the whole command in a new
process (`bootstrap doctor`, Python's start included). Beside each: the floor, measured in the same runs (the probe
runner with a probe of `true`: every node connected, sudo, one command, nothing read), SSH connections and commands
per node (counted on the tool's own SSH interface: the goal is one round per node), the slowest node's probe, the
CPU the doctor cost on each node (its cgroup's accounting: sshd, sudo and the script) and here, and the machine's
load average (the controller and every node share this machine's cores: the time follows the load, the CPU does
not). Needs root (the lab). Goals are read, not asserted.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from typer.testing import CliRunner

from provision.cli.app import app
from provision.diagnose.doctor import DoctorReport, run_doctor
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import load_settings
from provision.nodes import ssh
from provision.nodes.probe import NodeProbe, probe_nodes
from tests.lab.lab import Lab, LabNode
from tests.lab.repos import serve_kubernetes_repo, write_config

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
SECTION = "## doctor"
END_MARK = "<!-- end of bench/doctor.py output -->"
GOAL_S = 2.0
GOAL_NODES = 8
STAND_IN_KUBELET = (
    "mkdir -p /etc/systemd/system/kubelet.service.d /etc/kubernetes && "
    "printf '[Service]\\nExecStart=\\nExecStart=/bin/sleep infinity\\n' "
    "> /etc/systemd/system/kubelet.service.d/99-cblab-stand-in.conf && "
    "printf 'apiVersion: v1\\nkind: Config\\n' > /etc/kubernetes/kubelet.conf && "
    "systemctl daemon-reload && systemctl restart kubelet")


@dataclass
class Result:
    nodes: int
    runs: list[float] = field(default_factory=list)
    slowest_probe: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    command_s: float = 0.0
    connections: float = 0.0  # per node and run
    commands: float = 0.0
    problems: int = 0
    floors: list[float] = field(default_factory=list)
    node_cpu: list[float] = field(default_factory=list)  # per node and run, seconds (None where unreadable: skipped)
    here_cpu: list[float] = field(default_factory=list)  # this process, per run


# The floor: what any probe of every node costs before it reads anything.
FLOOR = NodeProbe("floor", lambda _: "true", lambda _: True)


def _node_cpu_s(node: LabNode) -> float | None:
    """The CPU time the node's cgroup has used (cgroup v1 cpuacct, or v2 cpu.stat), None where unreadable."""
    record = node.dir / "cgroups"
    for cgroup in map(Path, record.read_text().split() if record.is_file() else []):
        if (cgroup / "cpuacct.usage").is_file():
            return int((cgroup / "cpuacct.usage").read_text()) / 1e9
        if (cgroup / "cpu.stat").is_file():
            stat = dict(line.split() for line in (cgroup / "cpu.stat").read_text().splitlines() if line.strip())
            if "usage_usec" in stat:
                return int(stat["usage_usec"]) / 1e6
    return None


def _load() -> float:
    return os.getloadavg()[0]


class Counting:
    """Counts SSH connections opened and commands run, per node, on the tool's one SSH interface."""

    def __init__(self) -> None:
        self.opened: Counter[str] = Counter()
        self.ran: Counter[str] = Counter()
        self._open, self._run = ssh.SshShell.open, ssh.SshShell.run

    def __enter__(self) -> Counting:
        counting = self

        def opened(shell: ssh.SshShell) -> None:
            if shell._connection is None:
                counting.opened[shell.name] += 1
            counting._open(shell)

        def ran(shell: ssh.SshShell, command: str, **kwargs: object) -> ssh.CommandResult:
            counting.ran[shell.name] += 1
            return counting._run(shell, command, **kwargs)  # type: ignore[arg-type]

        ssh.SshShell.open = opened  # type: ignore[method-assign, assignment]
        ssh.SshShell.run = ran  # type: ignore[method-assign, assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        ssh.SshShell.open, ssh.SshShell.run = self._open, self._run  # type: ignore[method-assign]


def measure(size: int, runs: int, work: Path) -> Result:
    lab = Lab.up(size)
    try:
        url = serve_kubernetes_repo(lab, work / "offline", "1.35")
        config = write_config(lab, work / "cluster.yaml", kubernetes={"version": "1.35"},
                              mirrors={"kubernetes_repo": url}, container_runtime={"containerd_source": "distribution"})
        prepared = CliRunner().invoke(app, ["prepare", "-i", str(lab.inventory_path), "-c", str(config)])
        if prepared.exit_code != 0:
            raise RuntimeError(prepared.output)
        for node in lab.nodes:
            node.ssh(STAND_IN_KUBELET)
        cluster, settings = load_inventory(lab.inventory_path), load_settings(config)
        result = Result(size)
        for _ in range(runs):
            result.loads.append(_load())
            started = time.monotonic()
            probe_nodes(cluster.nodes, FLOOR, settings.ssh)
            result.floors.append(time.monotonic() - started)
            used = [_node_cpu_s(node) for node in lab.nodes]
            here = time.process_time()
            with Counting() as counting:
                started = time.monotonic()
                report: DoctorReport = run_doctor(cluster, settings)
                result.runs.append(time.monotonic() - started)
            result.here_cpu.append(time.process_time() - here)
            result.node_cpu += [after - before for before, after in zip(used, (_node_cpu_s(n) for n in lab.nodes),
                                                                        strict=True)
                                if before is not None and after is not None]
            result.slowest_probe.append(max(n.probe_s for n in report.nodes))
            result.connections = sum(counting.opened.values()) / size
            result.commands = sum(counting.ran.values()) / size
            result.problems = len(report.problems)
        result.loads.append(_load())
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "provision", "doctor", "-i", str(lab.inventory_path), "-c", str(config)],
                       capture_output=True, timeout=300)
        result.command_s = time.monotonic() - started
        return result
    finally:
        lab.down()


def render(results: list[Result], started: str) -> str:
    loads = [load for r in results for load in r.loads]
    lines = [SECTION, "",
             f"`bench/doctor.py` on this machine ({os.cpu_count()} cores shared by the controller, every lab node and "
             f"other sessions' work), {started}: fresh Debian 12 lab nodes prepared by `bootstrap prepare`, each with a "
             "kubelet stand-in that runs; no API server (the API side says it did not run). The machine's 1-minute "
             f"load average during the runs: {min(loads):.1f} to {max(loads):.1f}.", "",
             "| nodes | doctor (median) | runs | floor (median) | slowest node's probe (median) | CPU per node / here "
             "(median) | `bootstrap doctor` command | SSH connections / commands per node | problems found | load |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        runs = ", ".join(f"{s:.2f}" for s in r.runs)
        cpu = f"{statistics.median(r.node_cpu) * 1000:.0f} ms" if r.node_cpu else "-"
        lines.append(f"| {r.nodes} | {statistics.median(r.runs):.2f} s | {runs} | {statistics.median(r.floors):.2f} s | "
                     f"{statistics.median(r.slowest_probe):.2f} s | {cpu} / "
                     f"{statistics.median(r.here_cpu) * 1000:.0f} ms | {r.command_s:.1f} s | "
                     f"{r.connections:g} / {r.commands:g} | {r.problems} | "
                     f"{min(r.loads):.1f} to {max(r.loads):.1f} |")
    goal = next((r for r in results if r.nodes == GOAL_NODES), None)
    if goal:
        median = statistics.median(goal.runs)
        lines += ["", f"Goal (issue #35): {GOAL_NODES} nodes in at most {GOAL_S:.0f} s: {median:.2f} s (the floor "
                      f"{statistics.median(goal.floors):.2f} s; the command, Python's start included: "
                      f"{goal.command_s:.1f} s), {'met' if median <= GOAL_S else 'missed'} at this load."]
    return "\n".join(lines) + "\n"


def write_doc(text: str) -> None:
    """Replace the section's generated part in docs/benchmarks.md (or add it at the end); prose after END_MARK
    stays."""
    current = DOC.read_text()
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^{re.escape(END_MARK)}$|^## |\Z)", re.MULTILINE | re.DOTALL)
    updated = pattern.sub(lambda _: text + "\n", current) if pattern.search(current) else \
        current.rstrip("\n") + "\n\n" + text + "\n" + END_MARK + "\n"
    DOC.write_text(updated)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 8])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--write-doc", action="store_true", help=f"write the results into {DOC}")
    args = parser.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-doctor-") as tmp:
        os.environ.setdefault("BOOTSTRAP_STATE_DIR", str(Path(tmp) / "state"))
        for size in args.sizes:
            work = Path(tmp) / f"n{size}"
            work.mkdir()
            results.append(measure(size, args.runs, work))
            print(render(results, started))
    text = render(results, started)
    if args.write_doc:
        write_doc(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
