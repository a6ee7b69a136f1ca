"""A mirror stand-in: a directory served over HTTP that fails on purpose, the way flaky or broken mirrors do.

Faults are rules in a JSON file the server reads on every request (so a test changes them while it runs):

    [{"id": "503-twice", "path": "/kubernetes/v1.31/deb/Release.key", "status": 503, "times": 2}]

A rule matches a request whose path ends with its `path`; it answers with `status` (no body), or with `reset`
(the connection closed without an answer), or, with `stall_s`, answers normally after that long (a slow read); for
the first `times` matching requests (every one when `times` is absent), counted per rule `id`. Every request is
logged as one JSON line (time, path, status) to the log file, which `requests()` reads back.

Run inside a lab's hub (`Lab.serve_mirror`, reachable from the nodes only) or in a thread on this host
(`MirrorServer`, for tests without a lab). Standalone: `python mirror.py ADDRESS PORT ROOT FAULTS LOG`.
"""
from __future__ import annotations

import functools
import http.server
import json
import socket
import socketserver
import sys
import threading
import time
from pathlib import Path
from typing import Any


class _Handler(http.server.SimpleHTTPRequestHandler):
    server: MirrorServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _log(self, status: int | str) -> None:
        with self.server.lock, self.server.log_file.open("a") as log:
            log.write(json.dumps({"time": time.time(), "path": self.path, "status": status}) + "\n")

    def _fault(self) -> dict[str, Any] | None:
        try:
            rules = json.loads(self.server.faults_file.read_text() or "[]")
        except (OSError, ValueError):
            rules = []
        with self.server.lock:
            for rule in rules:
                if not self.path.endswith(rule["path"]):
                    continue
                used = self.server.used.get(rule["id"], 0)
                if rule.get("times") is None or used < rule["times"]:
                    self.server.used[rule["id"]] = used + 1
                    return dict(rule)
        return None

    def do_GET(self) -> None:
        rule = self._fault()
        if rule and rule.get("reset"):
            self._log("reset")
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if rule and rule.get("status"):
            self._log(rule["status"])
            self.send_response(rule["status"])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if rule and rule.get("stall_s"):
            time.sleep(rule["stall_s"])
        exists = Path(self.translate_path(self.path)).is_file()
        self._log(200 if exists else 404)
        super().do_GET()


class MirrorServer(http.server.ThreadingHTTPServer):
    """The stand-in, on `address:port` (port 0: any free one); `serve_forever()` in a thread or process."""

    daemon_threads = True

    def __init__(self, address: str, port: int, root: Path, faults_file: Path, log_file: Path) -> None:
        self.faults_file, self.log_file = faults_file, log_file
        self.used: dict[str, int] = {}
        self.lock = threading.Lock()
        faults_file.touch()
        log_file.touch()
        super().__init__((address, port), functools.partial(_Handler, directory=str(root)))

    def server_bind(self) -> None:
        # No reverse lookup of the address (http.server's own server_bind): in a lab's hub no DNS answers.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


def write_faults(path: Path, rules: list[dict[str, Any]]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(rules))
    partial.replace(path)


def read_requests(log_file: Path, path_suffix: str = "") -> list[dict[str, Any]]:
    return [entry for entry in map(json.loads, log_file.read_text().splitlines())
            if entry["path"].endswith(path_suffix)]


if __name__ == "__main__":
    address, port, root, faults, log = sys.argv[1:6]
    MirrorServer(address, int(port), Path(root), Path(faults), Path(log)).serve_forever()
