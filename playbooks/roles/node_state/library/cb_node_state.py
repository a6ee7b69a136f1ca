#!/usr/bin/python
"""What the roles of a play would otherwise ask a node task by task, read in one call at the start of the play, and
which of the parts they want differ from it.

Returned under `cb_state`: the read, and `differs`, the names of the parts of the roles' wanted state (`want`,
judged by module_utils/cb_node_want.py) that do not hold; each role runs only those (a converged re-run sends the
node this call and the closing report, and nothing in between). What is read is what the wanted parts name and what
the roles ask for besides (their requests merged by the node_state role): the contents and
checksums of files, whether directories exist, which package specs are missing, systemd units (loaded, active,
enabled at boot, and whether a daemon runs an older configuration than its files), live sysctls, kernel modules
loaded, files under a glob that carry a mark, a command's version line; and always the swap, the hostname, the
cgroup hierarchy, the package holds and a policy-rc.d a killed run left. It only reads: changed is always false.
"""
from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import socket
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cb_node_want import differs, reads
from ansible.module_utils.cb_packages import POLICY_MARK, POLICY_RC_D, missing_debs, missing_rpms

DOCUMENTATION = r"""
module: cb_node_state
short_description: Read, in one call, the node state the roles compare with what they want (cb_state)
options:
  files:
    description: Files whose content (text, up to 256 KiB), checksum and mode to read.
    type: list
    elements: path
    default: []
  dirs:
    description: Directories whose existence to read.
    type: list
    elements: path
    default: []
  packages:
    description: Package specs in the family's syntax (apt name or name=version-glob; rpm name or name-version;
      @module:stream always counts as missing); the missing ones are returned.
    type: list
    elements: str
    default: []
  units:
    description: systemd units to read (LoadState, ActiveState, UnitFileState).
    type: list
    elements: str
    default: []
  stale:
    description: unit -> its configuration files; a running unit with one newer than its main process is stale.
    type: dict
    default: {}
  sysctls:
    description: sysctl keys whose live values to read.
    type: list
    elements: str
    default: []
  kernel_modules:
    description: Kernel modules to find loaded or built in.
    type: list
    elements: str
    default: []
  marked:
    description: Globs, each with the text that marks a file as one an earlier run wrote; the marked files found.
    type: list
    elements: dict
    default: []
  versions:
    description: name -> a command that prints a version line (run when its program exists; null otherwise).
    type: dict
    default: {}
  want:
    description: The parts of the node's state the roles want, each a name and its checks
      (module_utils/cb_node_want.py); the names of those that do not hold are returned as cb_state.differs.
    type: list
    elements: dict
    default: []
  requests:
    description: Each role's request as one dict (any of the keys above), merged here with the others (the node_state
      role passes the roles' `<role>_reads` as they are).
    type: list
    elements: dict
    default: []
"""

MAX_CONTENT = 256 * 1024
_FSTAB_SWAP_RE = re.compile(r"^[^#\s]\S*\s+\S+\s+swap\s")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def file_state(path: str) -> dict[str, object]:
    try:
        info = os.stat(path)
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return {"exists": False, "content": None, "sha256": None, "mode": None, "mtime": None}
    text = data.decode("utf-8", errors="replace") if len(data) <= MAX_CONTENT else None
    return {"exists": True, "content": text, "sha256": hashlib.sha256(data).hexdigest(),
            "mode": f"{info.st_mode & 0o7777:04o}", "mtime": info.st_mtime}


def parse_systemctl_show(text: str, units: list[str]) -> dict[str, dict[str, str]]:
    """`systemctl show --property=... u1 u2` (one block per unit, in order, blank lines between)."""
    blocks = [block for block in re.split(r"\n\s*\n", text.strip()) if block.strip()] if text.strip() else []
    found = {}
    for unit, block in zip(units, blocks):
        values = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        found[unit] = {"load": values.get("LoadState", ""), "active": values.get("ActiveState", ""),
                       "enabled": values.get("UnitFileState", ""), "pid": values.get("MainPID", "0")}
    return found


def process_started(pid: int) -> float | None:
    """When a process started, in seconds since the epoch: now less its age, as ps reckons it (the uptime less its
    start time after boot, from /proc)."""
    stat, uptime = _read(f"/proc/{pid}/stat"), _read("/proc/uptime")
    if not stat or not uptime:
        return None
    ticks = int(stat.rsplit(")", 1)[1].split()[19])
    return time.time() - (float(uptime.split()[0]) - ticks / os.sysconf("SC_CLK_TCK"))


def holds(module: AnsibleModule) -> list[str]:
    if shutil.which("apt-mark"):
        _, out, _ = module.run_command(["apt-mark", "showhold"])
        return sorted({line.strip().split(":")[0] for line in out.splitlines() if line.strip()})
    if shutil.which("dnf"):
        _, out, _ = module.run_command(["dnf", "-q", "versionlock", "list"])
        return sorted({m.group(1) for m in (re.match(r"^([A-Za-z0-9_.+-]+?)-\d+:", line.strip())
                                            for line in out.splitlines()) if m})
    return []


def module_loaded(name: str, builtin: str) -> bool:
    return os.path.isdir(f"/sys/module/{name}") or f"/{name}.ko" in builtin


def cgroup_fs(module: AnsibleModule) -> str:
    """What the node's /sys/fs/cgroup is: cgroup2fs on the unified hierarchy."""
    rc, out, _ = module.run_command(["stat", "-fc", "%T", "/sys/fs/cgroup"])
    return out.strip() if rc == 0 else ""


LISTS = ("files", "dirs", "packages", "units", "sysctls", "kernel_modules")


def merged(params: dict) -> dict:
    """The requests (each role's) and what the wanted parts name, as one request: lists joined without repeats,
    dicts combined, marked globs and wanted parts in order."""
    found = {key: list(params[key]) for key in (*LISTS, "marked", "want")}
    found.update(stale=dict(params["stale"]), versions=dict(params["versions"]))
    for request in params["requests"]:
        for key in (*LISTS, "marked", "want"):
            found[key] += list(request.get(key) or [])
        for key in ("stale", "versions"):
            found[key].update(request.get(key) or {})
    for key, more in reads(found["want"]).items():
        if key in ("stale", "versions"):
            found[key] = {**more, **found[key]}
        else:
            found[key] += more
    for key in LISTS:
        found[key] = list(dict.fromkeys(str(item) for item in found[key]))
    return found


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "path", "default": []},
            "dirs": {"type": "list", "elements": "path", "default": []},
            "packages": {"type": "list", "elements": "str", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
            "stale": {"type": "dict", "default": {}},
            "sysctls": {"type": "list", "elements": "str", "default": []},
            "kernel_modules": {"type": "list", "elements": "str", "default": []},
            "marked": {"type": "list", "elements": "dict", "default": []},
            "versions": {"type": "dict", "default": {}},
            "want": {"type": "list", "elements": "dict", "default": []},
            "requests": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    params = merged(module.params)
    units: dict[str, dict[str, str]] = {}
    if params["units"] and shutil.which("systemctl"):
        _, out, _ = module.run_command(["systemctl", "show", "--property=LoadState,ActiveState,UnitFileState,MainPID",
                                        *params["units"]])
        units = parse_systemctl_show(out, params["units"])
    stale = []
    for unit, paths in params["stale"].items():
        pid = int(units.get(unit, {}).get("pid", "0") or 0)
        started = process_started(pid) if pid > 0 else None
        if started is not None and any(os.path.exists(p) and os.stat(p).st_mtime > started for p in paths):
            stale.append(unit)
    debian = shutil.which("dpkg-query") is not None
    builtin = _read(f"/lib/modules/{os.uname().release}/modules.builtin") or ""
    versions: dict[str, str | None] = {}
    for name, argv in params["versions"].items():
        rc, out, _ = module.run_command(argv) if shutil.which(argv[0]) else (1, "", "")
        versions[name] = out.strip() if rc == 0 else None
    marked = {entry["glob"]: sorted(path for path in glob.glob(entry["glob"]) if entry["marker"] in (_read(path) or ""))
              for entry in params["marked"]}
    run = module.run_command
    fstab = _read("/etc/fstab") or ""
    state = {
        "files": {path: file_state(path) for path in params["files"]},
        "dirs": {path: os.path.isdir(path) for path in params["dirs"]},
        "missing": (missing_debs if debian else missing_rpms)(run, params["packages"]),
        "packages_asked": params["packages"],
        "units": {unit: {k: v for k, v in values.items() if k != "pid"} for unit, values in units.items()},
        "stale": stale,
        "sysctls": {key: (_read(os.path.join("/proc/sys", *key.split("."))) or "").strip() or None
                    for key in params["sysctls"]},
        "modules_loaded": [name for name in params["kernel_modules"] if module_loaded(name, builtin)],
        "swap": {"active": [line.split()[0] for line in (_read("/proc/swaps") or "").splitlines()[1:] if line.strip()],
                 "fstab": [line for line in fstab.splitlines() if _FSTAB_SWAP_RE.match(line)]},
        "hostname": socket.gethostname(),
        "cgroup_fs": cgroup_fs(module),
        "holds": holds(module),
        "versions": versions,
        "marked": marked,
        "policy_rc_d_ours": POLICY_MARK in (_read(POLICY_RC_D) or ""),
    }
    state["differs"] = differs(state, params["want"])
    module.exit_json(changed=False, cb_state=state)


if __name__ == "__main__":
    main()
