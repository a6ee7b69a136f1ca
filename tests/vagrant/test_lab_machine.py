"""A real Vagrant lab machine: `vagrant up` with the project's Vagrantfile on libvirt (QEMU emulation, since
KVM does not work here), the lab's inventory and known_hosts written from what Vagrant reports, then
`bootstrap prepare` against it. Everything runs inside a network namespace the test creates; the machine's
only way out is a server on the host that relays Debian's archive and serves a stand-in Kubernetes package
repository (placeholder kubeadm/kubelet/kubectl, signed), which the toolkit uses as its mirrors.

Slow (a few minutes of both cores): run it with `RUN_SLOW=1 .venv/bin/pytest tests/vagrant -s` (as root).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from provision.errors import BootstrapError
from provision.inputs.inventory import load_inventory
from provision.lab.vagrant import Lab, LabOptions, Vagrant
from tests.lab.repos import build_kubernetes_repo
from tests.support.paths import REPO_ROOT as PROJECT_ROOT
from tests.vagrant.box import CACHE_DIR, box_name, build_box
from tests.vagrant.libvirt_netns import LibvirtNetns

pytestmark = pytest.mark.slow

BOOTSTRAP = PROJECT_ROOT / ".venv" / "bin" / "bootstrap"


def _machine(lab: Lab, name: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(lab.ssh_argv(name, [command], batch=True), capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.fixture
def vagrant_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    if os.geteuid() != 0:
        pytest.skip("needs root (libvirtd, network namespaces, debootstrap)")
    missing = LibvirtNetns.missing_tools() + [t for t in ("debootstrap", "mkfs.ext4", "qemu-img", "gpg", "dpkg-deb")
                                              if shutil.which(t) is None]
    if missing:
        pytest.skip(f"missing {', '.join(missing)}: apt-get install vagrant vagrant-libvirt libvirt-daemon-system "
                    "qemu-system-x86 qemu-utils dnsmasq-base debootstrap gnupg")
    # What `bootstrap` keeps about clusters and runs goes to this test's own directories (lab.down reads it too).
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    return {
        **os.environ,
        # The box stays cached between runs; machines, keys and state are this test's own.
        "VAGRANT_HOME": str(CACHE_DIR / "vagrant-home"),
        "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot-vagrant"),
        "CB_LAB_POOL": "cbvagrant",
    }


def test_a_vagrant_lab_machine_comes_up_and_bootstrap_prepares_it(tmp_path: Path,
                                                                 vagrant_environment: dict[str, str]) -> None:
    timings: dict[str, float] = {}
    started = time.monotonic()
    box_file = build_box()
    timings["box_build_or_cache"] = time.monotonic() - started

    vagrant = Vagrant(PROJECT_ROOT, vagrant_environment)
    if box_name() not in vagrant.run("box", "list"):
        mark = time.monotonic()
        vagrant.run("box", "add", "--name", box_name(), str(box_file), timeout_s=600)
        timings["box_add"] = time.monotonic() - mark

    kubernetes_repo = build_kubernetes_repo(tmp_path / "repo")
    netns = LibvirtNetns(CACHE_DIR / "libvirt", {"kubernetes": kubernetes_repo})
    netns.up()
    lab = Lab(PROJECT_ROOT, tmp_path / "state", vagrant_environment)
    options = LabOptions(workers=0, cpus=1, memory_mb=2048, box=box_name(), provider="libvirt",
                         libvirt_driver="qemu")
    # The machine's packages come only through the server on the host; Docker is left out to keep the run short.
    base_settings = {"mirrors": {"os_repo": netns.mirror_url, "kubernetes_repo": f"{netns.mirror_url}/kubernetes"},
                     "container_runtime": {"install_docker": False}}
    try:
        with netns.entered():
            mark = time.monotonic()
            files = lab.up(options, base_settings)
            timings["lab_up"] = time.monotonic() - mark

            cluster = load_inventory(files.inventory)
            node = cluster.control_plane
            assert (node.name, node.address, node.user, cluster.workers) == \
                ("lab-control-plane", "192.168.56.10", "vagrant", ())
            # Vagrant replaced its insecure key with one of the machine's own, which the inventory names.
            assert node.key_file is not None and Path(vagrant_environment["VAGRANT_DOTFILE_PATH"]) in node.key_file.parents
            settings = yaml.safe_load(files.settings.read_text())
            assert settings["smoke_test"]["mode"] == "cpu"
            assert settings["ssh"]["known_hosts_file"] == str(files.known_hosts.resolve())
            found = subprocess.run(["ssh-keygen", "-F", node.address, "-f", str(files.known_hosts)],
                                   capture_output=True, text=True, check=False)
            assert found.returncode == 0, "the machine's host keys are recorded under its private address"

            answered = _machine(lab, node.name, "cat /etc/machine-id")
            assert answered.returncode == 0 and len(answered.stdout.strip()) == 32, answered.stderr
            assert [(m.name, m.state, m.address) for m in lab.status()] == \
                [("lab-control-plane", "running", "192.168.56.10")]

            # A machine presenting another host key is refused: the recorded key is really checked.
            genuine = files.known_hosts.read_text()
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
            other = (tmp_path / "other.pub").read_text().split()
            files.known_hosts.write_text(f"{node.address} {other[0]} {other[1]}\n")
            refused = _machine(lab, node.name, "true")
            assert refused.returncode != 0 and "host key" in refused.stderr.lower(), refused.stderr
            files.known_hosts.write_text(genuine)

            mark = time.monotonic()
            prepare = subprocess.run([str(BOOTSTRAP), "prepare", "--inventory", str(files.inventory),
                                      "--config", str(files.settings)],
                                     env=vagrant_environment, capture_output=True, text=True, timeout=3000, check=False)
            timings["bootstrap_prepare"] = time.monotonic() - mark
            report = prepare.stdout + prepare.stderr
            (tmp_path / "prepare.out").write_text(report)
            assert prepare.returncode == 0, report[-3000:]
            state = {check: _machine(lab, node.name, command).stdout.strip() for check, command in {
                "hostname": "hostname", "containerd": "systemctl is-active containerd",
                "swap": "tail -n +2 /proc/swaps | wc -l", "ip_forward": "cat /proc/sys/net/ipv4/ip_forward",
                "apt_source": "cat /etc/apt/sources.list.d/cb-os.sources",
                "held": "apt-mark showhold | sort | xargs",
                "kubeadm": "dpkg-query -W -f '${Version}' kubeadm"}.items()}
            assert state["hostname"] == "lab-control-plane", state
            assert state["containerd"] == "active", state
            assert (state["swap"], state["ip_forward"]) == ("0", "1"), state
            assert netns.mirror_url in state["apt_source"], state
            assert state["held"] == "kubeadm kubectl kubelet" and state["kubeadm"].startswith("1.31."), state

            mark = time.monotonic()
            lab.down()
            timings["lab_down"] = time.monotonic() - mark
            assert not files.state_dir.exists()
            assert netns.virsh("list", "--all", "--name").split() == []
    finally:
        if lab.files.state_dir.exists():
            with netns.entered(), contextlib.suppress(BootstrapError):
                lab.down()
        netns.down()
        timings["total"] = time.monotonic() - started
        (CACHE_DIR / "last-run.json").write_text(json.dumps(timings, indent=2))
        print(f"vagrant lab timings (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
