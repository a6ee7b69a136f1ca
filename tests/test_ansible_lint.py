"""The prepare playbook and its roles pass `ansible-playbook --syntax-check`, ansible-lint (production profile,
offline) and yamllint: what CI can check of the RHEL-family paths that cannot run here."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from provision import COLLECTIONS_DIR, PLAYBOOKS_DIR, PROJECT_ROOT

BIN = Path(sys.executable).parent
PREPARE_FILES = ["playbooks/prepare.yml", *(f"playbooks/roles/{role}" for role in
                                            ("os_prep", "container_runtime", "kubernetes_packages", "nvidia"))]
ENV = os.environ | {"ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS_DIR), "ANSIBLE_ROLES_PATH": str(PLAYBOOKS_DIR / "roles"),
                    "ANSIBLE_CONFIG": str(PLAYBOOKS_DIR / "ansible.cfg"), "NO_COLOR": "1"}


def _run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=PROJECT_ROOT, env=ENV, capture_output=True, text=True, timeout=timeout)


def test_prepare_playbook_passes_syntax_check(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[control_plane]\ncp1\n[workers]\nw1\n[k8s_cluster:children]\ncontrol_plane\nworkers\n")
    result = _run(str(BIN / "ansible-playbook"), "--syntax-check", "-i", str(inventory), "playbooks/prepare.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_prepare_playbook_and_roles_pass_ansible_lint_offline() -> None:
    result = _run(str(BIN / "ansible-lint"), "--offline", "-f", "pep8", "playbooks/prepare.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Profile 'production' was required, and it passed" in result.stderr + result.stdout


def test_prepare_files_pass_yamllint() -> None:
    result = _run(str(BIN / "yamllint"), "-s", "-c", ".yamllint", *PREPARE_FILES, ".ansible-lint", ".yamllint")
    assert result.returncode == 0, result.stdout + result.stderr
