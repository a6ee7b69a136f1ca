"""Shared fixtures: the real-node lab (tests/lab/)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.lab.fixtures import etcd_cluster, lab3, lab_factory, mark_lab_tests, rpm_tree

__all__ = ["etcd_cluster", "lab3", "lab_factory", "rpm_tree"]


@pytest.fixture
def builtin_sys_intern(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing Ansible in-process (inventories, modules) replaces sys.intern process-wide with a callable object
    (ansible.module_utils._internal._patches), and torch's dynamo, which torch.optim imports on first use, refuses
    to register one. Tests that train in-process get the builtin back for their duration."""
    monkeypatch.setattr(sys, "intern", getattr(sys.intern, "unpatched_implementation", sys.intern))


@pytest.fixture(autouse=True)
def private_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes cluster state or run logs into the operator's own state directory."""
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path_factory.mktemp("state")))


# The tests that import the trainer's modules need its dependencies, torch and numpy, which only the Python 3.11
# environment has (scripts/setup.sh): the other environment does not collect them (./dev.sh test runs them in the
# first).
TRAINER_TEST_MODULES = ("test_trainer.py", "test_trainer_data.py", "test_infer_image.py", "test_smoke_cache.py")
TRAINER_DEPENDENCIES = ("torch", "numpy")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name in TRAINER_TEST_MODULES and not all(
            importlib.util.find_spec(name) for name in TRAINER_DEPENDENCIES):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_lab_tests(items)
