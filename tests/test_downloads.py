"""Downloads that fail transiently are tried again with a doubling pause; permanent failures fail at once.

The roles' download module (playbooks/library/cb_fetch.py) run as Ansible runs it, against a mirror stand-in on
this host (tests/lab/mirror.py) that answers 503 twice, 404, resets the connection or stalls; the lab tests run
the same against real nodes (tests/test_faults_lab.py).
"""
from __future__ import annotations

import re
import socket
import threading
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lab.mirror import MirrorServer, read_requests, write_faults
from tests.support import ansible_modules

KEY = "/kubernetes/v1.31/deb/Release.key"


class Mirror:
    def __init__(self, server: MirrorServer, root: Path) -> None:
        self.server, self.root = server, root
        self.url = f"http://127.0.0.1:{server.server_port}"

    def fail(self, *rules: dict[str, Any]) -> None:
        write_faults(self.server.faults_file, list(rules))

    def requests(self, suffix: str) -> list[dict[str, Any]]:
        return read_requests(self.server.log_file, suffix)


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[Mirror]:
    root = tmp_path / "root"
    (root / KEY.lstrip("/")).parent.mkdir(parents=True)
    (root / KEY.lstrip("/")).write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\nplaceholder\n")
    server = MirrorServer("127.0.0.1", 0, root, tmp_path / "faults.json", tmp_path / "requests.log")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Mirror(server, root)
    finally:
        server.shutdown()
        server.server_close()


def fetch(tmp_path: Path, url: str, **args: Any) -> tuple[dict[str, Any], float]:
    """Run cb_fetch as Ansible does (its arguments as JSON); its result and how long it took."""
    started = time.monotonic()
    result = ansible_modules.run("cb_fetch", {"url": url, "dest": str(tmp_path / "key.asc"), "backoff_s": 0.5, **args},
                                 tmp_path)
    return result, time.monotonic() - started


def test_a_mirror_that_fails_twice_is_tried_again_after_a_doubling_pause(mirror: Mirror, tmp_path: Path) -> None:
    mirror.fail({"id": "twice", "path": KEY, "status": 503, "times": 2})
    result, elapsed = fetch(tmp_path, mirror.url + KEY)
    assert not result.get("failed"), result
    assert result["changed"] and (tmp_path / "key.asc").read_text().startswith("-----BEGIN PGP")
    assert result["attempts"] == [{"error": "HTTP 503 Service Unavailable", "transient": True}] * 2
    served = mirror.requests(KEY)
    assert [r["status"] for r in served] == [503, 503, 200]
    # 0.5 s, then 1 s.
    assert served[1]["time"] - served[0]["time"] >= 0.45 and served[2]["time"] - served[1]["time"] >= 0.95
    assert elapsed < 30


def test_a_missing_file_fails_at_once_naming_the_url(mirror: Mirror, tmp_path: Path) -> None:
    result, elapsed = fetch(tmp_path, mirror.url + "/kubernetes/v1.99/deb/Release.key")
    assert result["failed"]
    assert result["msg"] == f"{mirror.url}/kubernetes/v1.99/deb/Release.key: HTTP 404 File not found " \
                            "(a permanent failure: not retried)"
    assert len(mirror.requests("/v1.99/deb/Release.key")) == 1 and elapsed < 10
    assert not (tmp_path / "key.asc").exists()


def test_a_mirror_that_keeps_failing_fails_after_the_bounded_attempts(mirror: Mirror, tmp_path: Path) -> None:
    mirror.fail({"id": "reset", "path": KEY, "reset": True})
    result, _ = fetch(tmp_path, mirror.url + KEY, attempts=3)
    assert result["failed"] and len(mirror.requests(KEY)) == 3
    assert result["msg"].startswith(f"{mirror.url}{KEY}: ") and "(after 3 tries; downloads.attempts)" in result["msg"]
    assert all(attempt["transient"] for attempt in result["attempts"])


def test_a_slow_read_is_a_transient_failure(mirror: Mirror, tmp_path: Path) -> None:
    mirror.fail({"id": "slow", "path": KEY, "stall_s": 3, "times": 1})
    result, _ = fetch(tmp_path, mirror.url + KEY, timeout=1)
    assert not result.get("failed"), result
    assert result["attempts"] == [{"error": "timed out", "transient": True}]


def test_a_file_already_there_is_kept_without_asking_the_mirror(mirror: Mirror, tmp_path: Path) -> None:
    (tmp_path / "key.asc").write_text("kept")
    result, _ = fetch(tmp_path, mirror.url + KEY)
    assert not result["changed"] and (tmp_path / "key.asc").read_text() == "kept"
    assert mirror.requests(KEY) == []


def test_a_refused_connection_is_transient_and_a_local_file_that_is_missing_is_not(tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    refused, _ = fetch(tmp_path, f"http://127.0.0.1:{port}/key", attempts=2)
    assert refused["failed"] and [a["transient"] for a in refused["attempts"]] == [True, True]
    missing, _ = fetch(tmp_path, f"file://{tmp_path}/nowhere/Release.key")
    assert missing["failed"] and "(a permanent failure: not retried)" in missing["msg"]
    assert len(missing["attempts"]) == 1


def test_what_counts_as_transient() -> None:
    module = ansible_modules.load("cb_fetch")
    for code, transient in ((500, True), (502, True), (503, True), (504, True), (429, True), (408, True),
                            (404, False), (403, False), (410, False), (501, False), (401, False)):
        error = urllib.error.HTTPError("http://mirror/x", code, "reason", {}, None)  # type: ignore[arg-type]
        assert module.classify(error)[1] is transient, code
    assert module.classify(urllib.error.URLError(socket.gaierror(socket.EAI_NONAME, "Name or service not known")))[1] \
        is False
    assert module.classify(urllib.error.URLError(socket.gaierror(socket.EAI_AGAIN, "Temporary failure")))[1] is True
    assert module.classify(ConnectionResetError(104, "Connection reset by peer"))[1] is True
    assert module.pauses(4, 1) == [1, 2, 4] and module.pauses(1, 1) == [] and module.pauses(9, 1)[-1] == 30


def test_what_counts_as_transient_in_apts_output() -> None:
    """apt-get update's own words (recorded on a lab node, apt 2.6), read by the module that retries it."""
    module = ansible_modules.load("cb_apt_update")
    transient = module.apt_transient
    unavailable = ("Err:1 http://10.88.4.1:8081/kubernetes/v1.31/deb  InRelease\n  503  Service Unavailable [IP: "
                   "10.88.4.1 8081]\nReading package lists...\nE: Failed to fetch http://10.88.4.1:8081/kubernetes/"
                   "v1.31/deb/InRelease  503  Service Unavailable [IP: 10.88.4.1 8081]\nE: The repository "
                   "'http://10.88.4.1:8081/kubernetes/v1.31/deb  InRelease' is not signed.\n")
    assert transient(unavailable)
    assert module.failures(unavailable)[0].startswith("E: Failed to fetch http://10.88.4.1:8081/")
    assert not transient(unavailable.replace("503  Service Unavailable", "404  Not Found"))
    assert not transient(unavailable.replace("503  Service Unavailable", "501  Not Implemented"))
    assert transient("W: Failed to fetch http://mirror/dists/x/InRelease  Could not connect to mirror:80 "
                     "(10.0.0.1), connection timed out\n")
    assert not transient("W: GPG error: http://mirror ./ InRelease: The following signatures couldn't be "
                         "verified because the public key is not available: NO_PUBKEY 234654DA9A296436\n"
                         "E: The repository 'http://mirror ./ InRelease' is not signed.\n")


def test_apt_and_a_key_download_retry_the_same_answers() -> None:
    """One list of the answers that pass (playbooks/module_utils/cb_retry.py), read alike by the module that
    downloads a key and the one that runs apt: a mirror's answer retried by one is retried by the other."""
    fetch_module, apt_module = ansible_modules.load("cb_fetch"), ansible_modules.load("cb_apt_update")
    for code in range(400, 600):
        error = urllib.error.HTTPError("http://mirror/x", code, "reason", {}, None)  # type: ignore[arg-type]
        apt_says = f"E: Failed to fetch http://mirror/dists/x/InRelease  {code}  Reason [IP: 127.0.0.1 80]\n"
        assert fetch_module.classify(error)[1] is apt_module.apt_transient(apt_says), code
    # Nothing under playbooks/ keeps a list of its own (the roles' YAML included).
    from provision.resources import PLAYBOOKS_DIR

    spelled = [path for path in PLAYBOOKS_DIR.rglob("*") if path.suffix in (".py", ".yml")
               and path.parent.name != "module_utils" and re.search(r"\b(408|425|429)\b", path.read_text())]
    assert spelled == []
