"""The prepare playbook's node report: the cb_node_report module reads a node into one JSON document, and the
NodeReport model reads that document back in Python. The module's parsers are fed outputs recorded on a lab
node (tests/data/node_report/); the model is fed the document that node sent."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from provision.nodes.reports import NODE_REPORT_KEY, NODE_REPORT_SCHEMA, NodeReport
from provision.resources import PLAYBOOKS_DIR
from tests.support.node_reports import NODE_REPORT_DATA as DATA
from tests.support.node_reports import recorded_document

MODULE_PATH = PLAYBOOKS_DIR / "library" / "cb_node_report.py"
_spec = importlib.util.spec_from_file_location("cb_node_report", MODULE_PATH)
node_report = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(node_report)  # type: ignore[union-attr]


def test_the_module_and_the_model_agree_on_the_schema_and_the_key() -> None:
    assert node_report.SCHEMA == NODE_REPORT_SCHEMA
    assert node_report.REPORT_KEY == NODE_REPORT_KEY


def test_the_cri_plugins_status_is_read_from_ctr() -> None:
    listing = (DATA / "debian12-ctr-plugins-ls.txt").read_text()
    assert node_report.parse_ctr_plugins(listing) == "ok"
    without_cri = "\n".join(line for line in listing.splitlines() if " cri " not in line)
    assert node_report.parse_ctr_plugins(without_cri) is None
    failing = "TYPE ID PLATFORMS STATUS\nio.containerd.grpc.v1 cri linux/amd64 error\n"
    assert node_report.parse_ctr_plugins(failing) == "error"


def test_files_and_listings_the_report_reads() -> None:
    assert node_report.parse_crictl_endpoint(
        "runtime-endpoint: unix:///run/containerd/containerd.sock\nimage-endpoint: unix:///x.sock\ntimeout: 10\n"
    ) == "unix:///run/containerd/containerd.sock"
    assert node_report.parse_crictl_endpoint('runtime-endpoint: "unix:///run/crio/crio.sock"') == \
        "unix:///run/crio/crio.sock"
    assert node_report.parse_crictl_endpoint("timeout: 10\n") is None
    assert node_report.parse_modules_load("# Kubernetes networking (cluster-bootstrap)\noverlay\n\nbr_netfilter\n") == \
        ["overlay", "br_netfilter"]
    swaps = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/dev/dm-1   partition\t8388604\t0\t-2\n"
    assert node_report.parse_proc_swaps(swaps) == ["/dev/dm-1"]
    assert node_report.parse_proc_swaps(swaps.splitlines()[0]) == []
    fstab = ("/dev/mapper/root / xfs defaults 0 0\n/dev/mapper/swap swap  swap defaults 0 0\n"
             "# /swapfile none swap sw 0 0  # swap off for the kubelet (cluster-bootstrap)\n")
    assert node_report.parse_fstab_swaps(fstab) == ["/dev/mapper/swap swap swap defaults 0 0"]
    assert node_report.parse_apt_holds("kubeadm\nkubectl\nkubelet:amd64\n") == ["kubeadm", "kubectl", "kubelet"]
    versionlock = ("kubeadm-0:1.31.4-150500.1.1.*\nkubectl-0:1.31.4-150500.1.1.*\n"
                   "cri-tools-0:1.31.1-150500.1.1.*\nkubelet-0:1.31.4-150500.1.1.*\n")
    assert node_report.parse_dnf_versionlock(versionlock) == ["cri-tools", "kubeadm", "kubectl", "kubelet"]
    smi = ("GPU 0: NVIDIA A100-PCIE-40GB (UUID: GPU-0a1b)\n  MIG 1g.5gb Device 0: (UUID: MIG-1)\n"
           "GPU 1: NVIDIA A100-PCIE-40GB (UUID: GPU-2c3d)\n")
    assert node_report.count_nvidia_gpus(smi) == 2


def test_the_planned_packages_are_read_as_the_package_manager_names_them() -> None:
    status = ("kubeadm|hold ok installed|1.35.0-1.1\nsocat|install ok installed|1.7.4.4-2\n"
              "chrony|deinstall ok config-files|4.3-2\ncontainerd:amd64|install ok installed|1.6.20~ds1-1+b1\n")
    installed = node_report.parse_dpkg_status(status)
    assert installed == {"kubeadm": "1.35.0-1.1", "socat": "1.7.4.4-2", "containerd": "1.6.20~ds1-1+b1"}
    assert node_report.apt_spec_installed("kubeadm=1.35.0-*", installed)
    assert not node_report.apt_spec_installed("kubeadm=1.35.1-*", installed)
    assert node_report.apt_spec_installed("containerd", installed)
    assert not node_report.apt_spec_installed("chrony", installed)  # removed, its configuration left
    rpm = "kubeadm-1.35.0-150500.1.1.x86_64\npackage socat-1.7.4 is not installed\n"
    assert node_report.parse_rpm_query(["kubeadm-1.35.0", "socat-1.7.4"], rpm) == \
        {"kubeadm-1.35.0": True, "socat-1.7.4": False}


def test_the_module_runs_on_this_machine_and_its_document_validates(tmp_path: Path) -> None:
    modules = tmp_path / "modules.conf"
    modules.write_text("overlay\nbr_netfilter\n")
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "gpu_node": False, "sysctls": ["net.ipv4.ip_forward", "net.no.such.key"], "units": ["containerd"],
        "packages": ["kubeadm", "kubelet", "kubectl"], "modules_load_file": str(modules)}}))
    run = subprocess.run([sys.executable, str(MODULE_PATH), str(args)], capture_output=True, text=True, timeout=60)
    result = json.loads(run.stdout)
    assert result["changed"] is False, run.stderr
    report = NodeReport.model_validate(result[NODE_REPORT_KEY])
    assert report.modules_load == ["overlay", "br_netfilter"]
    assert report.sysctls["net.no.such.key"] is None and report.sysctls["net.ipv4.ip_forward"] in ("0", "1")
    assert set(report.packages) == {"kubeadm", "kubelet", "kubectl"} and not report.gpu_node


def test_the_document_a_prepared_node_sent_validates() -> None:
    report = NodeReport.model_validate(recorded_document())
    assert report.hostname == "n1" and report.swap.active == [] and report.modules_load == ["overlay", "br_netfilter"]
    assert report.unit("kubelet").enabled == "enabled" and report.unit("containerd").active == "active"
    assert report.containerd.cri == "ok"
    # The dump as containerd printed it (Python reads it: tests/test_containerd_config.py).
    assert 'sandbox_image = "registry.k8s.io/pause:3.10.1"' in report.containerd.config_dump
    assert report.crictl.works is None  # no crictl in the lab's placeholder packages
    assert all(p.installed and p.held for p in report.packages.values())
    assert report.model_dump(by_alias=True) == recorded_document()


def test_a_document_of_another_schema_is_refused_as_a_whole() -> None:
    with pytest.raises(ValidationError,
                       match=f"schema 2, but this version of cluster-bootstrap reads schema {NODE_REPORT_SCHEMA}"):
        NodeReport.model_validate(recorded_document() | {"schema": 2})
    with pytest.raises(ValidationError, match="extra"):
        NodeReport.model_validate(recorded_document() | {"swap_active": "0"})
    without = recorded_document()
    del without["containerd"]
    with pytest.raises(ValidationError, match="containerd"):
        NodeReport.model_validate(without)
