"""`bootstrap bundle serve DIR`: the bundle's repositories and files over HTTP, its images through a real registry
(docker-registry, read-only over the bundle's registry/), from this machine or a node, after the bundle verifies.
"""
from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.bundle.images import REGISTRY_DIR, Registry
from provision.bundle.manifest import BUILD_DIR
from provision.bundle.ports import HTTP_PORT as HTTP_PORT
from provision.bundle.ports import REGISTRY_PORT as REGISTRY_PORT

# HTTP_PORT and REGISTRY_PORT, the defaults, live in ports.py (the command line reads them there).


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Files only: no directory listings, nothing of the build's state or of the registry's storage."""

    def send_head(self) -> Any:
        top = self.path.lstrip("/").split("/", 1)[0].split("?", 1)[0]
        if top in (BUILD_DIR, REGISTRY_DIR) or Path(self.translate_path(self.path)).is_dir():
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
    """Serve while the `with` block runs."""
    handler = functools.partial(_Handler, directory=str(root))
    server = http.server.ThreadingHTTPServer((address, http_port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    with Registry(root / REGISTRY_DIR, address, registry_port, readonly=True, log=log):
        thread.start()
        try:
            yield Served(f"http://{address}:{server.server_address[1]}", f"{address}:{registry_port}")
        finally:
            server.shutdown()
            server.server_close()
