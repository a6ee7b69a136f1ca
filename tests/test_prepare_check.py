"""The Python check after the prepare playbook, and the choice of Ansible executor (no nodes needed)."""
from __future__ import annotations

import builtins
import json
from pathlib import Path
from typing import Any

import pytest

from provision.errors import BootstrapError
from provision.inputs.settings import Settings, parse_settings
from provision.nodes.prepare import check_node, read_reports
from provision.nodes.reports import NODE_REPORT_SCHEMA, NodeReport
from provision.nodes.runner import executor_envvars
from tests.support.node_reports import recorded_document, recorded_settings


def merged(document: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(document)
    for key, value in changes.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


RECORDED = recorded_settings()
# What nvidia-ctk's drop-in adds to a version-2 dump with gpu.runtime: default, as containerd merges it.
NVIDIA = """
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/bin/nvidia-container-runtime"
    SystemdCgroup = true
"""


def report(**changes: Any) -> NodeReport:
    """The document a prepared lab node sent (tests/data/node_report/), with some facts changed."""
    return NodeReport.model_validate(merged(recorded_document(), changes))


def dump(*replacements: tuple[str, str], extra: str = "") -> dict[str, str]:
    """The recorded node's `containerd config dump`, changed: for report(containerd=...)."""
    text = recorded_document()["containerd"]["config_dump"]
    for old, new in replacements:
        assert old in text
        text = text.replace(old, new)
    return {"config_dump": text + extra}


def test_a_ready_node_has_no_problems() -> None:
    assert check_node("n1", report(), RECORDED) == []


@pytest.mark.parametrize(("changes", "problem"), [
    ({"hostname": "debian"}, "hostname is 'debian', not its node name 'n1'"),
    ({"swap": {"active": ["/dev/dm-1"]}}, "swap is still on"),
    ({"swap": {"fstab": ["/swapfile none swap sw 0 0"]}}, "/etc/fstab still has an active swap line"),
    ({"modules_load": ["overlay"]}, "br_netfilter is not in /etc/modules-load.d/cluster-bootstrap.conf"),
    ({"sysctls": {"net.ipv4.ip_forward": "0"}}, "sysctl net.ipv4.ip_forward is '0', not 1"),
    ({"sysctls": {"net.ipv4.ip_forward": None}}, "sysctl net.ipv4.ip_forward is '', not 1"),
    ({"units": {"containerd": {"active": "failed"}}}, "containerd is not running"),
    ({"containerd": dump(("SystemdCgroup = true", "SystemdCgroup = false"))},
     "containerd runs with plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc.options.SystemdCgroup = False, "
     "expected true (`containerd config dump`"),
    ({"containerd": dump(("pause:3.10.1", "pause:3.9"))},
     "plugins.'io.containerd.grpc.v1.cri'.sandbox_image = 'registry.k8s.io/pause:3.9', expected "
     "'registry.k8s.io/pause:3.10.1'"),
    ({"containerd": {"cri": None}}, "CRI plugin is not running"),
    ({"crictl": {"endpoint": "unix:///run/crio/crio.sock"}}, "/etc/crictl.yaml does not point at containerd's socket"),
    ({"crictl": {"works": False}}, "`crictl version` fails"),
    ({"units": {"docker": {"active": "inactive"}}}, "Docker is not running"),
    ({"packages": {"kubeadm": {"installed": False}}}, "kubeadm is not installed"),
    ({"packages": {"kubelet": {"held": False}, "kubectl": {"held": False}}}, "kubelet, kubectl not held"),
    ({"units": {"kubelet": {"enabled": "disabled"}}}, "the kubelet is not enabled at boot"),
    ({"kubeadm_version": "1.36.4-1.1"}, "kubeadm 1.36.4 is installed, but kubernetes.version is 1.35"),
    ({"kubeadm_version": "placeholder"}, "the installed kubeadm's version 'placeholder' is not a Kubernetes release"),
    ({"package_plan": {"conntrack": False, "socat": False}}, "conntrack, socat not installed"),
    ({"gpu_node": True, "nvidia_gpus": 0,
      "containerd": dump(('default_runtime_name = "runc"', 'default_runtime_name = "nvidia"'), extra=NVIDIA)},
     "nvidia-smi lists no GPU"),
    ({"gpu_node": True, "nvidia_gpus": 2, "containerd": dump(('default_runtime_name = "runc"',
                                                              'default_runtime_name = "nvidia"'))},
     "containerd runs with plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.nvidia is missing"),
])
def test_each_unready_fact_is_named(changes: dict[str, Any], problem: str) -> None:
    problems = check_node("n1", report(**changes), RECORDED)
    assert len(problems) == 1 and problem in problems[0], problems


def test_prepare_decides_the_release_kubeadm_init_is_given_from_the_control_planes_report(tmp_path: Path) -> None:
    # A bare minor in the settings: the release is the kubeadm package the control plane got (dpkg's 1.35.2-1.1,
    # rpm's 1.35.2), decided once by prepare, so kubeadm never asks dl.k8s.io for "stable-1".
    from provision.inputs.inventory import load_inventory
    from provision.nodes.prepare import kubernetes_version
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2\n")
    cluster = load_inventory(hosts)
    reports = {"cp1": report(kubeadm_version="1.35.2-1.1"), "w1": report(kubeadm_version="1.35.3")}
    assert kubernetes_version(reports, cluster) == "1.35.2"
    assert kubernetes_version({"w1": reports["w1"]}, cluster) is None
    assert check_node("n1", report(kubeadm_version="1.35.2"), RECORDED) == []
    pinned = parse_settings({"kubernetes": {"version": "1.35.2"},
                             "container_runtime": {"containerd_source": "distribution"}})
    assert check_node("n1", report(kubeadm_version="1.35.2-1.1"), pinned) == []
    assert "kubeadm 1.35.3 is installed, but kubernetes.version is 1.35.2" in \
        check_node("n1", report(kubeadm_version="1.35.3-1.1"), pinned)[0]


def test_docker_is_only_required_when_installed() -> None:
    no_docker = RECORDED.model_copy(update={"container_runtime": RECORDED.container_runtime.model_copy(
        update={"install_docker": False})})
    assert check_node("n1", report(units={"docker": {"active": "inactive"}}), no_docker) == []


def test_a_gpu_node_with_its_gpus_and_nvidias_runtime_is_ready() -> None:
    nvidia = dump(('default_runtime_name = "runc"', 'default_runtime_name = "nvidia"'), extra=NVIDIA)
    assert check_node("n1", report(gpu_node=True, nvidia_gpus=2, containerd=nvidia), RECORDED) == []


def test_the_sandbox_image_is_the_one_kubeadm_of_the_chosen_minor_uses() -> None:
    # The recorded node was prepared for 1.35 (pause 3.10.1); 1.36's kubeadm uses 3.10.2.
    problems = check_node("n1", report(kubeadm_version="1.36.4-1.1"), Settings())
    assert problems == ["containerd runs with plugins.'io.containerd.grpc.v1.cri'.sandbox_image = "
                        "'registry.k8s.io/pause:3.10.1', expected 'registry.k8s.io/pause:3.10.2' (`containerd config "
                        "dump`; is another file under /etc/containerd overriding prepare's?)"]


def write_events(run_dir: Path, events: list[tuple[str, str, dict[str, Any]]]) -> None:
    folder = run_dir / "artifacts" / "ident" / "job_events"
    folder.mkdir(parents=True)
    for counter, (host, task, res) in enumerate(events):
        (folder / f"{counter}-x.json").write_text(json.dumps({"event": "runner_on_ok", "event_data": {
            "host": host, "task": task, "res": res}}))


def test_reports_are_found_in_the_runs_saved_events_by_the_modules_key_whatever_the_task_is_called(
        tmp_path: Path) -> None:
    write_events(tmp_path, [("n1", "Tell Python how the node looks", {"changed": False, "cb_report": recorded_document()}),
                            ("n2", "Report the prepared state", {"stdout_lines": ["hostname=n2"]})])
    reports = read_reports(tmp_path)
    assert list(reports) == ["n1"] and reports["n1"].packages["kubeadm"].held


def test_a_report_this_version_cannot_read_names_the_host(tmp_path: Path) -> None:
    newer = NODE_REPORT_SCHEMA + 1
    write_events(tmp_path, [("n1", "Report", {"cb_report": recorded_document() | {"schema": newer}})])
    with pytest.raises(BootstrapError, match=r"^prepare: n1 sent a report of its state that this version .* \(schema: "
                                             rf".*schema {newer}.*\); the playbooks and the Python package"):
        read_reports(tmp_path)


def test_executor_auto_uses_mitogen_when_it_is_installed() -> None:
    env = executor_envvars(Settings())
    assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert (Path(env["ANSIBLE_STRATEGY_PLUGINS"]) / "mitogen_linear.py").is_file()
    assert executor_envvars(parse_settings({"ansible": {"executor": "stock"}})) == {}


def test_executor_falls_back_to_stock_without_mitogen_unless_mitogen_is_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_mitogen(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("ansible_mitogen"):
            raise ImportError("No module named 'ansible_mitogen'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mitogen)
    assert executor_envvars(Settings()) == {}
    with pytest.raises(BootstrapError, match="ansible.executor is 'mitogen' but Mitogen cannot be used"):
        executor_envvars(parse_settings({"ansible": {"executor": "mitogen"}}))
