"""What a lab leaves on this machine, found without asking the lab code: the tests' independent check that
`down()` removes every trace."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.lab.lab import Lab


def traces_of(slot: int, cgroups: list[Path], lab_dir: Path) -> list[str]:
    """What of a slot is still on this machine, found without asking the lab code."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
    found += [f"netns {line.split()[0]}" for line in netns
              if line.startswith((f"cb{slot}hub", f"cb{slot}n"))]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.splitlines()
    found += [f"link {line.split()[1]}" for line in links if line.split()[1].startswith((f"cb{slot}up", f"cb{slot}v"))]
    for table in ("filter", "nat"):
        rules = subprocess.run(["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True).stdout
        found += [f"rule {r}" for r in rules.splitlines() if f"cblab-{slot} " in r + " "]
    found += [f"mount {line.split()[1]}" for line in Path("/proc/mounts").read_text().splitlines()
              if line.split()[1].startswith(str(lab_dir))]
    found += [f"cgroup {c}" for c in cgroups if c.exists()]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(lab_dir) in cmdline:
            found.append(f"process {pid} {cmdline[:80]}")
    if lab_dir.exists():
        found.append(f"dir {lab_dir}")
    if Path(f"/run/cluster-bootstrap-lab/slot-{slot}.lock").exists():
        found.append("slot lock")
    return found


def lab_cgroups(lab: Lab) -> list[Path]:
    return [*lab.cgroups, *(parent / node.name for parent in lab.cgroups for node in lab.nodes)]
