"""`bootstrap preflight`'s table reads on an 80-column terminal, kubectl-style: one line per node with a few
columns, each problem and its fix on lines of their own below the table, nothing wider than the terminal."""
from __future__ import annotations

import io

from provision.cli.commands.preflight import COLUMNS, render
from provision.cli.console import literal_console
from provision.cli.invocation import carry
from provision.findings import Finding
from provision.nodes.preflight.run import PreflightNode, PreflightReport

PORTS_FIX = ("stop what listens there (`ss -ltnp 'sport = :6443'` on the node shows it), or run `bootstrap reset` if "
             "it is left from an earlier cluster")


def _node(name: str, role: str, *, os_name: str = "Debian GNU/Linux 12", gpus: int = 0,
          problems: tuple[tuple[str, str, str, str], ...] = ()) -> PreflightNode:
    checks = (("ssh", "ok", "as ops", ""), ("sudo", "ok", "sudo", ""), ("os", "ok", os_name, ""),
              ("cpu", "ok", "16 CPUs", ""), ("memory", "ok", "64150 MB", ""),
              ("gpu", "ok", f"{gpus} NVIDIA GPUs (driver 550.54.15)" if gpus else "none", ""), *problems)
    return PreflightNode(name, role, "10.0.0.1", tuple(Finding(check, name, status, detail, fix)
                                                       for check, status, detail, fix in checks), gpus)


REPORT = PreflightReport((
    _node("control-plane-1", "control_plane", problems=(
        ("ports", "fail", "in use: 6443 (python3 pid 2231)", PORTS_FIX),
        ("swap", "warn", "/etc/fstab: /swapfile none swap sw 0 0", "prepare turns swap off"))),
    _node("gpu-worker-in-rack-b-with-a-long-name-17", "worker", os_name="Ubuntu 22.04.4 LTS (Jammy Jellyfish)", gpus=8),
    PreflightNode("ghost", "worker", "10.0.0.99",
                  (Finding("ssh", "ghost", "fail", "unreachable: no SSH answer within 10 s", "check ansible_host"),)),
), 3.2)


def _rendered(width: int) -> list[str]:
    console = literal_console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    render(REPORT, console)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue().splitlines()


def test_the_table_fits_80_columns_with_one_line_per_node() -> None:
    lines = _rendered(80)
    assert max(len(line) for line in lines) <= 80, lines
    header = lines[1].split()
    assert header == list(COLUMNS)
    rows = lines[2:5]
    assert [row.split()[0] for row in rows] == ["control-plane-1", "gpu-worker-in-rack-b-wi…", "ghost"]
    assert rows[0].split()[1:4] == ["control-plane", "FAIL", "(2)"] and rows[0].split()[-1] == "0"
    assert rows[1].split()[-1] == "8" and rows[2].split()[-1] == "-"


def test_problems_and_fixes_are_listed_below_whole_and_wrapped() -> None:
    text = "\n".join(_rendered(80))
    below = " ".join(text.split("\n", 5)[5].split())
    assert "FAIL control-plane-1: ports: in use: 6443 (python3 pid 2231)" in below
    # The fix's `bootstrap reset` as this process completes it (cli/invocation.py: the options of the run).
    assert f"fix: {carry(PORTS_FIX)}" in below
    assert "FAIL ghost: ssh: unreachable: no SSH answer within 10 s fix: check ansible_host" in below
    assert "warn control-plane-1: swap" in below
    # Continuation lines are indented under their line, not flush left.
    assert all(line.startswith(("FAIL ", "warn ", "     ")) for line in _rendered(80)[5:])


def test_a_command_in_a_fix_is_never_broken_and_without_a_terminal_each_finding_is_one_line() -> None:
    """Issue 34.2: the doctor's and preflight's fixes were hard-wrapped inside the commands they name, terminal or
    not; a copied command then was three lines."""
    for width in (40, 60, 100):
        for line in _rendered(width):
            assert line.count("`") % 2 == 0, line
    assert any("`ss -ltnp 'sport = :6443'`" in line for line in _rendered(40))
    console = literal_console(file=io.StringIO(), width=40)
    render(REPORT, console)
    assert isinstance(console.file, io.StringIO)
    below = console.file.getvalue().splitlines()[5:]
    assert f"     fix: {carry(PORTS_FIX)}" in below
    assert all(line.startswith(("FAIL ", "warn ", "     fix: ")) for line in below), below
