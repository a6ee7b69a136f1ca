"""Benchmark: how long the command line takes to answer, beside the floor every command pays.

    .venv-modern/bin/python -m bench.cli_startup                 # each case 7 times: the medians and the load
    .venv-modern/bin/python -m bench.cli_startup --repeat 11 --write-doc

The goals (issue 34): `bootstrap --help`, `bootstrap COMMAND --help` and one shell-completion TAB answer in at most
0.3 s, `bootstrap config validate` on a 3-node inventory in at most 1 s, on a quiet machine. Each case runs the
whole process as a user's shell does (the venv's `bootstrap` script), beside two floors measured in the same run:
`python -c pass` (the interpreter alone) and `kubectl version --client` where kubectl is installed (what a user
compares with). CPU time (user + system, the process's own) is shown beside wall time: a shared, loaded machine
stretches wall time, not CPU time. Goals are read, not asserted.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
INVENTORY = ("[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2\n"
             "w2 ansible_host=10.0.0.3 gpu=true\n[all:vars]\nansible_user=ubuntu\n")


def _bootstrap(checkout: Path | None) -> list[str]:
    script = Path(sys.executable).parent / "bootstrap"
    return [str(script)] if script.exists() and checkout is None else [sys.executable, "-m", "provision"]


def cases(folder: Path, checkout: Path | None = None) -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (argv, extra environment)."""
    tool = _bootstrap(checkout)
    inventory = folder / "hosts.ini"
    inventory.write_text(INVENTORY)
    found: dict[str, tuple[list[str], dict[str, str]]] = {
        "`python -c pass` (floor)": ([sys.executable, "-c", "pass"], {}),
    }
    kubectl = shutil.which("kubectl")
    if kubectl:
        found["`kubectl version --client` (floor)"] = ([kubectl, "version", "--client"], {})
    found |= {
        "`bootstrap --help`": ([*tool, "--help"], {}),
        "`bootstrap up --help`": ([*tool, "up", "--help"], {}),
        "`bootstrap smoke-test --help`": ([*tool, "smoke-test", "--help"], {}),
        "TAB: `bootstrap up --from <TAB>`": ([*tool], {"_BOOTSTRAP_COMPLETE": "complete_bash",
                                                      "COMP_WORDS": "bootstrap up --from ", "COMP_CWORD": "3"}),
        "TAB: `bootstrap node remove -i hosts.ini <TAB>`": ([*tool], {
            "_BOOTSTRAP_COMPLETE": "complete_bash", "COMP_WORDS": f"bootstrap node remove -i {inventory} ",
            "COMP_CWORD": "5"}),
        "`bootstrap config validate -i hosts.ini` (3 nodes)": ([*tool, "config", "validate", "-i", str(inventory)], {}),
    }
    return found


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """Wall time, CPU time (user and system of the process: what a loaded machine does not inflate), exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, cwd=cwd)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--write-doc", action="store_true")
    parser.add_argument("--checkout", type=Path, help="Time the package of another checkout (an earlier commit, "
                        "`git worktree add`), through this venv's Python: the before of a before/after.")
    options = parser.parse_args()
    rows = []
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "BOOTSTRAP_"))}
        base["BOOTSTRAP_STATE_DIR"] = str(folder / "state")
        if options.checkout is not None:
            base["PYTHONPATH"] = str(options.checkout.resolve())
        for name, (argv, extra) in cases(folder, options.checkout).items():
            # One run first, not counted: the page cache and __pycache__ warm, as on a user's second command. In a
            # scratch directory: `python -m` puts the working directory first on the path (before --checkout's).
            timed(argv, base | extra, folder)
            runs = [timed(argv, base | extra, folder) for _ in range(options.repeat)]
            rows.append((name, statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs),
                         min(r[0] for r in runs), runs[0][2]))
            loads.append(os.getloadavg()[0])
    table = ["| case | median wall | fastest wall | median CPU | exit code |", "|---|---|---|---|---|"]
    table += [f"| {name} | {wall:.2f} s | {fastest:.2f} s | {cpu:.2f} s | {code} |"
              for name, wall, cpu, fastest, code in rows]
    table.append(f"\nMeasured {time.strftime('%Y-%m-%d %H:%M')}, `python -m bench.cli_startup` "
                 f"(Python {sys.version.split()[0]}); load average (1 min) from {min(loads):.1f} to {max(loads):.1f} "
                 f"on {os.cpu_count()} CPUs; {options.repeat} runs each after one not counted.")
    print("\n".join(table))
    if options.write_doc:
        text = DOC.read_text()
        start = text.index("<!-- cli-startup:begin -->") + len("<!-- cli-startup:begin -->")
        end = text.index("<!-- cli-startup:end -->")
        DOC.write_text(text[:start] + "\n" + "\n".join(table) + "\n" + text[end:])


if __name__ == "__main__":
    main()
