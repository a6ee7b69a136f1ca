"""The phases of `up`, `node add` and `etcd snapshot`, by name and in order: what a user may name (`up --from
PHASE`, `--only`) and what the shell completes. Names only, so that the command line reads them without importing
the phases; provision/phases/__init__.py (and upgrade_run.py, for the snapshot before each step) puts the phases
themselves in this order."""
from __future__ import annotations

from provision.inputs.addons import ADDON_ORDER

UP_PHASES: tuple[str, ...] = ("preflight", "prepare", "control_plane", "network", "join", "etcd_timer", "certs_timer",
                              "gpu", *ADDON_ORDER, "verify", "smoke")
NODE_ADD_PHASES: tuple[str, ...] = ("preflight", "prepare", "join", "certs_timer", "gpu", "verify")
# `etcd snapshot`, and the snapshot `upgrade` takes before each step: etcd read first (the snapshot's source is a
# healthy member), then the snapshot, then its copy to etcd.snapshot_target where one is set (skipped otherwise).
ETCD_SNAPSHOT_PHASES: tuple[str, ...] = ("etcd_probe", "etcd_snapshot", "etcd_snapshot_upload")
