"""The Python check after the prepare playbook, and the choice of Ansible executor (no nodes needed)."""
from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest

from provision.errors import BootstrapError
from provision.inputs.settings import Settings, parse_settings
from provision.nodes.prepare import NodeReport, check_node, read_reports
from provision.nodes.runner import executor_envvars

READY = """hostname=n1
swap_active=0
fstab_swap=0
modules_load=overlay br_netfilter
sysctl.net.bridge.bridge-nf-call-iptables=1
sysctl.net.bridge.bridge-nf-call-ip6tables=1
sysctl.net.ipv4.ip_forward=1
active.containerd=active
enabled.containerd=enabled
active.docker=active
active.kubelet=activating
enabled.kubelet=enabled
systemd_cgroup=1
cri=ok
crictl_endpoint=unix:///run/containerd/containerd.sock
installed.kubeadm=yes
installed.kubelet=yes
installed.kubectl=yes
held=kubeadm kubectl kubelet
gpu_node=False
nvidia_runtime=0""".splitlines()


def report(**changes: str) -> NodeReport:
    facts = NodeReport.parse("n1", READY).facts | changes
    return NodeReport(host="n1", facts=facts)


def test_a_ready_node_has_no_problems() -> None:
    assert check_node(report(), Settings()) == []


@pytest.mark.parametrize(("changes", "problem"), [
    ({"hostname": "debian"}, "hostname is 'debian', not its inventory name 'n1'"),
    ({"swap_active": "1"}, "swap is still on"),
    ({"fstab_swap": "1"}, "/etc/fstab still has an active swap line"),
    ({"modules_load": "overlay"}, "br_netfilter is not in /etc/modules-load.d/cluster-bootstrap.conf"),
    ({"sysctl.net.ipv4.ip_forward": "0"}, "sysctl net.ipv4.ip_forward is '0', not 1"),
    ({"active.containerd": "failed"}, "containerd is not running"),
    ({"systemd_cgroup": "0"}, "SystemdCgroup = true is missing"),
    ({"cri": ""}, "CRI plugin is not running"),
    ({"crictl_endpoint": "unix:///run/crio/crio.sock"}, "/etc/crictl.yaml does not point at containerd's socket"),
    ({"crictl": "failing"}, "`crictl version` fails"),
    ({"active.docker": "inactive"}, "Docker is not running"),
    ({"installed.kubeadm": "no"}, "kubeadm is not installed"),
    ({"held": "kubeadm"}, "kubelet, kubectl not held"),
    ({"enabled.kubelet": "disabled"}, "the kubelet is not enabled at boot"),
    ({"gpu_node": "True", "nvidia_gpus": "0", "nvidia_runtime": "2"}, "nvidia-smi lists no GPU"),
    ({"gpu_node": "True", "nvidia_gpus": "2", "nvidia_runtime": "0"}, "containerd has no nvidia runtime"),
])
def test_each_unready_fact_is_named(changes: dict[str, str], problem: str) -> None:
    problems = check_node(report(**changes), Settings())
    assert len(problems) == 1 and problem in problems[0], problems


def test_docker_is_only_required_when_installed() -> None:
    no_docker = parse_settings({"container_runtime": {"install_docker": False}})
    assert check_node(report(**{"active.docker": "inactive"}), no_docker) == []


def test_reports_are_read_from_the_runs_saved_events(tmp_path: Path) -> None:
    events = tmp_path / "artifacts" / "ident" / "job_events"
    events.mkdir(parents=True)
    for counter, (host, task, lines) in enumerate([("n1", "Report the prepared state", READY),
                                                   ("n2", "Some other task", ["hostname=n2"])]):
        (events / f"{counter}-x.json").write_text(json.dumps({"event": "runner_on_ok", "event_data": {
            "host": host, "task": task, "res": {"stdout_lines": lines}}}))
    reports = read_reports(tmp_path)
    assert list(reports) == ["n1"] and reports["n1"].get("held") == "kubeadm kubectl kubelet"


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
