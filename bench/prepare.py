"""Benchmark: `prepare` against its floor, on 1, 3, 8 and 16 lab nodes, with Mitogen and with Ansible's stock
executor, for the working tree and, in the same run, for another git ref (before and after a change).

    .venv-modern/bin/python -m bench.prepare                        # sizes 1 3 8 16, executors mitogen and stock
    .venv-modern/bin/python -m bench.prepare --sizes 3 --executors mitogen --reruns 5
    .venv-modern/bin/python -m bench.prepare --baseline-ref main    # main's prepare beside the working tree's
    .venv-modern/bin/python -m bench.prepare --write-doc            # the results into docs/benchmarks.md

For every size and executor, back to back: `bootstrap prepare` on fresh nodes (tests/lab), then re-runs on the same
nodes (converged: nothing to change), then the floor on other, equally fresh nodes. `bootstrap prepare` runs as a
user runs it, the CLI in a process of its own (preflight first, on fresh nodes, as the CLI does); the time is the
prepare phase's own, as the run records it in the cluster's state. With --baseline-ref, the ref's tree (git
archive, into a temporary directory) runs the same way on its own fresh nodes, just before the working tree's,
and shares the working tree's floor. The floor is what the nodes cannot avoid: the packages the working tree's run
installed (its nodes' own reports name them, `package_plan`), from the same repositories (the third-party sources
the run wrote, copied over first), installed by one package-manager call per node (`apt-get update && apt-get
install`), all nodes in parallel over SSH. Beside each time: the controller's CPU (the `bootstrap prepare`
process and Ansible's), the nodes' CPU (their cgroups) and the machine's load average, because the controller and
every node share this machine's cores: the controller's CPU per node and the task results per node that reach the
node do not depend on the machine's load, the times do. Needs root (the lab). Goals are read, not asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from provision.nodes.prepare import read_reports
from tests.lab.lab import Lab
from tests.lab.repos import OFFLINE_DIR, build_kubernetes_repo, write_config

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "benchmarks.md"
SECTION = "## prepare"
LOG_LINE = re.compile(r"^(?P<host>\S+)\t(?P<state>[^\t]+)\t(?P<task>.*) \((?P<seconds>[\d.]+)s\)")
# Debian flavours of the lab and the Kubernetes minor each one's own containerd runs (tests/test_containerd2_lab.py).
KUBERNETES_FOR = {"bookworm": "1.35", "trixie": "1.35", "sid": "1.36"}
# The third-party sources a run writes (packages/tasks/repository-Debian.yml), relative to /: copied to the floor's nodes.
APT_SOURCES = "etc/apt/sources.list.d/cb-*.sources etc/apt/keyrings/cb-*"
# The goals of issue #17: the first run near the floor, a quick converged re-run, the stock executor near Mitogen;
# issue #35's: the re-run grows by at most a second per node beyond 3.
FLOOR_RATIO_GOAL = 1.25
RERUN_GOAL_S = 5.0
RERUN_GROWTH_S = 1.0
STOCK_RATIO_GOAL = 1.5
# Issue #21's (roles that stand alone): after the split no worse than before, in the same run, and a converged
# re-run skips a role whose work holds as one step (before it: about 40 task results per node). One run on a
# shared machine varies by about this much, so a figure within it of the baseline's counts as no worse.
NO_WORSE_SLACK = 1.10

T = TypeVar("T")


@dataclass
class Usage:
    """What one timed step cost: wall time, and CPU seconds of the controller, of the nodes and of the machine."""

    wall_s: float
    controller_cpu_s: float
    nodes_cpu_s: float
    machine_cpu_s: float
    load: tuple[float, float]  # the 1-minute load average before and after

    @property
    def others_cpu_s(self) -> float:
        """CPU the rest of the machine (other sessions' work) used meanwhile."""
        return max(0.0, self.machine_cpu_s - self.controller_cpu_s - self.nodes_cpu_s)


@dataclass
class Run:
    seconds: float  # the prepare phase's own, as the run recorded it
    usage: Usage  # the whole `bootstrap prepare` process (with preflight on a first run)
    changed: int
    # Task results per node that reached the node (ok or changed; skipped ones never leave the controller).
    round_trips: float
    skipped: float
    tasks: dict[str, float] = field(default_factory=dict)  # seconds per task, averaged over nodes


@dataclass(frozen=True)
class Code:
    """The code whose prepare is measured: the working tree, or a git ref's tree exported beside it."""

    label: str
    root: Path


@dataclass(frozen=True)
class Prepared:
    """One `bootstrap prepare`: the prepare phase's own seconds and the run's directory (its log and events)."""

    seconds: float
    run_dir: Path


@dataclass
class Measurement:
    nodes: int
    executor: str
    flavour: str
    code: str
    first: Run
    reruns: list[Run]
    floor: Usage
    floor_per_node_s: list[float]
    packages: list[str]

    @property
    def rerun_s(self) -> float:
        return statistics.median(run.seconds for run in self.reruns)

    @property
    def floor_ratio(self) -> float:
        return self.first.seconds / self.floor.wall_s


def _cpu_ns(lab: Lab) -> int:
    """CPU the lab's nodes used so far (cgroup v1 cpuacct below the lab's cgroup), in ns."""
    for cgroup in lab.cgroups:
        usage = cgroup / "cpuacct.usage"
        if usage.exists():
            return int(usage.read_text())
    return 0


def _machine_cpu_s() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    # user nice system idle iowait irq softirq steal: everything but idle and iowait was busy.
    busy = sum(int(value) for i, value in enumerate(fields[:8]) if i not in (3, 4))
    return busy / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def timed(lab: Lab, step: Callable[[], T]) -> tuple[T, Usage]:
    load = os.getloadavg()[0]
    nodes, machine, own = _cpu_ns(lab), _machine_cpu_s(), _own_cpu_s()
    started = time.monotonic()
    result = step()
    wall = time.monotonic() - started
    usage = Usage(wall, _own_cpu_s() - own, (_cpu_ns(lab) - nodes) / 1e9, _machine_cpu_s() - machine,
                  (load, os.getloadavg()[0]))
    return result, usage


@contextmanager
def fresh_lab(nodes: int, flavour: str, repository: Path) -> Iterator[Lab]:
    """A lab of fresh nodes with the placeholder Kubernetes repository (built once, tests/lab/repos.py) on each: the
    run's nodes and the floor's trust the same key."""
    lab = Lab.up(nodes, flavour=flavour)
    try:
        archive = subprocess.run(["tar", "-C", str(repository), "-cf", "-", "."], check=True,
                                 capture_output=True).stdout
        for node in lab.nodes:
            subprocess.run([*node.ssh_command("root"), f"mkdir -p {OFFLINE_DIR} && tar -C {OFFLINE_DIR} -xf -"],
                           input=archive, check=True, capture_output=True, timeout=60)
        yield lab
    finally:
        lab.down()


def _task_seconds(run_log: Path) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds per task averaged over hosts, and how many results of each state, from the run's own log."""
    per_task: dict[str, list[float]] = defaultdict(list)
    states: dict[str, int] = defaultdict(int)
    for line in run_log.read_text().splitlines():
        match = LOG_LINE.match(line)
        if match:
            per_task[match["task"]].append(float(match["seconds"]))
            states[match["state"]] += 1
    return {task: statistics.mean(values) for task, values in per_task.items()}, states


def export_ref(ref: str, into: Path) -> Code:
    """The tree of git `ref` (what `git archive` holds), unpacked into `into`: its own provision/ and playbooks/."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", f"{ref}^{{commit}}"], check=True,
                            capture_output=True, text=True).stdout.strip()
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return Code(ref if ref == commit else f"{ref} ({commit})", into)


def bootstrap_prepare(code: Code, lab: Lab, config: Path, state_dir: Path) -> Prepared:
    """`bootstrap prepare` of `code` on the lab, in a process of its own with its own state directory (the
    interpreter and Ansible are this one's: the venv's). Raises naming the CLI's last words when it fails."""
    env = os.environ | {"BOOTSTRAP_STATE_DIR": str(state_dir), "PYTHONPATH": str(code.root)}
    done = subprocess.run([sys.executable, "-c", "from provision.cli.app import main; main()", "prepare",
                           "--inventory", str(lab.inventory_path), "--config", str(config)],
                          cwd=code.root, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{code.label}: bootstrap prepare exited {done.returncode}: {done.stdout[-2000:]}"
                           f"{done.stderr[-2000:]}")
    states = list((state_dir / "clusters").glob("*/state.json"))
    record = json.loads(states[0].read_text())["phases"]["prepare"]
    return Prepared(float(record["seconds"]), sorted((state_dir / "runs").glob("*-prepare"))[-1])


def _run(prepared: Prepared, usage: Usage, nodes: int) -> Run:
    seconds, states = _task_seconds(prepared.run_dir / "run.log")
    reached = states.get("ok", 0) + states.get("changed", 0) + states.get("failed (ignored)", 0)
    return Run(prepared.seconds, usage, states.get("changed", 0), reached / nodes, states.get("skipped", 0) / nodes,
               seconds)


def measure(nodes: int, executor: str, flavour: str, reruns: int, scratch: Path, code: Code, *,
            floor: tuple[Usage, list[float]] | None = None) -> Measurement:
    """`code`'s first run and re-runs on fresh nodes, then the floor of the packages its run installed, unless
    `floor` is given (another code's, for the same nodes, measured later: main() puts it in)."""
    minor = KUBERNETES_FOR[flavour]
    repository = scratch / f"offline-{minor}"
    if not repository.exists():
        build_kubernetes_repo(repository, minor)
    with fresh_lab(nodes, flavour, repository) as lab:
        config = write_config(lab, scratch / f"cluster-{lab.slot}.yaml", kubernetes={"version": minor},
                              mirrors={"kubernetes_repo": f"file://{OFFLINE_DIR}/kubernetes"},
                              container_runtime={"containerd_source": "distribution"},
                              ansible={"executor": executor},
                              # 16 nodes and the controller on 2 shared cores: a node slow to answer its SSH
                              # handshake is the machine's load, not what is measured.
                              ssh={"connect_timeout_s": 60})
        state_dir = Path(tempfile.mkdtemp(prefix="state-", dir=scratch))
        first, first_usage = timed(lab, lambda: bootstrap_prepare(code, lab, config, state_dir))
        again = []
        for _ in range(reruns):
            rerun, usage = timed(lab, lambda: bootstrap_prepare(code, lab, config, state_dir))
            again.append(_run(rerun, usage, nodes))
        report = read_reports(first.run_dir)[lab.nodes[0].name]
        packages = list(report.package_plan)
        sources = lab.nodes[0].ssh(f"cd / && tar -cf - {APT_SOURCES} | base64 -w0").stdout.strip()
    floor_usage, per_node = floor or measure_floor(nodes, flavour, packages, sources, repository)
    return Measurement(nodes, executor, flavour, code.label, _run(first, first_usage, nodes), again, floor_usage,
                       per_node, packages)


def floor_command(packages: list[str]) -> str:
    """One package-manager call: the lists read once, every package installed in one transaction."""
    names = " ".join(packages)
    return ("export DEBIAN_FRONTEND=noninteractive; apt-get update -q >/dev/null && "
            f"apt-get install -y -q --no-install-recommends {names} >/dev/null")


def measure_floor(nodes: int, flavour: str, packages: list[str], sources: str,
                  repository: Path) -> tuple[Usage, list[float]]:
    """The floor on fresh nodes: the run's third-party sources put in place first (untimed), then, timed, one
    package-manager call per node, all nodes at once."""
    with fresh_lab(nodes, flavour, repository) as lab:
        for node in lab.nodes:
            node.ssh(f"echo {sources} | base64 -d | tar -C / -xf -")

        def install(node_index: int) -> float:
            started = time.monotonic()
            lab.nodes[node_index].ssh(floor_command(packages), timeout=1200)
            return time.monotonic() - started

        def all_nodes() -> list[float]:
            with ThreadPoolExecutor(len(lab.nodes)) as pool:
                return list(pool.map(install, range(len(lab.nodes))))

        per_node, usage = timed(lab, all_nodes)
    return usage, per_node


def _s(value: float) -> str:
    return f"{value:.1f} s"


def render(results: list[Measurement], started: str) -> str:
    flavours = ", ".join(sorted({r.flavour for r in results}))
    loads = [load for r in results for run in (r.first, *r.reruns) for load in run.usage.load] + \
        [load for r in results for load in r.floor.load]
    codes = list(dict.fromkeys(r.code for r in results))
    lines = [SECTION, "",
             f"`bench/prepare.py` on this machine ({os.cpu_count()} cores shared by the controller, every lab node "
             f"and other sessions' work), {started}, one run: fresh Debian {flavours} lab nodes, Debian's "
             "containerd and docker.io from the Debian mirror, placeholder Kubernetes packages from a local signed "
             f"repository; the code: {' and '.join(codes)}, each on its own fresh nodes. The machine's 1-minute "
             f"load average during the run: {min(loads):.1f} to {max(loads):.1f}. Times are the prepare phase's own "
             "(as `bootstrap prepare` records it); the floor is measured once per size and executor, for the "
             f"packages {codes[-1]} installs.", "",
             "| code | executor | nodes | floor | first run | first / floor | re-run (median) | re-runs "
             "| re-run changes | round trips per node (re-run) | controller CPU per node: first / re-run "
             "| load (first run / re-run) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        reruns = ", ".join(f"{run.seconds:.1f}" for run in r.reruns)
        load = f"{max(r.first.usage.load):.1f} / {max(load for run in r.reruns for load in run.usage.load):.1f}"
        per_node = (f"{r.first.usage.controller_cpu_s / r.nodes:.2f} / "
                    f"{statistics.median(run.usage.controller_cpu_s for run in r.reruns) / r.nodes:.2f} CPU-s")
        lines.append(f"| {r.code} | {r.executor} | {r.nodes} | {_s(r.floor.wall_s)} | {_s(r.first.seconds)} | "
                     f"{r.floor_ratio:.2f}x | {_s(r.rerun_s)} | {reruns} | "
                     f"{max(run.changed for run in r.reruns)} | {r.reruns[0].round_trips:.0f} "
                     f"(+{r.reruns[0].skipped:.0f} skipped) | {per_node} | {load} |")
    lines += ["", "Where the time went (CPU seconds; the controller is this process and Ansible's, the nodes are "
              "their cgroups, others is the rest of the machine meanwhile):", "",
              "| code | executor | nodes | floor: nodes / others | first run: controller / nodes / others | "
              "re-run: controller / nodes / others |", "|---|---|---|---|---|---|"]
    for r in results:
        first, rerun, floor = r.first.usage, r.reruns[0].usage, r.floor
        lines.append(f"| {r.code} | {r.executor} | {r.nodes} | {floor.nodes_cpu_s:.0f} / {floor.others_cpu_s:.0f} | "
                     f"{first.controller_cpu_s:.0f} / {first.nodes_cpu_s:.0f} / {first.others_cpu_s:.0f} | "
                     f"{rerun.controller_cpu_s:.1f} / {rerun.nodes_cpu_s:.1f} / {rerun.others_cpu_s:.1f} |")
    lines += ["", "Where the time went: the controller's CPU is the whole `bootstrap prepare` process (Python's start, and "
              "on a first run preflight, included); the nodes' and others' are over the same span.", "",
              "The packages (the run's own `package_plan`, installed by the floor in one call per node): "
              + ", ".join(f"`{p}`" for p in results[-1].packages) + "."]
    # Once per code and package list (each size and executor installs the same).
    other = dict.fromkeys((r.code, tuple(r.packages)) for r in results if r.packages != results[-1].packages)
    for code, packages in other:
        lines.append(f"{code} installs {', '.join(f'`{p}`' for p in packages)} instead.")
    lines += ["",
              "Slowest tasks of each first run and of its re-run (seconds a node waits, averaged over nodes):", ""]
    for r in results:
        top = ", ".join(f"{task} {seconds:.1f} s" for task, seconds in
                        sorted(r.first.tasks.items(), key=lambda kv: -kv[1])[:4])
        again = ", ".join(f"{task} {seconds:.1f} s" for task, seconds in
                          sorted(r.reruns[0].tasks.items(), key=lambda kv: -kv[1])[:3])
        lines.append(f"- {r.code}, {r.executor}, {r.nodes} nodes: first run: {top}; re-run: {again}")
    lines += ["", *goals(results)]
    return "\n".join(lines) + "\n"


def goals(results: list[Measurement]) -> list[str]:
    found = ["Goals (issues #17, #21 and #35):", ""]
    for code in dict.fromkeys(r.code for r in results):
        mine = [r for r in results if r.code == code]
        by = {(r.executor, r.nodes): r for r in mine}
        for r in mine:
            if r.nodes >= 3:
                met = "met" if r.floor_ratio <= FLOOR_RATIO_GOAL else "missed"
                found.append(f"- {code}: first run within {FLOOR_RATIO_GOAL}x of the floor, {r.executor}, {r.nodes} "
                             f"nodes: {r.floor_ratio:.2f}x, {met}.")
        for executor in dict.fromkeys(r.executor for r in mine):
            three = by.get((executor, 3))
            if three:
                met = "met" if three.rerun_s <= RERUN_GOAL_S else "missed"
                found.append(f"- {code}: converged re-run of 3 nodes in {RERUN_GOAL_S:.0f} s or less, {executor}: "
                             f"{three.rerun_s:.1f} s, {met}.")
            for larger in sorted(n for (e, n) in by if e == executor and n > 3):
                if three is None:
                    break
                grown = by[(executor, larger)].rerun_s - three.rerun_s
                bound = RERUN_GROWTH_S * (larger - 3)
                met = "met" if grown <= bound else "missed"
                found.append(f"- {code}: re-run from 3 to {larger} nodes, {executor}: {three.rerun_s:.1f} s to "
                             f"{by[(executor, larger)].rerun_s:.1f} s (+{grown:.1f} s; at most +{bound:.0f} s: "
                             f"{met}).")
        for (executor, nodes), stock in sorted(by.items()):
            mitogen = by.get(("mitogen", nodes))
            if executor == "stock" and mitogen:
                first = stock.first.seconds / mitogen.first.seconds
                rerun = stock.rerun_s / mitogen.rerun_s
                met = "met" if max(first, rerun) <= STOCK_RATIO_GOAL else "missed"
                found.append(f"- {code}: stock executor within {STOCK_RATIO_GOAL}x of Mitogen, {nodes} nodes: first "
                             f"run {first:.2f}x, re-run {rerun:.2f}x, {met}.")
    codes = list(dict.fromkeys(r.code for r in results))
    if len(codes) == 2:
        found += ["", f"Before ({codes[0]}) and after ({codes[1]}), same sizes and executors:", ""]
        before = {(r.executor, r.nodes): r for r in results if r.code == codes[0]}
        for after in (r for r in results if r.code == codes[1]):
            was = before.get((after.executor, after.nodes))
            if was:
                found.append(f"- {after.executor}, {after.nodes} nodes: first run {was.first.seconds:.1f} s -> "
                             f"{after.first.seconds:.1f} s ({was.floor_ratio:.2f}x -> {after.floor_ratio:.2f}x the "
                             f"floor), re-run {was.rerun_s:.1f} s -> {after.rerun_s:.1f} s, results per node on a "
                             f"re-run {was.reruns[0].round_trips + was.reruns[0].skipped:.0f} -> "
                             f"{after.reruns[0].round_trips + after.reruns[0].skipped:.0f} (reaching the node: "
                             f"{was.reruns[0].round_trips:.0f} -> {after.reruns[0].round_trips:.0f}).")
                found[-1] += f" {no_worse(was, after)}"
    return found


def no_worse(before: Measurement, after: Measurement) -> str:
    """Issue #21's goal for one size and executor: the first run (against the floor), the converged re-run and the
    task results per node on a re-run no worse after than before (within NO_WORSE_SLACK for the times)."""
    worse = [name for name, was, now, slack in (
        ("first run / floor", before.floor_ratio, after.floor_ratio, NO_WORSE_SLACK),
        ("re-run", before.rerun_s, after.rerun_s, NO_WORSE_SLACK),
        ("results per node on a re-run", before.reruns[0].round_trips + before.reruns[0].skipped,
         after.reruns[0].round_trips + after.reruns[0].skipped, 1.0),
    ) if now > was * slack]
    return f"No worse than before: {'missed (' + ', '.join(worse) + ')' if worse else 'met'}."


def write_section(text: str) -> None:
    """Replace (or append) the `## prepare` section of docs/benchmarks.md; other sections stay as they are. The
    section's own prose after the generated part (from a line `<!-- end of bench/prepare.py output -->`) stays."""
    current = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^{re.escape(END_MARK)}$|^## |\Z)", re.MULTILINE | re.DOTALL)
    updated = pattern.sub(lambda _: text + "\n", current) if pattern.search(current) else \
        current.rstrip("\n") + "\n\n" + text + "\n" + END_MARK + "\n"
    DOC.write_text(updated)


END_MARK = "<!-- end of bench/prepare.py output -->"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 3, 8, 16])
    parser.add_argument("--executors", nargs="+", default=["mitogen", "stock"], choices=["mitogen", "stock"])
    parser.add_argument("--flavour", default="bookworm", choices=sorted(KUBERNETES_FOR))
    parser.add_argument("--reruns", type=int, default=3, help="converged re-runs after each first run (median shown)")
    parser.add_argument("--baseline-ref", metavar="REF",
                        help="also measure this git ref's prepare (e.g. main), each size and executor on its own "
                             "fresh nodes just before the working tree's")
    parser.add_argument("--baseline-sizes", type=int, nargs="+", metavar="N",
                        help="measure the baseline at these sizes only (default: every size)")
    parser.add_argument("--write-doc", action="store_true", help=f"write the results into {DOC}")
    args = parser.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M")
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        codes = [Code("working tree", REPO)]
        if args.baseline_ref:
            codes.insert(0, export_ref(args.baseline_ref, Path(scratch) / "baseline"))
        for size in args.sizes:
            for executor in args.executors:
                # The baseline first, with a placeholder floor: the working tree's run decides the packages the
                # floor installs, and the baseline shares that floor.
                placeholder: tuple[Usage, list[float]] = (Usage(0.0, 0.0, 0.0, 0.0, (0.0, 0.0)), [])
                chosen = [code for code in codes if code is codes[-1] or args.baseline_sizes is None
                          or size in args.baseline_sizes]
                try:
                    measured = [measure(size, executor, args.flavour, args.reruns, Path(scratch), code,
                                        floor=placeholder if code is not codes[-1] else None) for code in chosen]
                except RuntimeError as exc:  # the sizes measured so far are still written
                    print(f"{size} nodes, {executor}: not measured: {str(exc)[:2000]}", flush=True)
                    continue
                for result in measured[:-1]:
                    result.floor, result.floor_per_node_s = measured[-1].floor, measured[-1].floor_per_node_s
                for code, result in zip(chosen, measured, strict=True):
                    print(f"{code.label:20} {executor:8} {size:2} nodes: floor {result.floor.wall_s:6.1f} s, first "
                          f"{result.first.seconds:6.1f} s ({result.floor_ratio:.2f}x), re-runs "
                          f"{[round(run.seconds, 1) for run in result.reruns]} (load "
                          f"{result.first.usage.load[0]:.1f})", flush=True)
                    results.append(result)
    text = render(results, started)
    print(text)
    if args.write_doc:
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
