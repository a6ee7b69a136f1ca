"""What the download modules call a failure that passes, and how long they wait before trying again.

Shared by library/cb_fetch.py (one file over HTTP(S)) and roles/packages/library/cb_apt_update.py (apt's lists
and packages): a mirror's answer that says "later", a connection that failed, timed out or was reset, a name the
resolver could not look up for now, a mirror in the middle of a sync. Anything else (404 or another 4xx, 501 and
505, a signature that does not verify) will fail the same way again and is not retried. The tries are bounded by
downloads.attempts; the pause doubles after each, up to MAX_PAUSE_S.
"""
from __future__ import annotations

import re

# HTTP answers that say "try again later": a timeout, too early, too many requests, and every 5xx but 501 and 505
# (not implemented, version not supported), which will not change.
TRANSIENT_HTTP = frozenset({408, 425, 429}) | (frozenset(range(500, 600)) - {501, 505})

# apt's words for a fetch that failed ("E: Failed to fetch http://mirror/.../InRelease  503  Service Unavailable
# [IP: ...]": the code is judged by TRANSIENT_HTTP) and for a connection that did not work out.
APT_FETCH_FAILED = re.compile(r"Failed to fetch \S+\s+(\d{3})\s")
APT_TRANSIENT_TEXT = re.compile(r"Could not connect|Connection failed|Connection timed out|Connection reset|"
                                r"Temporary failure resolving|Unable to connect|Undetermined Error|Hash Sum mismatch|"
                                r"Mirror sync in progress")

# Bounds a run's wait: with the default 4 tries, 1 + 2 + 4 s.
MAX_PAUSE_S = 30


def apt_transient(output: str) -> bool:
    """Whether every fetch apt says failed failed in a way that passes (and one did)."""
    codes = [int(code) for code in APT_FETCH_FAILED.findall(output)]
    if any(code not in TRANSIENT_HTTP for code in codes):
        return False
    return bool(codes) or bool(APT_TRANSIENT_TEXT.search(output))


def pauses(attempts: int, backoff_s: float) -> list[float]:
    """The pauses before the 2nd, 3rd, ... try: `backoff_s`, then twice as long each time."""
    return [min(MAX_PAUSE_S, backoff_s * 2 ** index) for index in range(max(0, attempts - 1))]
