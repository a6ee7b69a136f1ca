"""Shared fixtures: the real-node lab (tests/lab/)."""
from __future__ import annotations

import pytest

from tests.lab.fixtures import lab3, lab_factory, mark_lab_tests

__all__ = ["lab3", "lab_factory"]


@pytest.fixture(autouse=True)
def private_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes cluster state or run logs into the operator's own state directory."""
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path_factory.mktemp("state")))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_lab_tests(items)
