"""What the package modules agree on: which package specs a node still misses, and the policy-rc.d of ours.

Shared by roles/node_state/library/cb_node_state.py (which reads what is missing before any role runs) and
roles/packages/library/cb_apt_update.py (which installs it, and holds daemons back meanwhile).
"""
from __future__ import annotations

import fnmatch
import shutil
from collections.abc import Callable

# While a transaction that defers starts runs, this policy-rc.d keeps the daemons it brings from starting with
# their packaged configuration; a killed run may leave it, and ours is recognised by its mark.
POLICY_RC_D = "/usr/sbin/policy-rc.d"
POLICY_MARK = "# cluster-bootstrap: daemons start after prepare configured them"

Runner = Callable[[list[str]], tuple[int, str, str]]


def missing_debs(run: Runner, specs: list[str]) -> list[str]:
    """The apt specs (`name` or `name=version-glob`) not installed at a matching version."""
    names = [spec.split("=", 1)[0] for spec in specs]
    installed: dict[str, str] = {}
    if shutil.which("dpkg-query") and names:
        _, out, _ = run(["dpkg-query", "-W", "-f", "${Package}|${Status}|${Version}\\n", *names])
        for line in out.splitlines():
            name, _, rest = line.partition("|")
            status, _, version = rest.partition("|")
            # "install ok installed", or "hold ok installed" once held.
            if status.endswith(" ok installed"):
                installed[name.split(":")[0]] = version
    missing = []
    for spec in specs:
        name, _, want = spec.partition("=")
        if name not in installed or not fnmatch.fnmatchcase(installed[name], want or "*"):
            missing.append(spec)
    return missing


def missing_rpms(run: Runner, specs: list[str]) -> list[str]:
    """The dnf specs (`name` or `name-version`) rpm does not have. A module stream (`@module:stream`) always counts
    as missing: only dnf knows whether it is enabled and installed, and asking it twice changes nothing."""
    return [spec for spec in specs if spec.startswith("@") or run(["rpm", "-q", spec])[0] != 0]
