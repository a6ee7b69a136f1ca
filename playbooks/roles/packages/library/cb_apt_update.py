#!/usr/bin/python
"""Read apt's package lists (one source's alone, or every source's), retrying what fails transiently, and
install packages in the same call.

apt retries a connection that fails, but not a mirror's answer: a 503 for InRelease fails the update at once. So
the update (and the install) is run again, after a pause that doubles each time (1 s, 2 s, 4 s, ...), up to
`attempts` tries (downloads.attempts), while every fetch that failed failed transiently (module_utils/cb_retry.py
says which: a mirror's answer that says "later", a connection that failed, timed out or was reset, a name the
resolver could not look up for now, a mirror in the middle of a sync); a permanent failure (404 or another 4xx, a
signature that does not verify, a key that is missing) fails at once. A failed fetch is an error, not a warning
(APT::Update::Error-Mode=any).

With `sources` (one source): once its lists are read, the checksum of `inputs` (the source's list and key) is
written to `stamp`, so the role reads them again whenever they differ from what apt last read, also after a run
killed between listing the source and reading it. Without: every source is read unless `stamp` says a run read
them less than `valid_s` ago, so that one package transaction per node reads the lists once.

With `install` (package specs, apt's `name` or `name=version-glob`): one `apt-get install` of those not installed at
a matching version (module_utils/cb_packages.py, as the node read judges them), without recommends; nothing when
every one is. `defer_starts` keeps the daemons they bring from starting with the package's own configuration
(a policy-rc.d of ours for the transaction's time, where the node has none): prepare configures them, then
starts them once. A policy-rc.d of ours that a killed run left is removed first, whatever else the call does.
"""
from __future__ import annotations

import hashlib
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cb_packages import POLICY_MARK, POLICY_RC_D, missing_debs
from ansible.module_utils.cb_retry import apt_transient, pauses

DOCUMENTATION = r"""
module: cb_apt_update
short_description: apt-get update (one source or all) and install, retrying transient failures with a doubling pause
options:
  sources:
    description: The source's deb822 file, relative to /etc/apt (sources.list.d/cb-<id>.sources); every source when
      left out.
    type: str
  inputs:
    description: The files whose checksum the stamp records (the source's list and key), with sources.
    type: list
    elements: path
    default: []
  stamp:
    description: Where the checksum of the inputs apt has read goes (with sources), or the time every source was
      last read (without).
    type: path
    required: true
  valid_s:
    description: Without sources, lists read less than this long ago (the stamp's age) are not read again.
    type: int
    default: 3600
  read_lists:
    description: Without sources, whether to read every source's lists (when they are older than valid_s).
    type: bool
    default: true
  install:
    description: Package specs to install in one apt-get call after the lists are read (those already installed are left).
    type: list
    elements: str
    default: []
  allow_change:
    description: Let the install move held packages and downgrade (a changed kubernetes.version).
    type: bool
    default: false
  defer_starts:
    description: Daemons the install brings do not start until prepare starts them, configured.
    type: bool
    default: false
  attempts:
    description: Tries in all when failures are transient.
    type: int
    default: 4
  backoff_s:
    description: The first pause between tries; each next one is twice as long.
    type: float
    default: 1
"""

def failures(output: str) -> list[str]:
    """apt's error lines (E:, and W: for fetches) in its output."""
    return [line.strip() for line in output.splitlines()
            if line.startswith("E:") or (line.startswith("W:") and "Failed to fetch" in line)]


def checksum(paths: list[str]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()



def update_command(sources: str | None) -> list[str]:
    command = ["apt-get", "update", "-q", "-o", "APT::Update::Error-Mode=any"]
    if sources:
        # Only this source: re-reading every source (the OS archive too) costs seconds per node.
        command += ["-o", f"Dir::Etc::sourcelist={sources}", "-o", "Dir::Etc::sourceparts=-",
                    "-o", "APT::Get::List-Cleanup=0"]
    return command


def install_command(specs: list[str], allow_change: bool) -> list[str]:
    # What a Kubernetes node needs is listed explicitly; recommends (git, perl, ...) only cost downloads. Only
    # missing packages are named, so --reinstall changes nothing for the others: it puts back one a stopped machine
    # left half-installed, which apt would otherwise call "already the newest version".
    command = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "--reinstall", "-o",
               "DPkg::Lock::Timeout=60"]
    if allow_change:
        command += ["--allow-change-held-packages", "--allow-downgrades"]
    return [*command, "--", *specs]


def lists_fresh(stamp: str, valid_s: int) -> bool:
    try:
        return time.time() - os.stat(stamp).st_mtime < valid_s
    except OSError:
        return False


def run_tried(module: AnsibleModule, command: list[str], what: str, tried: list[dict[str, object]],
              waits: list[float]) -> tuple[str, str]:
    """Run `command` until it succeeds, tried again while its failures pass; fails the module naming why."""
    while True:
        rc, out, err = module.run_command(command, environ_update={"DEBIAN_FRONTEND": "noninteractive"})
        if rc == 0:
            return out, err
        passes = apt_transient(out + "\n" + err)
        tried.append({"errors": failures(out + "\n" + err)[:5], "transient": passes})
        why = "; ".join(failures(out + "\n" + err)[:3]) or err.strip()[-300:] or f"{what} exited {rc}"
        if not passes:
            module.fail_json(msg=f"{why} (a permanent failure: not retried)", rc=rc, attempts=tried, stdout=out,
                             stderr=err)
        if len(tried) > len(waits):
            module.fail_json(msg=f"{why} (after {len(tried)} tries; downloads.attempts)", rc=rc, attempts=tried,
                             stdout=out, stderr=err)
        time.sleep(waits[len(tried) - 1])


def remove_left_policy() -> bool:
    """Remove a policy-rc.d of ours that a killed run left (daemons start again); whether there was one."""
    try:
        with open(POLICY_RC_D, encoding="utf-8") as handle:
            if POLICY_MARK not in handle.read():
                return False
    except FileNotFoundError:
        return False
    os.unlink(POLICY_RC_D)
    return True


def hold_starts() -> bool:
    """Put our policy-rc.d in place unless the node has its own; whether ours is there."""
    try:
        with open(POLICY_RC_D, encoding="utf-8") as handle:
            if POLICY_MARK not in handle.read():
                return False
    except FileNotFoundError:
        pass
    with open(POLICY_RC_D, "w", encoding="utf-8") as handle:
        handle.write(f"#!/bin/sh\n{POLICY_MARK}\nexit 101\n")
    os.chmod(POLICY_RC_D, 0o755)
    return True


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sources": {"type": "str"},
            "inputs": {"type": "list", "elements": "path", "default": []},
            "stamp": {"type": "path", "required": True},
            "valid_s": {"type": "int", "default": 3600},
            "read_lists": {"type": "bool", "default": True},
            "install": {"type": "list", "elements": "str", "default": []},
            "allow_change": {"type": "bool", "default": False},
            "defer_starts": {"type": "bool", "default": False},
            "attempts": {"type": "int", "default": 4},
            "backoff_s": {"type": "float", "default": 1},
        },
    )
    params = module.params
    removed = remove_left_policy()
    tried: list[dict[str, object]] = []
    waits = pauses(params["attempts"], params["backoff_s"])
    out = err = ""
    updated = False
    if params["sources"] or (params["read_lists"] and not lists_fresh(params["stamp"], params["valid_s"])):
        out, err = run_tried(module, update_command(params["sources"]), "apt-get update", tried, waits)
        updated = True
        os.makedirs(os.path.dirname(params["stamp"]), exist_ok=True)
        with open(params["stamp"], "w") as handle:
            handle.write((checksum(params["inputs"]) if params["sources"] else "read") + "\n")
    missing = missing_debs(module.run_command, params["install"]) if params["install"] else []
    if missing:
        held = hold_starts() if params["defer_starts"] else False
        try:
            out, err = run_tried(module, install_command(missing, params["allow_change"]), "apt-get install", tried,
                                 waits)
        finally:
            if held:
                os.unlink(POLICY_RC_D)
    module.exit_json(changed=updated or bool(missing) or removed, installed=missing, attempts=tried, stdout=out,
                     stderr=err)


if __name__ == "__main__":
    main()
