"""Where `bootstrap bundle serve` listens by default (a light module: the command line shows them in its help)."""
from __future__ import annotations

HTTP_PORT = 8080
REGISTRY_PORT = 5000
