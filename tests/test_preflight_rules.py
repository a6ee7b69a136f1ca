"""Preflight's compatibility rules between a node and the versions chosen, judged on facts the probe reads
before anything changes: containerd against the Kubernetes minor, cgroup v1 against the kubelet from 1.35,
the kernel against kube-proxy's nftables mode, each GPU generation (PCI device id) against the driver branch,
and an explicit smoke-test image's CUDA against the GPUs. Each problem names the rule, the node and the fix."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from provision.inputs.inventory import Node
from provision.inputs.settings import parse_settings
from provision.nodes.preflight.checks import (
    check_cgroup,
    check_containerd,
    check_gpu_versions,
    check_kernel,
    evaluate,
    judge,
)
from provision.nodes.preflight.probe import PROBE_SCRIPT, NodeFacts, parse_facts
from provision.nodes.ssh import LocalShell

NODE = Node(name="n1", address="10.0.0.1", role="control_plane", user="ops")
# The controller's ansible-core (no version rule depends on it).
CORE = "2.21.5"
TRIXIE = {"ID": "debian", "VERSION_ID": "13", "NAME": "Debian GNU/Linux", "PRETTY_NAME": "Debian GNU/Linux 13 (trixie)"}
SID = {"ID": "debian", "NAME": "Debian GNU/Linux", "PRETTY_NAME": "Debian GNU/Linux forky/sid"}
ROCKY9 = {"ID": "rocky", "VERSION_ID": "9.4", "NAME": "Rocky Linux"}

PROBE_TAIL = """\
@@os-release
ID=debian
VERSION_ID="13"
@@hostname
n1
@@cpus
4
@@meminfo
MemTotal:       8000000 kB
@@kernel
6.12.48+deb13-amd64
@@cgroup_fs
tmpfs
@@nvidia_pci_ids
0x1db4
0x2330
@@containerd_version
containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6
@@runtime_packages
containerd 1.7.24~ds1-6
docker.io 26.1.5+dfsg1-9
@@containerd_candidate
1.7.24~ds1-6
@@end
"""


def facts(os_release: dict[str, str] | None = None, **changes: Any) -> NodeFacts:
    base = NodeFacts(os_release=os_release or TRIXIE, hostname="n1", product_uuid=None, macs={}, cpus=4,
                     memory_mb=8000, listeners=(), swaps_active=(), fstab_swaps=(), selinux=None, gpus=(),
                     nvidia_driver=None, kube_configs=(), kernel="6.12.48+deb13-amd64", cgroup_version=2)
    return replace(base, **changes)


def settings(**sections: dict[str, object]) -> Any:
    return parse_settings(sections)


def test_the_probe_reads_what_the_rules_need() -> None:
    found = parse_facts(PROBE_TAIL)
    assert found.kernel == "6.12.48+deb13-amd64" and found.cgroup_version == 1
    assert found.gpu_device_ids == (0x1DB4, 0x2330)
    assert found.containerd_version == (1, 7, 24)
    assert found.runtime_packages == {"containerd": "1.7.24~ds1-6", "docker.io": "26.1.5+dfsg1-9"}
    assert found.containerd_candidate == "1.7.24~ds1-6"
    bare = parse_facts(PROBE_TAIL.replace("@@containerd_candidate\n1.7.24~ds1-6\n", "@@containerd_candidate\n(none)\n"))
    assert bare.containerd_candidate is None


def test_the_probe_reads_this_machines_kernel_and_cgroups() -> None:
    # The lab's nodes share this kernel: cgroup v1, as the lab's README says.
    found = parse_facts(LocalShell().run(PROBE_SCRIPT).stdout)
    assert found.kernel and found.cgroup_version in (1, 2)


# --- containerd: 1.36 and later need containerd 2 ---------------------------------------------------------------

@pytest.mark.parametrize(("os_release", "candidate", "source", "version", "name", "words"), [
    # Debian 13's own containerd is 1.7: refused for 1.36, whether chosen or already installed.
    (TRIXIE, "1.7.24~ds1-6", "distribution", "1.36", "containerd",
     ["containerd 1.7.24 cannot run Kubernetes 1.36, which needs containerd 2.0 or newer",
      "the distribution's, to be installed", "containerd_source: docker", "kubernetes.version: '1.35'"]),
    (TRIXIE, "1.7.24~ds1-6", "distribution", "1.37", "containerd", ["cannot run Kubernetes 1.37"]),
    # ... and warned for 1.35, the last minor for containerd 1.x.
    (TRIXIE, "1.7.24~ds1-6", "distribution", "1.35", "containerd_1x",
     ["works with Kubernetes 1.35, the last minor", "before moving to Kubernetes 1.36"]),
    # Not in the package lists yet (a fresh node): the platform table knows Debian 12's.
    ({"ID": "debian", "VERSION_ID": "12"}, None, "distribution", "1.36", "containerd", ["containerd 1.6 cannot"]),
    (ROCKY9, None, "distribution", "1.36", "containerd", ["the distribution offers no containerd package",
                                                           "containerd_source: auto"]),
])
def test_a_containerd_too_old_for_the_kubernetes_minor_is_refused(os_release: dict[str, str], candidate: str | None,
                                                                  source: str, version: str, name: str,
                                                                  words: list[str]) -> None:
    finding = check_containerd(facts(os_release, containerd_candidate=candidate),
                               settings(kubernetes={"version": version}, container_runtime={"containerd_source": source}))
    assert finding.problem and finding.check == name
    text = f"{finding.detail}; fix: {finding.fix}"
    for word in words:
        assert word in text


@pytest.mark.parametrize(("os_release", "candidate", "source", "expected"), [
    (TRIXIE, "1.7.24~ds1-6", "auto", "containerd 2.1.5 (Docker's containerd.io, to be installed)"),
    (SID, "2.1.9~ds1-1", "auto", "containerd 2.1.9 (the distribution's, to be installed)"),
    (ROCKY9, None, "auto", "containerd 2.1.5 (Docker's containerd.io, to be installed)"),
    ({"ID": "ubuntu", "VERSION_ID": "24.04"}, None, "docker", "containerd 2.1.5 (Docker's containerd.io, to be installed)"),
])
def test_the_containerd_prepare_would_install_passes(os_release: dict[str, str], candidate: str | None, source: str,
                                                     expected: str) -> None:
    finding = check_containerd(facts(os_release, containerd_candidate=candidate),
                               settings(container_runtime={"containerd_source": source}))
    assert not finding.problem and finding.detail == expected


def test_an_installed_containerd_1_is_judged_as_installed() -> None:
    installed = facts(containerd_version=(1, 7, 25), runtime_packages={"containerd.io": "1.7.25-1"})
    finding = check_containerd(installed, settings(container_runtime={"containerd_source": "docker"}))
    assert finding.problem and finding.check == "containerd"
    assert "containerd 1.7.25 cannot run Kubernetes 1.36" in finding.detail and "(installed)" in finding.detail
    assert "upgrade the node's containerd to 2.x" in finding.fix


def test_the_other_familys_packages_on_the_node_are_refused() -> None:
    # A bookworm node prepared before: Debian's docker.io and containerd, while auto now means containerd.io.
    bookworm = facts({"ID": "debian", "VERSION_ID": "12"}, containerd_version=(1, 6, 20),
                     runtime_packages={"containerd": "1.6.20~ds1-1+deb12u3", "docker.io": "20.10.24+dfsg1-1+deb12u1"})
    finding = check_containerd(bookworm, settings())
    assert finding.problem and finding.check == "containerd"
    assert finding.detail.startswith("containerd, docker.io installed, but container_runtime.containerd_source "
                                     "resolves to docker (containerd.io and docker-ce)")
    assert "containerd_source: distribution" in finding.fix and "apt-get purge containerd docker.io" in finding.fix


# --- cgroup v1 ------------------------------------------------------------------------------------------------------

def test_a_cgroup_v1_node_is_refused_from_1_35_with_both_ways_out() -> None:
    finding = check_cgroup(facts(cgroup_version=1), settings(kubernetes={"version": "1.35"}))
    assert finding.problem and finding.check == "cgroup"
    assert "which the kubelet of Kubernetes 1.35 refuses (failCgroupV1, KEP-5573)" in finding.detail
    assert "kubelet.switch_to_cgroup_v2: true" in finding.fix and "kubelet.allow_cgroup_v1: true" in finding.fix


def test_cgroup_v1_accepted_or_switched_is_a_warning_and_v2_passes() -> None:
    allowed = check_cgroup(facts(cgroup_version=1), settings(kubelet={"allow_cgroup_v1": True}))
    assert allowed.check == "cgroup_v1_allowed" and "unsupported by Kubernetes 1.36" in allowed.detail
    switched = check_cgroup(facts(cgroup_version=1), settings(kubelet={"switch_to_cgroup_v2": True}))
    assert switched.check == "cgroup_v2_switch" and "reboots it" in switched.detail
    assert not check_cgroup(facts(cgroup_version=2), settings()).problem


# --- the kernel and kube-proxy's nftables mode ----------------------------------------------------------------------

@pytest.mark.parametrize(("kernel", "mode", "problem"), [
    ("5.10.0-32-amd64", "nftables", True), ("5.14.0-427.el9.x86_64", "nftables", False),
    ("4.18.0-553.el8_10.x86_64", "iptables", False), ("5.12.19", "nftables", True)])
def test_nftables_needs_linux_5_13(kernel: str, mode: str, problem: bool) -> None:
    finding = check_kernel(facts(kernel=kernel), settings(kubernetes={"kube_proxy_mode": mode}))
    assert finding.problem is problem
    if problem:
        assert "nftables mode needs Linux 5.13 or newer" in finding.detail
        assert "kube_proxy_mode: iptables" in finding.fix


# --- GPUs: generation against the driver branch, and the smoke image's CUDA -------------------------------------

def gpu(*device_ids: int, **sections: dict[str, object]) -> list[tuple[str, bool, str, str]]:
    found = check_gpu_versions(facts(gpu_device_ids=device_ids), settings(**sections), NODE)
    return [(f.check, f.problem, f.detail, f.fix) for f in found]


def test_gpu_generations_pass_with_a_branch_that_drives_them() -> None:
    assert gpu(0x2330) == [("gpu_driver", False, "Hopper on driver 580 (open module)", "")]
    assert gpu(0x1DB4, 0x1EB8) == [("gpu_driver", False, "Volta, Turing on driver 580 (proprietary module)", "")]
    assert check_gpu_versions(facts(), settings(), NODE) == []


@pytest.mark.parametrize(("device", "branch", "words"), [
    (0x1DB4, "595", ["Volta GPUs end with driver 580", "gpu.driver_branch: '580'"]),
    (0x1B80, "595", ["Pascal GPUs end with driver 580"]),
    (0x102D, "580", ["Kepler GPUs are driven only by driver 470", "gpu=false for the node"]),
])
def test_a_driver_branch_a_generation_cannot_use_is_refused(device: int, branch: str, words: list[str]) -> None:
    found = gpu(device, gpu={"driver_branch": branch}) if branch != "470" else gpu(device)
    name, problem, detail, fix = found[0]
    assert name == "gpu_driver" and problem
    for word in words:
        assert word in f"{detail}: {fix}"


def test_an_unknown_nvidia_device_is_warned_not_guessed() -> None:
    name, problem, detail, _ = gpu(0x3F00)[0]
    assert name == "gpu_generation" and problem and "0x3f00 is in no generation" in detail


def test_an_explicit_cuda_13_smoke_image_on_pascal_is_refused_and_the_default_follows_the_gpu() -> None:
    image = "docker.io/pytorch/pytorch:2.14.1-cuda13.0-cudnn9-runtime"
    name, problem, detail, fix = gpu(0x1B80, smoke_test={"image": image})[0]
    assert name == "smoke_image" and problem
    assert "built for CUDA 13, which Pascal GPUs cannot run (CUDA 12 at most)" in detail
    assert "2.14.1-cuda12.6" in fix
    # Left out, the image is chosen for the GPUs found: nothing to refuse.
    assert gpu(0x1B80) == [("gpu_driver", False, "Pascal on driver 580 (proprietary module)", "")]


# --- severity and the one-line message ------------------------------------------------------------------------------

def test_refusals_block_and_accepted_risks_warn_each_in_one_line_with_node_rule_and_fix() -> None:
    node_facts = facts(cgroup_version=1, containerd_candidate="1.7.24~ds1-6", gpu_device_ids=(0x1DB4,))
    strict = settings(container_runtime={"containerd_source": "distribution"}, gpu={"driver_branch": "595"})
    results = {c.check: c for c in evaluate([NODE], {"n1": node_facts}, CORE, settings=strict)["n1"].checks}
    assert {n: results[n].status for n in ("containerd", "cgroup", "gpu_driver", "kernel")} == \
        {"containerd": "fail", "cgroup": "fail", "gpu_driver": "fail", "kernel": "ok"}
    line = results["containerd"].describe()
    assert "\n" not in line and line.startswith("n1: containerd: containerd 1.7.24 cannot run Kubernetes 1.36")
    assert "; fix: set container_runtime.containerd_source: docker" in line
    lenient = settings(kubernetes={"version": "1.35"}, kubelet={"allow_cgroup_v1": True},
                       container_runtime={"containerd_source": "distribution"})
    warned = {c.check: c.status for c in evaluate([NODE], {"n1": node_facts}, CORE, settings=lenient)["n1"].checks}
    assert warned["containerd_1x"] == warned["cgroup_v1_allowed"] == "warn"
    assert judge(NODE, check_cgroup(facts(cgroup_version=2), lenient)).status == "ok"
