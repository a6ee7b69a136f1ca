"""The trainer's report to Kubernetes: the termination message (/dev/termination-log), which the smoke test's
driver reads as the run's result, the metrics on success or the first rank's error on failure. Kubernetes keeps
at most 4096 bytes of it: fit_json cuts the longest strings in their middle so the message is always one whole
JSON document."""
from __future__ import annotations

import fcntl
import json
import socket
import sys
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import get_error_handler

TERMINATION_LOG = Path("/dev/termination-log")
TERMINATION_MESSAGE_BYTES = 4096   # Kubernetes keeps at most this much of a container's termination message


class TrainerError(Exception):
    """A failure the user can act on; its message goes to the termination log."""


def _dump(document: Any) -> str:
    # ASCII only, so that characters and bytes count alike.
    return json.dumps(document, separators=(",", ":"), ensure_ascii=True)


def _strings(document: Any) -> list[tuple[Any, Any, str]]:
    """(container, key, value) of every string in the document, at any depth."""
    found = []
    stack = [document]
    while stack:
        node = stack.pop()
        for key, value in (node.items() if isinstance(node, dict) else enumerate(node)):
            if isinstance(value, str):
                found.append((node, key, value))
            elif isinstance(value, (dict, list)):
                stack.append(value)
    return found


def _water_level(lengths: list[int], excess: int) -> int:
    """The largest cap on the strings' lengths that removes at least `excess` characters: the longest
    strings are cut to a common length, shorter ones are left alone."""
    lengths = sorted(lengths, reverse=True)
    total = 0
    for count, length in enumerate(lengths, start=1):
        total += length
        cap = (total - excess) // count
        following = lengths[count] if count < len(lengths) else 0
        if cap >= following:
            return max(0, cap)
    return 0


def _encoded_length(text: str) -> int:
    return len(_dump(text)) - 2


def cut_middle(value: str, budget: int) -> str:
    """`value` with its middle replaced by a note of how much went, at most `budget` characters in JSON.
    Both ends stay: an error's first line names it, its last lines often hold the cause."""
    marker_room = len(f" [...{len(value)} characters cut to fit...] ")
    room = budget - marker_room
    if room <= 0:
        return ""
    head = tail = 0
    spent = 0
    while head < len(value) and spent + _encoded_length(value[head]) <= room // 2:
        spent += _encoded_length(value[head])
        head += 1
    while tail < len(value) - head and spent + _encoded_length(value[-1 - tail]) <= room:
        spent += _encoded_length(value[-1 - tail])
        tail += 1
    cut = len(value) - head - tail
    return value[:head] + f" [...{cut} characters cut to fit...] " + value[len(value) - tail:] if cut else value


def fit_json(payload: dict[str, Any], limit: int = TERMINATION_MESSAGE_BYTES) -> str:
    """The payload as compact JSON of at most `limit` bytes. The longest string fields lose their middle
    until it fits, so the message is always one whole JSON document."""
    document = json.loads(_dump(payload))
    text = _dump(document)
    while len(text) > limit:
        strings = [entry for entry in _strings(document) if entry[2]]
        if strings:
            cap = _water_level([_encoded_length(value) for _, _, value in strings], len(text) - limit)
            for container, key, value in strings:
                if _encoded_length(value) > cap:
                    container[key] = cut_middle(value, cap)
        else:
            # Nothing left to shorten: whole fields go, the largest first.
            del document[max(document, key=lambda k: len(_dump(document[k])))]
        text = _dump(document)
    return text


def write_termination_log(payload: dict[str, Any], path: Path, *, only_if_empty: bool = False) -> bool:
    """Kubernetes shows this file's content as the container's termination message. Several ranks may share
    it (one container); under the lock, `only_if_empty` keeps the first failure there: the root cause."""
    if not path.exists():
        return False
    text = fit_json(payload)
    with path.open("r+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        if only_if_empty and handle.read().strip():
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(text)
    return True


def report_failure(exc: BaseException, path: Path, *, rank: int, world: int, local_rank: int, local_world: int,
                   expected: bool) -> None:
    """Make this rank's failure visible wherever the verdict may look: stderr, torchrun's per-rank error
    file (TORCHELASTIC_ERROR_FILE, which its failure summary reads), and the termination log at `path`.
    Must be called inside the except block: the error file takes the traceback being handled. `expected`:
    a TrainerError or DataError, whose message is the whole story."""
    cause = str(exc) if expected else f"{type(exc).__name__}: {exc}"
    where = f"rank {rank} of {world} (local rank {local_rank} on {socket.gethostname()}): " if world > 1 else ""
    print(f"error: {where}{cause}", file=sys.stderr, flush=True)
    get_error_handler().record_exception(exc)
    write_termination_log({"error": where + cause, "rank": rank, "world_size": world,
                           "exception": type(exc).__name__, "hostname": socket.gethostname()},
                          path, only_if_empty=local_world > 1)
