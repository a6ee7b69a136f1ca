"""`bootstrap prepare` on real nodes (Debian bookworm under systemd-nspawn, reached over SSH).

os_prep and container_runtime run for real (Debian's docker.io and containerd, from the Debian mirror).
kubernetes_packages runs for real against a local, signed apt repository of PLACEHOLDER packages (see
tests/lab/repos.py): pkgs.k8s.io cannot be reached here. The default source and NVIDIA's repositories
are tested up to that boundary: the run fails within a bounded time, naming the repository and the setting.
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from provision.cli.app import app
from provision.errors import BootstrapError
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import load_settings
from provision.nodes.preflight.run import run_preflight
from provision.nodes.prepare import PrepareResult
from tests.lab.lab import Lab, LabNode
from tests.lab.prepare import prepare_nodes
from tests.lab.repos import OFFLINE_DIR, push_kubernetes_repo, write_config

SYSCTLS = ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables", "net.ipv4.ip_forward")
# An unreachable source must fail fast: DNS fails at once here, and every download has a 20 s timeout.
FAILURE_BOUND_S = 120
BOOKWORM_KUBERNETES = "1.35"


@pytest.fixture(scope="module")
def lab(lab_factory: Callable[..., Lab]) -> Lab:
    return lab_factory(3)


@pytest.fixture(scope="module")
def lab_config(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Debian 12's own containerd is 1.6: Kubernetes 1.35 runs on it (warned), 1.36 would be refused
    # (tests/test_containerd2_lab.py shows both on trixie, and 1.36 on sid's containerd 2).
    tmp = tmp_path_factory.mktemp("prepare")
    push_kubernetes_repo(lab, tmp / "offline", BOOKWORM_KUBERNETES)
    return write_config(lab, tmp / "cluster.yaml", kubernetes={"version": BOOKWORM_KUBERNETES},
                        mirrors={"kubernetes_repo": f"file://{OFFLINE_DIR}/kubernetes"},
                        container_runtime={"containerd_source": "distribution"})


@pytest.fixture(scope="module")
def gpus(lab: Lab) -> dict[str, int]:
    """The GPUs preflight counts on the lab's nodes (none), which `bootstrap prepare` hands to the playbook."""
    return run_preflight(load_inventory(lab.inventory_path), load_settings(lab.config_path)).gpu_counts


@pytest.fixture(scope="module")
def first_run(lab: Lab, lab_config: Path, gpus: dict[str, int]) -> PrepareResult:
    return prepare_nodes(load_inventory(lab.inventory_path), load_settings(lab_config), gpus=gpus)


def test_first_prepare_changes_every_node_and_reports_it_ready(lab: Lab, first_run: PrepareResult) -> None:
    assert first_run.playbook.ok
    assert set(first_run.reports) == {node.name for node in lab.nodes}
    for node in lab.nodes:
        assert first_run.changed[node.name] > 0
        assert first_run.reports[node.name].hostname == node.name


def test_prepared_nodes_have_the_os_settings_kubeadm_needs(lab: Lab, first_run: PrepareResult) -> None:
    for node in lab.nodes:
        run = node.ssh
        assert run("hostname").stdout.strip() == node.name
        hosts = run("cat /etc/hosts").stdout
        block = hosts.split("# BEGIN cluster-bootstrap nodes")[1].split("# END cluster-bootstrap nodes")[0]
        assert sorted(block.split()) == sorted([n.ip for n in lab.nodes] + [n.name for n in lab.nodes])
        fstab_swap = [line for line in run("cat /etc/fstab").stdout.splitlines()
                      if not line.lstrip().startswith("#") and re.search(r"\sswap\s", line)]
        assert fstab_swap == []
        assert run("swapon --show --noheadings").stdout.strip() == ""
        assert run("systemctl is-enabled swap.target", check=False).stdout.strip() == "masked"
        modules = run("cat /etc/modules-load.d/cluster-bootstrap.conf").stdout.split()
        assert {"overlay", "br_netfilter"} <= set(modules)
        persisted = run("cat /etc/sysctl.d/99-cluster-bootstrap.conf").stdout
        for key in SYSCTLS:
            assert re.search(rf"^{re.escape(key)}\s*=\s*1$", persisted, re.MULTILINE), key
            assert run(f"sysctl -n {key}").stdout.strip() == "1"
        # In a container the clock is the host's: chronyd serves time but never sets it (-x).
        assert "-x" in run("cat /proc/$(pidof -s chronyd)/cmdline | tr '\\0' ' '").stdout.split()


def test_prepared_nodes_run_containerd_for_kubernetes_and_docker(lab: Lab, first_run: PrepareResult) -> None:
    for node in lab.nodes:
        run = node.ssh
        assert run("systemctl is-active containerd docker").stdout.split() == ["active", "active"]
        dump = run("containerd config dump").stdout
        assert re.search(r"^\s*SystemdCgroup = true$", dump, re.MULTILINE)
        assert 'sandbox_image = "registry.k8s.io/pause:3.10.1"' in dump
        assert 'config_path = "/etc/containerd/certs.d"' in dump
        assert run("docker info --format '{{.CgroupDriver}}'").stdout.strip() == "systemd"
        # crictl comes with cri-tools from the Kubernetes repository (not in Debian): its configuration points
        # at containerd's socket, and the CRI service behind that socket is up.
        assert "runtime-endpoint: unix:///run/containerd/containerd.sock" in run("cat /etc/crictl.yaml").stdout
        cri = [line.split() for line in run("ctr --address /run/containerd/containerd.sock plugins ls").stdout
               .splitlines() if line.split()[1:2] == ["cri"]]
        assert cri and cri[0][-1] == "ok"


def test_prepared_nodes_have_kubernetes_packages_held_from_the_signed_repository(lab: Lab, lab_config: Path,
                                                                                 first_run: PrepareResult) -> None:
    for node in lab.nodes:
        run = node.ssh
        sources = run("cat /etc/apt/sources.list.d/cb-kubernetes.sources").stdout
        assert f"URIs: file://{OFFLINE_DIR}/kubernetes/v1.35/deb/" in sources
        assert "Signed-By: /etc/apt/keyrings/cb-kubernetes.asc" in sources
        assert "trusted" not in sources.lower()
        assert set(run("apt-mark showhold").stdout.split()) >= {"kubeadm", "kubelet", "kubectl"}
        assert run("kubeadm").stdout.strip() == "kubeadm placeholder v1.35.0"
        assert run("systemctl is-enabled kubelet").stdout.strip() == "enabled"


def test_a_second_prepare_changes_nothing_on_any_node(lab: Lab, lab_config: Path, first_run: PrepareResult,
                                                     gpus: dict[str, int]) -> None:
    again = prepare_nodes(load_inventory(lab.inventory_path), load_settings(lab_config), gpus=gpus)
    assert again.changed == {node.name: 0 for node in lab.nodes}
    assert again.playbook.elapsed_s < first_run.playbook.elapsed_s
    # Each role's work, held already, is one skipped step: nothing inside it is evaluated for the node.
    results = [line.split("\t")[1:3] for line in (again.playbook.run_dir / "run.log").read_text().splitlines()
               if line.startswith("n1\t")]
    steps = {re.sub(r" \([\d.]+s\)$", "", task): state for state, task in results}
    for gate in ("The node before its packages", "Where containerd comes from, and Docker's repository",
                 "Kubernetes repository", "Install every package in one transaction", "The OS configured",
                 "The container runtime configured", "Kubeadm, kubelet and kubectl held, the kubelet enabled"):
        assert steps.get(gate) == "skipped", (gate, steps)
    for inside in ("Swap off", "Kernel modules", "Containerd for Kubernetes", "Kubelet service", "Sysctl"):
        assert inside not in steps, (inside, steps)
    # Each judged once: the container runtime is not judged again as the nvidia role's dependency.
    judged = [task for _state, task in results]
    assert len([task for task in judged if task.startswith("The container runtime configured")]) == 1, judged
    # What reaches the node: the facts, the read and the report.
    assert [task for task, state in steps.items() if state != "skipped" and not task.startswith(
        ("Find the node's row", "Check the node's system", "Check the GPU nodes",
         "The container runtime's parts that differ"))] == [
        "Read the facts the roles read", "Read the node's state", "Report the prepared state"]


def changed_tasks(result: PrepareResult, host: str) -> list[str]:
    """The tasks that reported a change on `host`, from ansible-runner's saved events."""
    events = (json.loads(path.read_text()) for path in result.playbook.run_dir.glob("artifacts/*/job_events/*.json"))
    return sorted({e["event_data"].get("task", "") for e in events
                   if e.get("event") == "runner_on_ok" and e["event_data"].get("host") == host
                   and (e["event_data"].get("res") or {}).get("changed")})


def main_pids(node: LabNode, units: tuple[str, ...]) -> dict[str, str]:
    return {unit: node.ssh(f"systemctl show --property=MainPID --value {unit}").stdout.strip() for unit in units}


def test_a_node_edited_by_hand_gets_exactly_those_edits_put_right(lab: Lab, lab_config: Path,
                                                                  first_run: PrepareResult,
                                                                  gpus: dict[str, int]) -> None:
    node, other = lab.node("n1"), lab.node("n2")
    sysctl_file, containerd_config = "/etc/sysctl.d/99-cluster-bootstrap.conf", "/etc/containerd/config.toml"
    # An operator turns forwarding off, puts containerd on cgroupfs and points n2 elsewhere, each the usual way.
    node.ssh(f"sed -i 's/^net.ipv4.ip_forward *= *1$/net.ipv4.ip_forward = 0/' {sysctl_file} && sysctl -p {sysctl_file}")
    node.ssh(f"sed -i 's/SystemdCgroup = true/SystemdCgroup = false/' {containerd_config} && systemctl restart containerd")
    # /etc/hosts may be a bind mount in a container: written in place, not replaced.
    node.ssh(f"sed 's/^{re.escape(other.ip)} n2$/10.0.0.99 n2/' /etc/hosts > /tmp/hosts.edited && "
             "cat /tmp/hosts.edited > /etc/hosts")
    assert node.ssh("sysctl -n net.ipv4.ip_forward").stdout.strip() == "0"
    assert "10.0.0.99 n2" in node.ssh("cat /etc/hosts").stdout
    pids = main_pids(node, ("containerd", "docker", "chrony"))
    # Modification times have a granularity: whatever the re-run writes is newer than this mark.
    node.ssh("sleep 1.1 && touch /run/cb-before-repair && sleep 1.1")

    again = prepare_nodes(load_inventory(lab.inventory_path), load_settings(lab_config), gpus=gpus)

    assert again.playbook.ok
    assert {name: again.changed[name] for name in ("n2", "n3")} == {"n2": 0, "n3": 0}
    written = node.ssh("find /etc /var/lib/cluster-bootstrap /usr/local -xdev -type f -newer /run/cb-before-repair "
                       "| sort").stdout.split()
    assert written == sorted([sysctl_file, containerd_config, "/etc/hosts"])
    changed = changed_tasks(again, "n1")
    assert len(changed) == 4, changed
    assert any("sysctl" in task.lower() for task in changed), changed
    assert any("/etc/hosts" in task for task in changed), changed
    assert "Restart containerd" in changed, changed
    # Only containerd, whose configuration was put right, was restarted.
    after = main_pids(node, ("containerd", "docker", "chrony"))
    assert after["containerd"] != pids["containerd"]
    assert {unit: after[unit] for unit in ("docker", "chrony")} == {unit: pids[unit] for unit in ("docker", "chrony")}
    # The node's own report after the re-run says it holds again.
    report = again.reports["n1"]
    assert report.sysctls["net.ipv4.ip_forward"] == "1"
    assert re.search(r"^\s*SystemdCgroup = true$", report.containerd.config_dump, re.MULTILINE)
    assert node.ssh("sysctl -n net.ipv4.ip_forward").stdout.strip() == "1"
    assert re.search(r"^net.ipv4.ip_forward\s*=\s*1$", node.ssh(f"cat {sysctl_file}").stdout, re.MULTILINE)
    hosts = node.ssh("cat /etc/hosts").stdout
    assert f"{other.ip} n2" in hosts and "10.0.0.99" not in hosts


def test_a_node_without_etc_docker_gets_its_docker_configuration(lab: Lab, lab_config: Path, first_run: PrepareResult,
                                                                  gpus: dict[str, int]) -> None:
    # Docker CE's RPM ships no /etc/docker and does not start the daemon (RHEL family), so the directory may
    # not exist when daemon.json is written; Debian's docker.io ships it, so take it away here.
    node = lab.node("n2")
    node.ssh("rm -rf /etc/docker")
    again = prepare_nodes(load_inventory(lab.inventory_path), load_settings(lab_config), gpus=gpus, limit=["n2"])
    assert again.playbook.ok
    assert '"native.cgroupdriver=systemd"' in node.ssh("cat /etc/docker/daemon.json").stdout
    assert node.ssh("stat -c %a /etc/docker").stdout.strip() == "755"
    assert node.ssh("docker info --format '{{.CgroupDriver}}'").stdout.strip() == "systemd"


def test_a_registry_mirror_dropped_from_the_settings_is_no_longer_configured(
        lab: Lab, lab_config: Path, tmp_path: Path, first_run: PrepareResult, gpus: dict[str, int]) -> None:
    node = lab.node("n3")

    def config_with(name: str, registry_mirrors: dict[str, list[str]]) -> Path:
        return write_config(lab, tmp_path / name, kubernetes={"version": BOOKWORM_KUBERNETES},
                            mirrors={"kubernetes_repo": f"file://{OFFLINE_DIR}/kubernetes"},
                            container_runtime={"containerd_source": "distribution", "registry_mirrors": registry_mirrors})

    mirrors = {"docker.io": ["https://hub.mirror.example"], "quay.io": ["https://quay.mirror.example"]}
    with_mirrors = config_with("mirrors.yaml", mirrors)
    assert prepare_nodes(load_inventory(lab.inventory_path), load_settings(with_mirrors), gpus=gpus, limit=["n3"]).playbook.ok
    node.ssh("install -d /etc/containerd/certs.d/quay.io && echo operator-ca > /etc/containerd/certs.d/quay.io/ca.crt")
    assert "hub.mirror.example" in node.ssh("cat /etc/containerd/certs.d/docker.io/hosts.toml").stdout

    only_docker = config_with("docker-only.yaml", {"docker.io": mirrors["docker.io"]})
    assert prepare_nodes(load_inventory(lab.inventory_path), load_settings(only_docker), gpus=gpus, limit=["n3"]).playbook.ok
    assert node.ssh("test -e /etc/containerd/certs.d/quay.io/hosts.toml", check=False).returncode == 1
    assert node.ssh("cat /etc/containerd/certs.d/quay.io/ca.crt").stdout.strip() == "operator-ca"
    assert "hub.mirror.example" in node.ssh("cat /etc/containerd/certs.d/docker.io/hosts.toml").stdout

    back = prepare_nodes(load_inventory(lab.inventory_path), load_settings(lab_config), gpus=gpus, limit=["n3"])
    assert back.playbook.ok
    assert node.ssh("test -e /etc/containerd/certs.d/docker.io/hosts.toml", check=False).returncode == 1


def test_unreachable_kubernetes_repository_fails_fast_by_name_and_leaves_no_broken_source(
        lab: Lab, tmp_path: Path, first_run: PrepareResult, gpus: dict[str, int]) -> None:
    default_repo = write_config(lab, tmp_path / "cluster.yaml", kubernetes={"version": BOOKWORM_KUBERNETES},
                                container_runtime={"containerd_source": "distribution"})
    node = lab.node("n1")
    listed = node.ssh("cat /etc/apt/sources.list.d/cb-kubernetes.sources").stdout
    # `bootstrap prepare` runs preflight first, which asks the node for the repository's index and stops there.
    refused = CliRunner().invoke(app, ["prepare", "-i", str(lab.inventory_path), "-c", str(default_repo),
                                       "--limit", "n1"])
    assert refused.exit_code == 1, refused.output
    message = " ".join(str(refused.exception or "").split())
    assert "Kubernetes packages https://pkgs.k8s.io/core:/stable:/v1.35/deb/InRelease" in message
    assert "from n1: set mirrors.kubernetes_repo" in message
    assert node.ssh("cat /etc/apt/sources.list.d/cb-kubernetes.sources").stdout == listed
    # A repository that fails after preflight (prepare run regardless): the role names it and takes it out again.
    started = time.monotonic()
    with pytest.raises(BootstrapError) as failed:
        prepare_nodes(load_inventory(lab.inventory_path), load_settings(default_repo), gpus=gpus, limit=["n1"])
    message = " ".join(str(failed.value).split())
    assert "Kubernetes repository https://pkgs.k8s.io/core:/stable:/v1.35/deb/ is unusable from n1" in message
    assert "mirrors.kubernetes_repo" in message
    assert time.monotonic() - started < FAILURE_BOUND_S
    # apt keeps working on the node: the unusable source was taken out again.
    assert node.ssh("test -e /etc/apt/sources.list.d/cb-kubernetes.sources", check=False).returncode == 1
    assert node.ssh("apt-get update -q", timeout=120).returncode == 0


def test_a_gpu_node_fails_fast_at_nvidias_unreachable_repository(lab: Lab, lab_config: Path, tmp_path: Path,
                                                                first_run: PrepareResult, gpus: dict[str, int]) -> None:
    inventory = tmp_path / "hosts.ini"
    lab.write_inventory(path=inventory)
    inventory.write_text(inventory.read_text().replace(f"n3 ansible_host={lab.node('n3').ip}",
                                                       f"n3 ansible_host={lab.node('n3').ip} gpu=true"))
    # `bootstrap prepare` runs preflight first, which finds no GPU on n3 and stops before anything changes.
    refused = CliRunner().invoke(app, ["prepare", "-i", str(inventory), "-c", str(lab_config), "--limit", "n3"])
    assert refused.exit_code == 1, refused.output
    assert "n3: gpu: gpu=true in the inventory, but no NVIDIA GPU was found" in str(refused.exception)
    # Prepared regardless (the inventory's gpu=true wins over preflight's count), n3 gets as far as NVIDIA's repository.
    started = time.monotonic()
    with pytest.raises(BootstrapError) as failed:
        prepare_nodes(load_inventory(inventory), load_settings(lab_config), gpus=gpus, limit=["n3"])
    message = " ".join(str(failed.value).split())
    assert "NVIDIA CUDA repository https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ " \
           "is unusable from n3" in message
    assert "mirrors.nvidia_cuda_repo" in message
    assert time.monotonic() - started < FAILURE_BOUND_S
    node = lab.node("n3")
    assert "blacklist nouveau" in node.ssh(
        "cat /etc/modprobe.d/cluster-bootstrap-blacklist-nouveau.conf").stdout
    assert node.ssh("ls /etc/apt/sources.list.d/ | grep -c nvidia", check=False).stdout.strip() == "0"


def test_the_mitogen_executor_still_refuses_an_unknown_host_key(lab: Lab, lab_config: Path, tmp_path: Path,
                                                                first_run: PrepareResult, gpus: dict[str, int]) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    config = yaml.safe_load(lab_config.read_text())
    config["ssh"]["known_hosts_file"] = str(empty)
    config["ansible"] = {"executor": "mitogen"}
    strict = tmp_path / "cluster.yaml"
    strict.write_text(yaml.safe_dump(config))
    with pytest.raises(BootstrapError) as refused:
        prepare_nodes(load_inventory(lab.inventory_path), load_settings(strict), gpus=gpus, limit=["n1"])
    assert "n1: unreachable" in str(refused.value)
    assert "Host key verification failed" in str(refused.value) or "host key" in str(refused.value).lower()
    assert empty.read_text() == ""
