"""`bootstrap bundle serve DIR`: the bundle's repositories and files over HTTP, its images through a real registry
(docker-registry, read-only over the bundle's registry/), from this machine or a node, after the bundle verifies.
"""
from __future__ import annotations

import functools
import http.server
import os
import stat
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.bundle.document import read_manifest
from provision.bundle.images import REGISTRY_DIR, Registry
from provision.bundle.manifest import BUILD_DIR, MANIFEST, OWN_FILES
from provision.bundle.ports import HTTP_PORT as HTTP_PORT
from provision.bundle.ports import REGISTRY_PORT as REGISTRY_PORT

# HTTP_PORT and REGISTRY_PORT, the defaults, live in ports.py (the command line reads them there).


def servable(root: Path, listed: frozenset[str], request_path: str) -> Path | None:
    """The file a request names, when it is one the verified manifest lists (or the manifest's own files) and,
    walked from the root component by component without following a link, a regular file inside the root; else
    None. Whatever the request, the manifest or the file system says, nothing outside the root is ever opened."""
    try:
        path = urllib.parse.unquote(request_path.split("?", 1)[0].split("#", 1)[0], errors="strict")
    except UnicodeDecodeError:
        return None
    # A "." segment names the folder it is in (RFC 3986, 5.2.4): apt asks `deb/./kubeadm_....deb` of a flat
    # repository whose Packages say `Filename: ./kubeadm_....deb`, as pkgs.k8s.io's do. A ".." or an empty
    # segment is refused, never resolved.
    parts = [part for part in path.lstrip("/").split("/") if part != "."]
    name = "/".join(parts)
    if name not in listed or parts[0] in (BUILD_DIR, REGISTRY_DIR) or any(part in ("", "..") for part in parts):
        return None
    here = root
    for index, part in enumerate(parts):
        here = here / part
        try:
            mode = here.lstat().st_mode
        except OSError:
            return None
        last = index == len(parts) - 1
        if stat.S_ISLNK(mode) or (not last and not stat.S_ISDIR(mode)) or (last and not stat.S_ISREG(mode)):
            return None
    return here if os.path.realpath(here).startswith(f"{os.path.realpath(root)}/") else None


class _Handler(http.server.SimpleHTTPRequestHandler):
    """The files the verified manifest lists, and nothing else: no directory listing, nothing of the build's state
    or of the registry's storage (the registry serves that), no link followed, nothing outside the root."""

    root: Path
    listed: frozenset[str]

    def translate_path(self, path: str) -> str:
        found = servable(self.root, self.listed, path)
        # A path that cannot exist: send_head answers 404 for it.
        return str(found) if found is not None else "/nonexistent/cluster-bootstrap/404"

    def send_head(self) -> Any:
        if not Path(self.translate_path(self.path)).is_file():
            self.send_error(404)
            return None
        return super().send_head()

    def log_message(self, format: str, *args: Any) -> None:
        return


@dataclass(frozen=True)
class Served:
    http_url: str
    registry: str  # host:port, for offline.image_repository


@contextmanager
def serve(root: Path, address: str, http_port: int = HTTP_PORT, registry_port: int = REGISTRY_PORT,
          log: Path | None = None) -> Iterator[Served]:
    """Serve a verified bundle while the `with` block runs: the files its manifest lists (and the manifest's own)
    over HTTP, on `address` alone (what the operator named: both servers listen there and nowhere else)."""
    listed = frozenset(read_manifest((root / MANIFEST).read_bytes()).files) | frozenset(OWN_FILES)
    handler_class = type("BundleHandler", (_Handler,), {"root": Path(os.path.realpath(root)), "listed": listed})
    handler = functools.partial(handler_class, directory=str(root))
    server = http.server.ThreadingHTTPServer((address, http_port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    with Registry(root / REGISTRY_DIR, address, registry_port, readonly=True, log=log):
        thread.start()
        try:
            yield Served(f"http://{address}:{server.server_address[1]}", f"{address}:{registry_port}")
        finally:
            server.shutdown()
            server.server_close()
