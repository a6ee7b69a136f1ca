"""The Vagrantfile, checked by Vagrant itself: `vagrant validate` for every provider and OS choice, the
machines and addresses it defines (the plan `bootstrap lab` reads back), and bad settings refused in one line.

Needs the `vagrant` and `vagrant-libvirt` packages; VirtualBox is not installed here, so the VirtualBox
provider is validated with a stand-in `VBoxManage` that only answers `--version` (Vagrant's usability check).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from provision.errors import InputError
from provision.lab.boxes import lab_os_choices
from provision.lab.vagrant import Lab, LabOptions, LabPlan
from provision.resources import VAGRANT_DIR
from tests.support.paths import REPO_ROOT as PROJECT_ROOT

pytestmark = pytest.mark.skipif(shutil.which("vagrant") is None,
                                reason="vagrant is not installed (apt-get install vagrant vagrant-libvirt)")

# Every OS the Vagrantfile offers (tests/test_platforms.py holds them to the platform table).
OS_CHOICES = lab_os_choices()


@pytest.fixture(scope="module")
def vagrant_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vagrant-home")


@pytest.fixture
def environment(vagrant_home: Path, tmp_path: Path) -> dict[str, str]:
    """A clean environment: no LAB_* from the caller's shell, Vagrant's state in temporary directories."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAB_", "VAGRANT_"))}
    env |= {"VAGRANT_HOME": str(vagrant_home), "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot-vagrant"),
            "LAB_PLAN_FILE": str(tmp_path / "plan.json")}
    return env


def vagrant(env: dict[str, str], *args: str, root: Path = PROJECT_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["vagrant", *args], cwd=root, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def plan_of(env: dict[str, str]) -> LabPlan:
    return LabPlan.from_json(Path(env["LAB_PLAN_FILE"]).read_text(), "plan.json")


@pytest.fixture
def fake_virtualbox(tmp_path: Path) -> Path:
    """A `VBoxManage` that reports a version and nothing else: enough for Vagrant to accept the provider."""
    bin_dir = tmp_path / "vbox-bin"
    bin_dir.mkdir()
    script = bin_dir / "VBoxManage"
    script.write_text('#!/bin/sh\n[ "$1" = --version ] && echo 7.0.14r161095 && exit 0\nexit 1\n')
    script.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("os_choice", OS_CHOICES)
def test_the_vagrantfile_validates_on_libvirt_for_every_os(environment: dict[str, str], os_choice: str) -> None:
    result = vagrant(environment | {"LAB_OS": os_choice, "LAB_PROVIDER": "libvirt"}, "validate")
    assert result.returncode == 0, result.stderr
    assert plan_of(environment).provider == "libvirt"


@pytest.mark.parametrize("os_choice", OS_CHOICES)
def test_the_vagrantfile_validates_on_virtualbox_for_every_os(environment: dict[str, str], fake_virtualbox: Path,
                                                                os_choice: str) -> None:
    env = environment | {"LAB_OS": os_choice, "LAB_PROVIDER": "virtualbox",
                         "PATH": f"{fake_virtualbox}:{environment['PATH']}"}
    result = vagrant(env, "validate")
    assert result.returncode == 0, result.stderr
    assert plan_of(environment).provider == "virtualbox"


def test_a_mistake_in_a_provider_block_fails_validation(environment: dict[str, str], fake_virtualbox: Path,
                                                        tmp_path: Path) -> None:
    """The validate tests can fail: a misspelt VirtualBox option and a bad libvirt driver are both caught."""
    root = tmp_path / "copy"
    root.mkdir()
    shutil.copy(VAGRANT_DIR / "lab.yml", root / "lab.yml")
    text = (VAGRANT_DIR / "Vagrantfile").read_text()
    assert "vb.linked_clone = true" in text and 'lv.driver = plan["libvirt_driver"]' in text
    (root / "Vagrantfile").write_text(text.replace("vb.linked_clone = true", "vb.linkd_clone = true"))
    env = environment | {"LAB_PROVIDER": "virtualbox", "PATH": f"{fake_virtualbox}:{environment['PATH']}"}
    result = vagrant(env, "validate", root=root)
    assert result.returncode != 0 and "linkd_clone" in result.stdout + result.stderr

    (root / "Vagrantfile").write_text(text.replace('lv.driver = plan["libvirt_driver"]', 'lv.driver = "kvmm"'))
    result = vagrant(environment | {"LAB_PROVIDER": "libvirt"}, "validate", root=root)
    assert result.returncode != 0 and "kvmm" in result.stdout + result.stderr


def test_the_default_lab_is_a_control_plane_and_one_worker_on_fixed_addresses(environment: dict[str, str]) -> None:
    result = vagrant(environment, "status")
    assert result.returncode == 0, result.stderr
    plan = plan_of(environment)
    assert [(m.name, m.role, m.address) for m in plan.machines] == [
        ("lab-control-plane", "control_plane", "192.168.56.10"), ("lab-worker-1", "worker", "192.168.56.11")]
    assert (plan.box, plan.provider, str(plan.network)) == ("rockylinux/9", "libvirt", "192.168.56.0/24")
    assert "lab-control-plane" in result.stdout and "lab-worker-1" in result.stdout


def test_environment_variables_change_count_sizes_box_and_network(environment: dict[str, str]) -> None:
    env = environment | {"LAB_WORKERS": "3", "LAB_CPUS": "4", "LAB_MEMORY": "8192", "LAB_OS": "ubuntu2204",
                         "LAB_NETWORK": "172.30.5.0/24", "LAB_LIBVIRT_DRIVER": "qemu"}
    assert vagrant(env, "validate").returncode == 0
    plan = plan_of(environment)
    assert [m.address for m in plan.machines] == ["172.30.5.10", "172.30.5.11", "172.30.5.12", "172.30.5.13"]
    assert {(m.cpus, m.memory_mb) for m in plan.machines} == {(4, 8192)}
    assert (plan.box, plan.libvirt_driver) == ("generic/ubuntu2204", "qemu")
    # LAB_BOX wins over LAB_OS: a local or mirrored box.
    assert vagrant(env | {"LAB_BOX": "my/box"}, "validate").returncode == 0
    assert plan_of(environment).box == "my/box"


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("LAB_WORKERS", "two", 'workers="two" (LAB_WORKERS'),
    ("LAB_WORKERS", "-1", "must be a whole number >= 0"),
    ("LAB_CPUS", "0", 'cpus="0" (LAB_CPUS'),
    ("LAB_MEMORY", "256", 'memory_mb="256" (LAB_MEMORY'),
    ("LAB_OS", "fedora", 'os="fedora" (LAB_OS) is unknown: choose one of rocky9'),
    ("LAB_PROVIDER", "hyperv", 'provider="hyperv" (LAB_PROVIDER) is not supported'),
    ("LAB_LIBVIRT_DRIVER", "xen", 'libvirt_driver="xen" (LAB_LIBVIRT_DRIVER)'),
    ("LAB_NETWORK", "192.168.56.1", "must be an IPv4 network"),
    ("LAB_NETWORK", "fd00::/64", "must be an IPv4 network"),
    ("LAB_NETWORK", "192.168.56.0/29", "has no room for 2 machines"),
])
def test_bad_lab_settings_are_refused_in_one_line(environment: dict[str, str], variable: str, value: str,
                                                   message: str) -> None:
    result = vagrant(environment | {variable: value}, "validate")
    assert result.returncode != 0
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("lab: ") and message in lines[0], lines


def test_lab_reads_back_the_plan_and_turns_a_refusal_into_an_input_error(environment: dict[str, str],
                                                                         tmp_path: Path) -> None:
    lab = Lab(PROJECT_ROOT, tmp_path / "state", environment)
    plan = lab.plan(LabOptions(workers=2, network="10.123.0.0/16"))
    assert [m.name for m in plan.machines] == ["lab-control-plane", "lab-worker-1", "lab-worker-2"]
    assert plan.machines[2].address == "10.123.0.12"
    with pytest.raises(InputError, match=r"^workers=\"x\" \(LAB_WORKERS"):
        lab.plan(LabOptions(workers="x"))  # type: ignore[arg-type]


def test_a_saved_plan_makes_the_vagrantfile_define_the_same_machines_again(environment: dict[str, str],
                                                                          tmp_path: Path) -> None:
    """`lab down` after `lab up --workers 3` must destroy all four machines, whatever lab.yml says by then."""
    lab = Lab(PROJECT_ROOT, tmp_path / "state", environment)
    made = lab.plan(LabOptions(workers=3, cpus=1, memory_mb=1024, os="alma9", network="192.168.77.0/24"))
    result = vagrant(environment | made.environment(), "validate")
    assert result.returncode == 0, result.stderr
    assert plan_of(environment) == made
    assert json.loads(Path(environment["LAB_PLAN_FILE"]).read_text())["machines"][3]["name"] == "lab-worker-3"


def test_lab_up_with_fewer_machines_than_the_lab_has_is_refused_before_vagrant_up(environment: dict[str, str],
                                                                                  tmp_path: Path) -> None:
    """Otherwise the left-out workers would keep running, and `lab down` would no longer know about them."""
    lab = Lab(PROJECT_ROOT, tmp_path / "state", environment)
    lab.files.state_dir.mkdir()
    made = vagrant(environment | {"LAB_WORKERS": "3", "LAB_PLAN_FILE": str(lab.files.plan)}, "validate")
    assert made.returncode == 0, made.stderr
    saved = lab.files.plan.read_text()
    with pytest.raises(InputError, match=r"^the lab already has lab-worker-2, lab-worker-3, which these settings "
                                         r"leave out: run `bootstrap lab down` first, or `bootstrap lab up --workers 3`"):
        lab.up(LabOptions(workers=1))
    assert lab.files.plan.read_text() == saved
    assert "$ vagrant up" not in lab.files.log.read_text()
