"""Our Ansible modules (playbooks/library/), imported as Python modules so their pure functions can be tested."""
from __future__ import annotations

import importlib.util
from types import ModuleType

from provision.resources import PLAYBOOKS_DIR


def library(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, PLAYBOOKS_DIR / "library" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module
