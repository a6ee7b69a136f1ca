#!/usr/bin/python
"""Wait a while for the package manager's locks, and say who holds them: returned under `cb_package_lock`.

A freshly booted Debian or Ubuntu machine often runs unattended-upgrades or cloud-init's package steps just as
`prepare` starts; apt and dpkg then refuse at once ("Could not get lock"), and a run would fail on a node that
only needed a minute. The roles call this module before each package transaction, as the `until` of a task
retried up to packages.lock_timeout_s: each call waits at most `wait_s`, then reports who holds which lock (pid,
command, how long it has run), which the controller's live view shows while the task is retried. Past the bound
the task fails with `msg`, which names the lock, the holder and the fix.

Who holds a lock is read the way apt and dnf themselves decide it: dpkg's, apt's and rpm's locks are fcntl
record locks (F_GETLK names the holding process); dnf's are files holding a live process's pid. Once the locks
are free it also says whether dpkg was interrupted (what apt refuses to go on from until `dpkg --configure -a`).
It only reads: changed is always false.
"""
from __future__ import annotations

import fcntl
import os
import struct
import time

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: cb_package_lock
short_description: Wait for the package manager's locks and report their holders (cb_package_lock)
options:
  manager:
    description: The package manager whose locks to look at.
    type: str
    choices: [apt, dnf]
    required: true
  wait_s:
    description: How long this call waits for the locks to be free before it reports who holds them.
    type: float
    default: 10
  timeout_s:
    description: The whole bound (packages.lock_timeout_s), named in the message a held lock leaves.
    type: int
    required: true
"""

REPORT_KEY = "cb_package_lock"
SETTING = "packages.lock_timeout_s"
# fcntl record locks, in the order apt and dpkg take them.
FCNTL_LOCKS = {
    "apt": ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock",
            "/var/cache/apt/archives/lock"),
    "dnf": ("/var/lib/rpm/.rpm.lock",),
}
# dnf 4's process locks: a file holding the pid of the dnf that runs (dnf/lock.py), free when that pid is gone.
PID_LOCKS = {
    "apt": (),
    "dnf": ("/var/lib/dnf/rpmdb_lock.pid", "/var/cache/dnf/metadata_lock.pid", "/var/cache/dnf/download_lock.pid"),
}
# What apt checks before it refuses with "dpkg was interrupted".
DPKG_UPDATES = "/var/lib/dpkg/updates"
POLL_S = 0.5
# struct flock on Linux (x86_64, aarch64): short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid.
FLOCK = "@hhqqi4x"


def fcntl_holder(path: str) -> int | None:
    """The pid of the process holding an fcntl lock on `path` (0 when it cannot be told), or None when free."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        query = struct.pack(FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        l_type, _whence, _start, _len, pid = struct.unpack(FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    finally:
        os.close(fd)
    if l_type == fcntl.F_UNLCK:
        return None
    # An open file description lock (pid -1) names no process: look for one that has the file open.
    return pid if pid > 0 else (_opened_by(path) or 0)


def pid_file_holder(path: str) -> int | None:
    """The live process whose pid a dnf lock file holds, or None when the file is absent, empty or stale."""
    try:
        with open(path) as handle:
            pid = int(handle.read().strip() or 0)
    except (OSError, ValueError):
        return None
    return pid if pid > 0 and pid != os.getpid() and _alive(pid) else None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _opened_by(path: str) -> int | None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                if os.readlink(f"/proc/{entry}/fd/{fd}") == path:
                    return int(entry)
        except OSError:
            continue
    return None


def describe_process(pid: int) -> dict[str, object]:
    """The holder as the report names it: pid, command line (shortened) and how long it has run."""
    command, running_s = "", None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        with open(f"/proc/{pid}/stat") as handle:
            started_ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        running_s = max(0, int(uptime - started_ticks / os.sysconf("SC_CLK_TCK")))
    except (OSError, ValueError, IndexError):
        pass
    return {"pid": pid, "command": command[:160], "running_s": running_s}


def holders(manager: str) -> list[dict[str, object]]:
    """Every lock of this package manager that another process holds, with its holder."""
    found = []
    for path in FCNTL_LOCKS[manager]:
        pid = fcntl_holder(path)
        if pid is not None:
            found.append({"lock": path, **(describe_process(pid) if pid else {"pid": None, "command": ""})})
    for path in PID_LOCKS[manager]:
        pid = pid_file_holder(path)
        if pid is not None:
            found.append({"lock": path, **describe_process(pid)})
    return found


def dpkg_interrupted() -> bool:
    try:
        return any(name.isdigit() for name in os.listdir(DPKG_UPDATES))
    except OSError:
        return False


def held_message(found: list[dict[str, object]], timeout_s: int) -> str:
    first = found[0]
    holder = f"pid {first['pid']} ({first['command'] or 'command unknown'}"
    if first.get("running_s") is not None:
        holder += f", running for {first['running_s']} s"
    holder += ")"
    more = f"; {len(found) - 1} more lock(s) held" if len(found) > 1 else ""
    return (f"the package manager's lock {first['lock']} is still held by {holder} after waiting {timeout_s} s "
            f"({SETTING}){more}: let it finish (unattended-upgrades and cloud-init do on a freshly booted machine) "
            f"or stop it, then re-run; or raise {SETTING}")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "manager": {"type": "str", "required": True, "choices": ["apt", "dnf"]},
            "wait_s": {"type": "float", "default": 10},
            "timeout_s": {"type": "int", "required": True},
        },
        supports_check_mode=True,
    )
    manager = module.params["manager"]
    started = time.monotonic()
    deadline = started + max(0.0, module.params["wait_s"])
    found = holders(manager)
    while found and time.monotonic() < deadline:
        time.sleep(POLL_S)
        found = holders(manager)
    report = {"held": bool(found), "holders": found, "waited_s": round(time.monotonic() - started, 1),
              "interrupted": not found and manager == "apt" and dpkg_interrupted()}
    result: dict[str, object] = {"changed": False, REPORT_KEY: report}
    if found:
        result["msg"] = held_message(found, module.params["timeout_s"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
