"""The checkout's layout as the card draws it, and the wheel's: playbooks/, manifests/ and trainer/ live at the
repository's root and are found there by a checkout (and an editable install), while pyproject.toml maps them
into the package for the wheel (tests/test_wheel.py installs one)."""
from __future__ import annotations

import tomllib

from provision import resources
from tests.support.paths import REPO_ROOT

DATA = {"provision.playbooks": "playbooks", "provision.manifests": "manifests", "provision.trainer": "trainer"}


def _setuptools() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_the_data_is_found_at_the_repository_root_in_a_checkout() -> None:
    assert resources.PLAYBOOKS_DIR == REPO_ROOT / "playbooks"
    assert resources.MANIFESTS_DIR == REPO_ROOT / "manifests"
    assert resources.TRAINER_DIR == REPO_ROOT / "trainer"
    assert (resources.PLAYBOOKS_DIR / "prepare.yml").is_file() and resources.ANSIBLE_CFG.is_file()
    assert (resources.TRAINER_DIR / "train.py").is_file()


def test_every_code_package_and_every_data_folder_is_in_the_wheel() -> None:
    """A package added without a line in pyproject.toml would be missing from the wheel, and only from the wheel."""
    config = _setuptools()
    code = {".".join(p.parent.relative_to(REPO_ROOT).parts) for p in (REPO_ROOT / "provision").rglob("__init__.py")}
    assert set(config["packages"]) == code | set(DATA)
    assert config["package-dir"] == DATA
