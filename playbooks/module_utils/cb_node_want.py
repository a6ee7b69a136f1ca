"""Which parts of a node differ from what the roles want: the comparison behind every role's skip.

The roles say what they want, part by part (each role's `<role>_want`, from the values Python renders:
provision/render/playbook_vars.py's `cb_prepare` and `cb_node_tables`); roles/node_state/library/cb_node_state.py
reads the node and hands the read here; `differs` names the parts that do not hold, and each role runs exactly those.
Nothing here touches the node: the read is data in, the names of the parts out.

A part is a dict with a `name` and any of these checks, all of which must hold:

    always: true                         never holds (work the read cannot judge: it runs every time)
    files: {path: {content, mode, stripped, absent, content_by_major: {version, <major>: content}}}
    dirs: [path]                         each exists
    hostname: name                       the running hostname and /etc/hostname
    block: {path, marker, content}       the text between "# BEGIN <marker>" and "# END <marker>", stripped
    swap_off: true                       no active swap, no swap line in /etc/fstab
    units: {unit: {active, enabled, load, load_not, fresh: [files]}}   systemd's states (<state>_not: anything
                                         but); fresh: its main process is newer than these files (a killed run did
                                         not leave it on an older configuration)
    sysctls: {key: value}                live values
    assignments: {path, values: {key: value}}   exactly these `key = value` lines in the file for these keys
    line: {path, var, line}              the line is in the file, and the variable is assigned on one line only
    modules_loaded: [name]               loaded, or built into the kernel
    selinux_permissive: true|now|config  not enforcing now (/sys/fs/selinux/enforce), nor in /etc/selinux/config
    cgroup2: true                        /sys/fs/cgroup is the unified hierarchy
    held: [name]                         held (apt-mark) or version-locked (dnf)
    installed: [spec]                    none missing
    versions: [name]                     the version command of the read answered
    stamp: {path, of: [path]}            the file holds each of these files' sha256 ("<hex>  -" lines)
    repo: {list, key, stamp, sources}    an apt repository as written: its list is `sources`, list and key mode
                                         0644, and the stamp says apt read exactly this list and key
    no_marked: {glob, marker, keep: [path]}    no file the glob finds carries the mark, but those kept

Python 3.9 (EL9's interpreter): this runs on the node.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

State = dict[str, Any]


def _file(state: State, path: str) -> dict[str, Any]:
    return state["files"].get(path) or {"exists": False, "content": None, "sha256": None, "mode": None}


def block_between(text: str, marker: str) -> str | None:
    """The text between "# BEGIN <marker>" and "# END <marker>" lines, stripped; None without both."""
    begin, end = f"# BEGIN {marker}\n", f"# END {marker}"
    if begin not in text or end not in text.split(begin, 1)[1]:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def assignments(text: str, keys: Iterable[str]) -> list[str]:
    """The `key = value` lines of a sysctl.d file for these keys, as sorted `key=value`."""
    wanted = set(keys)
    found = []
    for match in re.finditer(r"(?m)^\s*(\S+?)\s*=\s*(\S*)\s*$", text):
        if match.group(1) in wanted:
            found.append(f"{match.group(1)}={match.group(2)}")
    return sorted(found)


def major(version_line: str | None) -> str:
    """The major version in a `--version` line (containerd's: "containerd <repo> v2.1.4 <commit>")."""
    match = re.search(r"\sv?(\d+)\.\d+\.\d+", version_line or "")
    return match.group(1) if match else "1"


def _file_holds(state: State, path: str, want: dict[str, Any]) -> bool:
    found = _file(state, path)
    if want.get("absent"):
        return not found["exists"]
    if not found["exists"]:
        return False
    if "mode" in want and found["mode"] != want["mode"]:
        return False
    if "content" in want and found["content"] != want["content"]:
        return False
    if "stripped" in want and (found["content"] or "").strip() != want["stripped"]:
        return False
    by_major = want.get("content_by_major")
    if by_major is not None:
        chosen = by_major.get(major(state["versions"].get(by_major["version"])))
        if chosen is None or found["content"] != chosen:
            return False
    return True


def _unit_holds(state: State, unit: str, want: dict[str, Any]) -> bool:
    found = state["units"].get(unit) or {"load": "", "active": "", "enabled": ""}
    for key in ("load", "active", "enabled"):
        if key in want and found.get(key, "") != want[key]:
            return False
        if f"{key}_not" in want and found.get(key, "") == want[f"{key}_not"]:
            return False
    return not ("fresh" in want and unit in state["stale"])


def _repo_holds(state: State, want: dict[str, Any]) -> bool:
    listed, key, stamp = _file(state, want["list"]), _file(state, want["key"]), _file(state, want["stamp"])
    if not isinstance(listed["content"], str) or not isinstance(key["content"], str):
        return False
    read = hashlib.sha256((listed["content"] + key["content"]).encode()).hexdigest() + "\n"
    return (listed["content"] == want["sources"] and listed["mode"] == "0644" and key["mode"] == "0644"
            and stamp["content"] == read)


def _line_holds(state: State, want: dict[str, Any]) -> bool:
    text = _file(state, want["path"])["content"] or ""
    assigned = re.findall(rf"(?m)^{re.escape(want['var'])}=", text)
    return (want["line"] + "\n") in text and len(assigned) == 1


def _check(state: State, kind: str, want: Any) -> bool:
    if kind == "always":
        return not want
    if kind == "files":
        return all(_file_holds(state, path, file_want) for path, file_want in want.items())
    if kind == "dirs":
        return all(state["dirs"].get(path, False) for path in want)
    if kind == "hostname":
        return state["hostname"] == want and (_file(state, "/etc/hostname")["content"] or "").strip() == want
    if kind == "block":
        found = block_between(_file(state, want["path"])["content"] or "", want["marker"])
        return found is not None and want["content"] is not None and found == want["content"].strip()
    if kind == "swap_off":
        return not want or (not state["swap"]["active"] and not state["swap"]["fstab"])
    if kind == "units":
        return all(_unit_holds(state, unit, unit_want) for unit, unit_want in want.items())
    if kind == "sysctls":
        return all(state["sysctls"].get(key) == str(value) for key, value in want.items())
    if kind == "assignments":
        wanted = sorted(f"{key}={value}" for key, value in want["values"].items())
        return assignments(_file(state, want["path"])["content"] or "", want["values"]) == wanted
    if kind == "line":
        return _line_holds(state, want)
    if kind == "modules_loaded":
        return set(want) <= set(state["modules_loaded"])
    if kind == "selinux_permissive":
        enforce = (_file(state, "/sys/fs/selinux/enforce")["content"] or "").strip()
        config = _file(state, "/etc/selinux/config")["content"] or ""
        now_holds = want == "config" or enforce != "1"
        config_holds = want == "now" or not re.search(r"(?m)^SELINUX=enforcing\s*$", config)
        return not want or (now_holds and config_holds)
    if kind == "cgroup2":
        return not want or state["cgroup_fs"] == "cgroup2fs"
    if kind == "held":
        return set(want) <= set(state["holds"])
    if kind == "installed":
        return not set(want) & set(state["missing"])
    if kind == "versions":
        return all(isinstance(state["versions"].get(name), str) for name in want)
    if kind == "stamp":
        sums = "".join(f"{_file(state, path)['sha256']}  -\n" for path in want["of"])
        return all(_file(state, path)["exists"] for path in want["of"]) and _file(state, want["path"])["content"] == sums
    if kind == "repo":
        return _repo_holds(state, want)
    if kind == "no_marked":
        return not set(state["marked"].get(want["glob"], [])) - set(want.get("keep", []))
    raise ValueError(f"a part wants an unknown check: {kind}")


def differs(state: State, parts: Iterable[dict[str, Any]]) -> list[str]:
    """The names of the parts whose checks do not all hold, in the order given."""
    return [part["name"] for part in parts
            if not all(_check(state, kind, want) for kind, want in part.items() if kind != "name")]


def reads(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """What the read must include for these parts to be judged: their files, dirs, units, sysctls, modules,
    versions, stale units and marked globs (merged with the roles' own requests by cb_node_state)."""
    found: dict[str, Any] = {"files": [], "dirs": [], "units": [], "sysctls": [], "kernel_modules": [],
                             "packages": [], "stale": {}, "marked": []}
    for part in parts:
        found["files"] += list(part.get("files", {}))
        found["dirs"] += list(part.get("dirs", []))
        found["units"] += list(part.get("units", {}))
        found["sysctls"] += list(part.get("sysctls", {}))
        found["kernel_modules"] += list(part.get("modules_loaded", []))
        found["packages"] += list(part.get("installed", []))
        for unit, unit_want in part.get("units", {}).items():
            if "fresh" in unit_want:
                found["stale"][unit] = list(unit_want["fresh"])
        for kind in ("block", "assignments", "line"):
            if kind in part:
                found["files"].append(part[kind]["path"])
        if "hostname" in part:
            found["files"].append("/etc/hostname")
        if "selinux_permissive" in part:
            found["files"] += ["/sys/fs/selinux/enforce", "/etc/selinux/config"]
        if "stamp" in part:
            found["files"] += [part["stamp"]["path"], *part["stamp"]["of"]]
        if "repo" in part:
            found["files"] += [part["repo"]["list"], part["repo"]["key"], part["repo"]["stamp"]]
        if "no_marked" in part:
            found["marked"].append({"glob": part["no_marked"]["glob"], "marker": part["no_marked"]["marker"]})
    return found
