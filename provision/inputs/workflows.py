"""The phases of `up` and `node add`, by name and in order: what a user may name (`up --from PHASE`, `--only`) and
what the shell completes. Names only, so that the command line reads them without importing the phases;
provision/phases/__init__.py puts the phases themselves in this order."""
from __future__ import annotations

from provision.inputs.addons import ADDON_ORDER

UP_PHASES: tuple[str, ...] = ("preflight", "prepare", "control_plane", "network", "join", "etcd_timer", "certs_timer",
                              "gpu", *ADDON_ORDER, "verify", "smoke")
NODE_ADD_PHASES: tuple[str, ...] = ("preflight", "prepare", "join", "certs_timer", "gpu", "verify")
