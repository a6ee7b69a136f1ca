#!/usr/bin/python
"""Read one apt source's package lists (`apt-get update` of that source alone), retrying what fails transiently.

apt retries a connection that fails, but not a mirror's answer: a 503 for InRelease fails the update at once. So
the update is run again, after a pause that doubles each time (1 s, 2 s, 4 s, ...), up to `attempts` tries
(downloads.attempts), while every fetch that failed failed transiently (5xx but 501/505, 408, 425, 429, a connection
that failed, timed out or was reset, a name the resolver could not look up for now, a mirror in the middle of a
sync); a permanent failure (404 or another 4xx, a signature that does not verify, a key that is missing) fails at
once. A failed fetch is an error, not a warning (APT::Update::Error-Mode=any). Once the lists are read, the
checksum of `inputs` (the source's list and key) is written to `stamp`, so the role reads them again whenever they
differ from what apt last read, also after a run killed between listing the source and reading it.
"""
from __future__ import annotations

import hashlib
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: cb_apt_update
short_description: apt-get update of one source, retrying transient failures with a doubling pause
options:
  sources:
    description: The source's deb822 file, relative to /etc/apt (sources.list.d/cb-<id>.sources).
    type: str
    required: true
  inputs:
    description: The files whose checksum the stamp records (the source's list and key).
    type: list
    elements: path
    required: true
  stamp:
    description: Where the checksum of the inputs apt has read goes.
    type: path
    required: true
  attempts:
    description: Tries in all when failures are transient.
    type: int
    default: 4
  backoff_s:
    description: The first pause between tries; each next one is twice as long.
    type: float
    default: 1
"""

# "E: Failed to fetch http://mirror/.../InRelease  503  Service Unavailable [IP: ...]" and apt's words for a
# connection that did not work out.
FETCH_FAILED = re.compile(r"Failed to fetch \S+\s+(\d{3})\s")
TRANSIENT_CODES = frozenset({408, 425, 429}) | (frozenset(range(500, 600)) - {501, 505})
TRANSIENT_TEXT = re.compile(r"Could not connect|Connection failed|Connection timed out|Connection reset|"
                            r"Temporary failure resolving|Unable to connect|Undetermined Error|Hash Sum mismatch|"
                            r"Mirror sync in progress")
MAX_PAUSE_S = 30


def failures(output: str) -> list[str]:
    """apt's error lines (E:, and W: for fetches) in its output."""
    return [line.strip() for line in output.splitlines()
            if line.startswith("E:") or (line.startswith("W:") and "Failed to fetch" in line)]


def transient(output: str) -> bool:
    """Whether every fetch that failed failed in a way that passes (and one did)."""
    codes = [int(code) for code in FETCH_FAILED.findall(output)]
    if any(code not in TRANSIENT_CODES for code in codes):
        return False
    return bool(codes) or bool(TRANSIENT_TEXT.search(output))


def pauses(attempts: int, backoff_s: float) -> list[float]:
    return [min(MAX_PAUSE_S, backoff_s * 2 ** index) for index in range(max(0, attempts - 1))]


def checksum(paths: list[str]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sources": {"type": "str", "required": True},
            "inputs": {"type": "list", "elements": "path", "required": True},
            "stamp": {"type": "path", "required": True},
            "attempts": {"type": "int", "default": 4},
            "backoff_s": {"type": "float", "default": 1},
        },
    )
    params = module.params
    # Only this source: re-reading every source (the OS archive too) costs seconds per node.
    command = ["apt-get", "update", "-q", "-o", f"Dir::Etc::sourcelist={params['sources']}",
               "-o", "Dir::Etc::sourceparts=-", "-o", "APT::Get::List-Cleanup=0", "-o", "APT::Update::Error-Mode=any"]
    tried: list[dict[str, object]] = []
    waits = pauses(params["attempts"], params["backoff_s"])
    while True:
        rc, out, err = module.run_command(command, environ_update={"DEBIAN_FRONTEND": "noninteractive"})
        if rc == 0:
            break
        passes = transient(out + "\n" + err)
        tried.append({"errors": failures(out + "\n" + err)[:5], "transient": passes})
        why = "; ".join(failures(out + "\n" + err)[:3]) or err.strip()[-300:] or f"apt-get update exited {rc}"
        if not passes:
            module.fail_json(msg=f"{why} (a permanent failure: not retried)", rc=rc, attempts=tried, stdout=out,
                             stderr=err)
        if len(tried) > len(waits):
            module.fail_json(msg=f"{why} (after {len(tried)} tries; downloads.attempts)", rc=rc, attempts=tried,
                             stdout=out, stderr=err)
        time.sleep(waits[len(tried) - 1])
    os.makedirs(os.path.dirname(params["stamp"]), exist_ok=True)
    with open(params["stamp"], "w") as handle:
        handle.write(checksum(params["inputs"]) + "\n")
    module.exit_json(changed=True, attempts=tried, stdout=out, stderr=err)


if __name__ == "__main__":
    main()
