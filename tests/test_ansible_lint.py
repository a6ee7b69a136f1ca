"""Every playbook and role passes `ansible-playbook --syntax-check`, ansible-lint (production profile, offline)
and yamllint: what CI can check of the paths that cannot run here (the RHEL family, NVIDIA, real kubeadm)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision.resources import ANSIBLE_CFG, PLAYBOOKS_DIR, ROLES_PATH
from tests.support.paths import REPO_ROOT

BIN = Path(sys.executable).parent
PLAYBOOKS = sorted(path.name for path in PLAYBOOKS_DIR.glob("*.yml"))
ENV = os.environ | {"ANSIBLE_ROLES_PATH": ROLES_PATH, "ANSIBLE_CONFIG": str(ANSIBLE_CFG), "NO_COLOR": "1"}


# The timeout only bounds a hung run: a machine shared by other work can take minutes for the whole lint.
def _run(*args: str, timeout: int = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=timeout)


def test_every_playbook_is_found() -> None:
    assert {"prepare.yml", "control_plane.yml", "network.yml", "join.yml", "gpu_plugin.yml", "reset.yml"} <= set(PLAYBOOKS)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_passes_syntax_check(playbook: str, tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[control_plane]\ncp1\n[workers]\nw1\n[k8s_cluster:children]\ncontrol_plane\nworkers\n")
    result = _run(str(BIN / "ansible-playbook"), "--syntax-check", "-i", str(inventory), str(PLAYBOOKS_DIR / playbook))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_playbook_and_role_passes_ansible_lint_offline() -> None:
    result = _run(str(BIN / "ansible-lint"), "--offline", "-f", "pep8", str(PLAYBOOKS_DIR.relative_to(REPO_ROOT)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Profile 'production' was required, and it passed" in result.stderr + result.stdout


def test_every_playbook_and_role_passes_yamllint() -> None:
    result = _run(str(BIN / "yamllint"), "-s", "-c", ".yamllint", str(PLAYBOOKS_DIR.relative_to(REPO_ROOT)),
                  ".ansible-lint", ".yamllint")
    assert result.returncode == 0, result.stdout + result.stderr
