"""The package as users get it: a wheel built from the repository, installed into a fresh virtual environment
outside the checkout, runs from any directory with everything it needs inside (playbooks, roles, manifests,
trainer, the Vagrant lab, the Ansible collections), prepares real lab nodes, then checks them with `doctor` and
collects them with `support-bundle`."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from provision import __version__
from tests.lab.disks import between, measure
from tests.lab.lab import Lab
from tests.lab.repos import OFFLINE_DIR, push_kubernetes_repo, write_config
from tests.support.paths import REPO_ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # Built from a copy of the checkout's files as git sees them: setuptools reuses a checkout's build/, where a file
    # since moved away would still sit and be packed (a stale module shadowing a role's own).
    source = tmp_path_factory.mktemp("source") / "checkout"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                            check=True, capture_output=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO_ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(source)], check=True, capture_output=True, timeout=300)
    return next(out.glob("cluster_bootstrap-*.whl"))


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel and its dependencies only (no checkout on its path)."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True, capture_output=True,
                   timeout=900)
    return venv / "bin" / "bootstrap"


def _run(bootstrap: Path, *args: str, cwd: Path, state: Path, timeout: int = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"BOOTSTRAP_STATE_DIR": str(state), "PATH": f"{bootstrap.parent}:/usr/sbin:/usr/bin:/sbin:/bin"}
    return subprocess.run([str(bootstrap), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_wheel_carries_the_package_data_and_nothing_of_the_checkout(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for wanted in ("provision/cli/commands/up.py", "provision/playbooks/prepare.yml", "provision/playbooks/ansible.cfg",
                   "provision/playbooks/roles/os_prep/tasks/main.yml", "provision/playbooks/library/cb_node_report.py",
                   "provision/playbooks/group_vars/all.yml",
                   "provision/manifests/smoke/job.yaml.j2",
                   "provision/trainer/train.py", "provision/lab/Vagrantfile", "provision/lab/lab.yml",
                   "provision/playbooks/addon.yml", "provision/playbooks/roles/addon/tasks/apply-part.yml",
                   "provision/manifests/smoke/trainjob.yaml.j2", "provision/trainer/bandwidth.py",
                   "provision/cli/commands/doctor.py", "provision/cli/commands/support_bundle.py",
                   "provision/nodes/doctor/probe.py", "provision/diagnose/redact.py",
                   "provision/playbooks/roles/os_prep/defaults/main/main.yml"):
        assert wanted in names, wanted
    assert not [n for n in names if n.startswith(("tests/", "bench/", "docs/")) or "__pycache__" in n]


@pytest.mark.network
def test_the_installed_tool_runs_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    result = _run(installed, "--version", cwd=work, state=tmp_path / "state")
    assert result.returncode == 0 and result.stdout.strip() == f"bootstrap (cluster-bootstrap) {__version__}"
    made = _run(installed, "init", "--control-plane", "10.0.0.10", "--workers", "10.0.0.11", cwd=work,
                state=tmp_path / "state")
    assert made.returncode == 0, made.stderr
    checked = _run(installed, "config", "validate", "-i", "hosts.ini", "-c", "cluster.yaml", cwd=work,
                   state=tmp_path / "state")
    assert checked.returncode == 0 and "valid" in checked.stdout, checked.stderr
    # Nothing was written next to the user's files but what init writes (the two files and the schema cluster.yaml's
    # modeline names), nor into the package: state lives in the state directory.
    assert sorted(p.name for p in work.iterdir()) == ["cluster.schema.json", "cluster.yaml", "hosts.ini"]


def test_the_installed_tool_prepares_lab_nodes_from_another_directory(
        installed: Path, lab_factory: Callable[..., Lab], tmp_path: Path) -> None:
    lab = lab_factory(1)
    # Debian 12's own containerd (1.6) runs Kubernetes 1.35, not 1.36.
    push_kubernetes_repo(lab, tmp_path / "offline", "1.35")
    config = write_config(lab, tmp_path / "cluster.yaml", mirrors={"kubernetes_repo": f"file://{OFFLINE_DIR}/kubernetes"},
                          kubernetes={"version": "1.35"}, container_runtime={"containerd_source": "distribution"})
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    result = _run(installed, "prepare", "-i", str(lab.inventory_path), "-c", str(config), cwd=work, state=state,
                  timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    runs = list((state / "runs").iterdir())
    assert runs and all((run / "run.log").is_file() for run in runs)
    assert oct(state.stat().st_mode & 0o777) == "0o700"
    assert list(work.iterdir()) == []
    assert lab.nodes[0].ssh("systemctl is-active containerd").stdout.strip() == "active"
    # The doctor judges the prepared node healthy with the tables the wheel carries (the firewall ports are the
    # os_prep role's own); there is no cluster yet, which it says.
    # The node's disk is this host's: where df on the node puts it past the doctor's marks, that is the one finding.
    before = measure(lab.nodes)
    doctor = _run(installed, "doctor", "-i", str(lab.inventory_path), "-c", str(config), cwd=work, state=state,
                  timeout=300)
    disks = between(before, measure(lab.nodes))
    assert "api: not checked" in " ".join(doctor.stdout.split()), doctor.stdout + doctor.stderr
    if disks.judged_ok("n1"):
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        assert "n1     control-plane  ok" in doctor.stdout
    elif disks.full:
        assert doctor.returncode == 1 and "1 problem on n1" in doctor.stdout + doctor.stderr, doctor.stdout + doctor.stderr
        assert "warn n1: disk: " in doctor.stdout or "FAIL n1: disk: " in doctor.stdout, doctor.stdout
    bundle = _run(installed, "support-bundle", "-i", str(lab.inventory_path), "-c", str(config), "-o", "support.tar.gz",
                  cwd=work, state=state, timeout=300)
    assert bundle.returncode == 0, bundle.stdout + bundle.stderr
    with tarfile.open(work / "support.tar.gz") as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames()}
    assert {"MANIFEST.txt", "doctor.txt", "nodes/n1/journal/containerd.txt", "nodes/n1/files/etc/containerd/config.toml",
            "local/state.json"} <= names
    assert [p.name for p in work.iterdir()] == ["support.tar.gz"]
