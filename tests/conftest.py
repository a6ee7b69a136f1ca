"""Shared fixtures: the real-node lab (tests/lab/)."""
from __future__ import annotations

import pytest

from tests.lab.fixtures import lab3, lab_factory, mark_lab_tests, rpm_tree

__all__ = ["lab3", "lab_factory", "rpm_tree"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_lab_tests(items)
