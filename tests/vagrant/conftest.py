"""The slow Vagrant tests (minutes of both cores) stay out of a plain `pytest` run.

They run with `RUN_SLOW=1` or when the marker expression names them (`pytest -m slow tests/vagrant`).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def slow_requested(config: pytest.Config) -> bool:
    return os.environ.get("RUN_SLOW") == "1" or "slow" in (config.getoption("markexpr", default="") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if slow_requested(config):
        return
    deselected = [item for item in items
                  if item.get_closest_marker("slow") and HERE in Path(str(item.path)).resolve().parents]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]
