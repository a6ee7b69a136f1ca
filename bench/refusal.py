"""Benchmark: how long `bootstrap config validate` takes to refuse an inventory at the host limit.

    .venv/bin/python -m bench.refusal                 # each case 3 times, the median and the load average
    .venv/bin/python -m bench.refusal --repeat 5 --write-doc

The goal (issue #20): any refusal returns within 5 s on an inventory at the host limit (5000 hosts), on a quiet
machine. Each case runs the whole command as a user does (`python -m provision`, its imports included), beside
`bootstrap --help` (the floor every command pays: Python and the CLI's imports). The cases: 5000 hosts with the
last one's port out of range and groups nested 15 deep (the refusal needs every host read), the same nested 60
deep (refused by the depth bound before Ansible resolves a group), and a range that names more hosts than the
limit (refused before Ansible expands it). Goals are read, not asserted: the machine is shared.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HOSTS = 5000


def _inventory(depth: int, bad_last: bool = True) -> str:
    lines = ["[control_plane]", "cp1 ansible_host=10.0.0.1", "[workers]"]
    for index in range(2, HOSTS + 1):
        port = " ansible_port=99999" if bad_last and index == HOSTS else ""
        lines.append(f"w{index} ansible_host=10.{index // 65536}.{(index // 256) % 256}.{index % 256}{port}")
    previous = "workers"
    for level in range(depth):
        lines += [f"[g{level}:children]", previous]
        previous = f"g{level}"
    return "\n".join([*lines, "[all:vars]", "ansible_user=ubuntu", ""])


CASES = {
    "5000 hosts, groups 15 deep, the last host refused": _inventory(15),
    "5000 hosts, groups 60 deep": _inventory(60, bad_last=False),
    "a range of 10^8 hosts": "[control_plane]\ncp[1:100000000] ansible_host=10.0.0.1\n",
}


def _timed(args: list[str], cwd: Path) -> tuple[float, float, int]:
    """Wall time, CPU time (user and system, the command's own: what a loaded machine does not inflate) and the
    exit code."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["BOOTSTRAP_STATE_DIR"] = str(cwd / "state")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "provision", *args], cwd=cwd, env=env, capture_output=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write-doc", action="store_true")
    options = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        cases = {"`bootstrap --help` (the floor: Python and the CLI's imports)": None, **CASES}
        for name, text in cases.items():
            path = folder / "hosts.ini"
            path.write_text(text or "")
            args = ["--help"] if text is None else ["config", "validate", "-i", str(path)]
            runs = [_timed(args, folder) for _ in range(options.repeat)]
            rows.append((name, statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), runs[0][2]))
    load = os.getloadavg()[0]
    table = ["| case | median wall time | median CPU time | exit code |", "|---|---|---|---|"]
    table += [f"| {name} | {wall:.2f} s | {cpu:.2f} s | {code} |" for name, wall, cpu, code in rows]
    table.append(f"\nMeasured {time.strftime('%Y-%m-%d %H:%M')}, `python -m bench.refusal`; load average (1 min) at the end: "
                 f"{load:.1f} on {os.cpu_count()} CPUs; {options.repeat} runs each.")
    print("\n".join(table))
    if options.write_doc:
        text = DOC.read_text()
        start = text.index("<!-- refusal:begin -->") + len("<!-- refusal:begin -->")
        end = text.index("<!-- refusal:end -->")
        DOC.write_text(text[:start] + "\n" + "\n".join(table) + "\n" + text[end:])


if __name__ == "__main__":
    main()
