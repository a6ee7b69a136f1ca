"""The node report a prepared lab node sent (tests/data/node_report/), for the tests of the cb_node_report module,
the NodeReport model and the check after prepare."""
from __future__ import annotations

import json
from typing import Any

from provision.inputs.settings import Settings, parse_settings
from tests.support.paths import REPO_ROOT

NODE_REPORT_DATA = REPO_ROOT / "tests" / "data" / "node_report"


def recorded_document() -> dict[str, Any]:
    """A fresh copy of the document (Debian 12, containerd 1.6, placeholder Kubernetes packages, no GPU)."""
    return json.loads((NODE_REPORT_DATA / "debian12-report.json").read_text())


def recorded_settings() -> Settings:
    """The settings the recorded node was prepared with: Debian 12's own containerd runs Kubernetes 1.35, so the
    sandbox image it was given is 1.35's (a check with today's default minor would call the node unready)."""
    return parse_settings({"kubernetes": {"version": "1.35"},
                           "container_runtime": {"containerd_source": "distribution"}})


def installed_release(settings: Settings) -> str:
    """The Kubernetes release prepare would have found installed for these settings and decided (kubeadm init's
    kubernetesVersion), where the tests have no package to read it from: the pinned release, or for a bare minor
    the newest patch the versions table saw (what the package repository would have offered)."""
    from provision.inputs.versions import kubernetes_release
    version = settings.kubernetes.version
    return version if version.count(".") == 2 else kubernetes_release(settings.kubernetes.minor_number).latest_patch
