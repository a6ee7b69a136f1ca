"""The smoke test's choices by name (what runs the training, which scheduler places it, where the data is cached):
a light module, so that the command line declares its options without importing the manifests' renderer."""
from __future__ import annotations

from typing import Literal

Workload = Literal["job", "pytorchjob", "trainjob"]
Scheduler = Literal["default", "volcano"]
Cache = Literal["none", "hostpath", "pvc"]
