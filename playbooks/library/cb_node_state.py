#!/usr/bin/python
"""What prepare's roles would otherwise ask a node task by task, read in one call at the start of the play.

Returned under `cb_state`: each role compares it with what it wants, on the controller, and runs only the tasks
whose part does not hold already (a converged re-run sends the node this call and the closing report, and nothing
in between). What is read: the contents and checksums of the files the roles write, whether directories exist,
which of the packages prepare installs are missing, systemd units (loaded, active, enabled at boot, and whether a
daemon runs an older configuration than its files), live sysctls, kernel modules loaded, swap, the hostname, the
cgroup hierarchy, package holds, containerd's version, the registry mirror files an earlier run wrote, and a
policy-rc.d a killed run left. It only reads: changed is always false.
"""
from __future__ import annotations

import fnmatch
import glob
import hashlib
import os
import re
import shutil
import socket
import time

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: cb_node_state
short_description: Read, in one call, the node state prepare's roles compare with what they want (cb_state)
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
      @module:stream is never counted missing); the missing ones are returned.
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
  mirror_dir:
    description: Where containerd's registry mirror files are (hosts.toml files with mirror_marker are ours).
    type: path
    default: /etc/containerd/certs.d
  mirror_marker:
    description: The text that marks a hosts.toml an earlier run wrote.
    type: str
    default: cluster-bootstrap setting container_runtime.registry_mirrors
"""

MAX_CONTENT = 256 * 1024
POLICY_MARK = "# cluster-bootstrap: daemons start after prepare configured them"
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
    for unit, block in zip(units, blocks, strict=False):
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


def missing_debs(module: AnsibleModule, specs: list[str]) -> list[str]:
    names = [spec.split("=", 1)[0] for spec in specs]
    installed: dict[str, str] = {}
    if shutil.which("dpkg-query") and names:
        _, out, _ = module.run_command(["dpkg-query", "-W", "-f", "${Package}|${Status}|${Version}\\n", *names])
        for line in out.splitlines():
            name, _, rest = line.partition("|")
            status, _, version = rest.partition("|")
            # "install ok installed", or "hold ok installed" once held.
            if status.endswith(" ok installed"):
                installed[name.split(":")[0]] = version
    missing = []
    for spec in specs:
        name, _, want = spec.partition("=")
        if name not in installed or not fnmatch.fnmatchcase(installed[name], want or "*"):
            missing.append(spec)
    return missing


def missing_rpms(module: AnsibleModule, specs: list[str]) -> list[str]:
    missing = []
    for spec in specs:
        if spec.startswith("@"):
            continue
        rc, _, _ = module.run_command(["rpm", "-q", spec])
        if rc != 0:
            missing.append(spec)
    return missing


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
            "mirror_dir": {"type": "path", "default": "/etc/containerd/certs.d"},
            "mirror_marker": {"type": "str", "default": "cluster-bootstrap setting container_runtime.registry_mirrors"},
        },
        supports_check_mode=True,
    )
    params = module.params
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
    containerd = None
    if shutil.which("containerd"):
        rc, out, _ = module.run_command(["containerd", "--version"])
        containerd = out.strip() if rc == 0 else None
    mirror_files = sorted(path for path in glob.glob(os.path.join(params["mirror_dir"], "*", "hosts.toml"))
                          if params["mirror_marker"] in (_read(path) or ""))
    fstab = _read("/etc/fstab") or ""
    state = {
        "files": {path: file_state(path) for path in params["files"]},
        "dirs": {path: os.path.isdir(path) for path in params["dirs"]},
        "missing": (missing_debs if debian else missing_rpms)(module, params["packages"]),
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
        "containerd_version": containerd,
        "mirror_files": mirror_files,
        "policy_rc_d_ours": POLICY_MARK in (_read("/usr/sbin/policy-rc.d") or ""),
    }
    module.exit_json(changed=False, cb_state=state)


if __name__ == "__main__":
    main()
