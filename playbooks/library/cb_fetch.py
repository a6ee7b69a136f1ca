#!/usr/bin/python
"""Download one file (a repository's signing key, a release manifest), retrying what fails transiently.

A mirror answering 502/503/504, a connection reset or refused, a read that times out: such failures pass
(module_utils/cb_retry.py says which), and the download is tried again after a pause that doubles each time (1 s,
2 s, 4 s, ...), up to `attempts` tries (downloads.attempts). A failure that will not pass (404, 403, a name that
does not resolve, a certificate that does not verify, a missing local file) fails at once. Every attempt's error
is returned under `attempts`, and `msg` names the URL, the error and whether it was retried; the roles add the
setting that changes the source.

As get_url without force: a file already at `dest` is kept (a re-run downloads nothing).
"""
from __future__ import annotations

import http.client
import os
import socket
import ssl
import tempfile
import time
import urllib.error

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cb_retry import TRANSIENT_HTTP, pauses
from ansible.module_utils.urls import open_url

DOCUMENTATION = r"""
module: cb_fetch
short_description: Download a file, retrying transient failures with a doubling pause (cb_fetch)
options:
  url:
    description: http(s):// or file:// URL.
    type: str
    required: true
  dest:
    description: Where the file goes; kept as it is when it already exists.
    type: path
    required: true
  mode:
    description: The file's mode.
    type: raw
    default: "0644"
  timeout:
    description: Seconds to wait for a connection and for each read.
    type: int
    default: 20
  attempts:
    description: Tries in all when failures are transient.
    type: int
    default: 4
  backoff_s:
    description: The first pause between tries; each next one is twice as long.
    type: float
    default: 1
"""


def classify(error: BaseException) -> tuple[str, bool]:
    """One line for an error, and whether it is transient (worth another try)."""
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}", error.code in TRANSIENT_HTTP
    reason = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(reason, socket.gaierror):
        # A resolver that answers "no such name" will say it again; "try again" is the resolver's own hiccup.
        return f"cannot resolve the host name ({reason.strerror or reason})", reason.errno == socket.EAI_AGAIN
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"the server's certificate does not verify ({reason.verify_message or reason})", False
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "timed out", True
    if isinstance(reason, (ConnectionError, http.client.IncompleteRead, http.client.RemoteDisconnected,
                           http.client.BadStatusLine, ssl.SSLError)):
        return f"{type(reason).__name__}: {reason}", True
    if isinstance(reason, FileNotFoundError):
        return f"no such file ({reason.filename or reason})", False
    return f"{type(reason).__name__}: {reason}", False


def fetch(url: str, timeout: int) -> bytes:
    response = open_url(url, timeout=timeout, follow_redirects="safe")
    try:
        return response.read()
    finally:
        response.close()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "mode": {"type": "raw", "default": "0644"},
            "timeout": {"type": "int", "default": 20},
            "attempts": {"type": "int", "default": 4},
            "backoff_s": {"type": "float", "default": 1},
        },
        supports_check_mode=True,
    )
    url, dest = module.params["url"], module.params["dest"]
    result: dict[str, object] = {"changed": False, "url": url, "dest": dest, "attempts": []}
    if os.path.exists(dest):
        result["changed"] = module.set_mode_if_different(dest, module.params["mode"], False)
        module.exit_json(**result)
    if module.check_mode:
        module.exit_json(**{**result, "changed": True})
    tried: list[dict[str, object]] = []
    result["attempts"] = tried
    waits = pauses(module.params["attempts"], module.params["backoff_s"])
    while True:
        try:
            data = fetch(url, module.params["timeout"])
            break
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            text, transient = classify(exc)
            tried.append({"error": text, "transient": transient})
            if not transient:
                module.fail_json(msg=f"{url}: {text} (a permanent failure: not retried)", **result)
            if len(tried) > len(waits):
                module.fail_json(msg=f"{url}: {text} (after {len(tried)} tries; downloads.attempts)", **result)
            time.sleep(waits[len(tried) - 1])
    directory = os.path.dirname(dest) or "."
    fd, partial = tempfile.mkstemp(dir=directory, prefix=".cb_fetch.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        module.set_mode_if_different(partial, module.params["mode"], False)
        os.replace(partial, dest)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    module.exit_json(**{**result, "changed": True, "size": len(data)})


if __name__ == "__main__":
    main()
