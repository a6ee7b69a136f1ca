"""`bootstrap upgrade --gpu-driver BRANCH` through the phase the CLI runs (provision/phases/upgrade_gpu_driver.py),
against the stand-in API server of a running cluster (tests/lab/cluster_api.py) whose GPU nodes' device plugins
advertise nvidia.com/gpu; the playbooks (gpu_driver_read.yml, upgrade_gpu_driver.yml) are replaced by what the
nodes would answer. A GPU node on another branch is drained, upgraded, its device plugin restarted, and uncordoned
only once its GPUs are allocatable again; a node already there is left alone; a bad branch is refused before any
connection. What only NVIDIA's packages and a GPU would show (the driver swap itself) is not here: docs/upgrade.md."""
from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.errors import BootstrapError
from provision.inputs.inventory import Cluster, load_inventory
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState, UpgradeRecord
from provision.inputs.upgrade import Target, UpgradeOptions, gpu_driver_settings
from provision.inputs.values import NodeName
from provision.kube import upgrade as kube_upgrade
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.nodes.runner import PlaybookResult
from provision.phases import node_upgrade, upgrade_gpu_driver
from provision.phases.engine import PhaseContext
from tests.lab.cluster_api import ExecApiServer, FakeCluster
from tests.support.refusal import assert_refused, run_main

OLD = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16)"
NEW = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.45.04  Release Build  (dvs-builder@U16)"


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.20.0.10\n[workers]\ng1 ansible_host=10.20.0.11\n"
                     "g2 ansible_host=10.20.0.12\n")
    return load_inventory(hosts)


@pytest.fixture
def fake(cluster: Cluster) -> Iterator[FakeCluster]:
    server = ExecApiServer(lambda pod, command: "").start()
    found = FakeCluster(server, ("cp1",), ("g1", "g2"), kubelet=lambda name: "v1.36.4", api_version=lambda: "v1.36.4",
                        etcd_members=lambda: ["cp1"], gpus={"g1": 2, "g2": 2}).install()
    path = admin_kubeconfig_path(cluster)
    path.parent.mkdir(parents=True, exist_ok=True)
    server.write_kubeconfig(path)
    try:
        yield found
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upgrade_gpu_driver, "wait_for_allocatable", functools.partial(
        kube_upgrade.wait_for_allocatable, sleep=lambda s: time.sleep(min(s, 0.05))))


def read_result(tmp_path: Path, found: dict[str, dict[str, str]]) -> PlaybookResult:
    """gpu_driver_read.yml's run as its events hold it: each host's nvidia_upgrade_found fact."""
    events = tmp_path / "read" / "artifacts" / "x" / "job_events"
    events.mkdir(parents=True)
    for index, (host, value) in enumerate(found.items()):
        (events / f"{index}.json").write_text(json.dumps({"event": "runner_on_ok", "event_data": {
            "host": host, "res": {"ansible_facts": {"nvidia_upgrade_found": value}}}}))
    return PlaybookResult("upgrade_gpu_driver", "gpu_driver_read.yml", 0, "successful", tmp_path / "read", {}, [], 0.1)


def context(cluster: Cluster, tmp_path: Path, found: dict[str, dict[str, str]], *, timeout_s: int = 5) -> PhaseContext:
    settings = gpu_driver_settings(Settings(), "595")
    settings = settings.model_copy(update={"verify": settings.verify.model_copy(update={"timeout_s": timeout_s})})
    state = ClusterState(gpus={NodeName("cp1"): 0, NodeName("g1"): 2, NodeName("g2"): 2},
                         upgrade=UpgradeRecord("1.36"))
    return PhaseContext(cluster=cluster, settings=settings, state=state, playbook_results=[read_result(tmp_path, found)],
                        upgrade=UpgradeOptions(Target(36), gpu_driver="595"))


def test_the_branch_and_toolkit_a_node_runs_are_read_from_their_own_words() -> None:
    assert upgrade_gpu_driver.branch_of(OLD) == "580" and upgrade_gpu_driver.branch_of(NEW) == "595"
    assert upgrade_gpu_driver.branch_of("") == "" and upgrade_gpu_driver.branch_of("garbage 1.2 x") == ""
    assert upgrade_gpu_driver.toolkit_of("NVIDIA Container Toolkit CLI version 1.18.0\ncommit: abc") == "1.18.0"
    assert upgrade_gpu_driver.toolkit_of("") == ""


def test_a_gpu_node_on_another_branch_is_drained_upgraded_and_back_only_with_its_gpus(
        cluster: Cluster, fake: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toolkit = Settings().gpu.container_toolkit_version
    found = {"g1": {"driver": OLD, "toolkit": f"NVIDIA Container Toolkit CLI version {toolkit}"},
             "g2": {"driver": NEW, "toolkit": f"NVIDIA Container Toolkit CLI version {toolkit}"}}
    ran: list[tuple[str, list[str], dict[str, Any]]] = []

    def playbook(name: str, cluster: Cluster, settings: Settings, **kwargs: Any) -> PlaybookResult:
        ran.append((name, list(kwargs["limit"]), kwargs["extra_vars"]))
        assert fake.unschedulable == {"g1": True} and settings.gpu.driver_branch == "595"
        # The driver swapped: the old plugin lost its GPUs; a restarted one finds them again.
        fake.gpus["g1"] = 0
        return PlaybookResult("upgrade_gpu_driver", name, 0, "successful", tmp_path, {}, [], 0.1)

    fake.on_delete = lambda namespace, pod: fake.gpus.__setitem__(pod.removeprefix("nvidia-device-plugin-"), 2)
    monkeypatch.setattr(node_upgrade, "run_playbook", playbook)
    ctx = context(cluster, tmp_path, found)
    detail = upgrade_gpu_driver.check(ctx)
    assert detail == f"NVIDIA driver on g1 (580 -> 595), container toolkit {toolkit}; GPUs allocatable"
    assert [(name, limit) for name, limit, _ in ran] == [("upgrade_gpu_driver.yml", ["g1"])]
    assert ran[0][2]["cb_gpu_driver_upgrade"] == {"from": {"g1": "580"}}
    assert ran[0][2]["cb_nvidia_nodes"] == ["g1", "g2"]
    assert [a for _, a in fake.actions()] == ["cordon g1", "delete kube-system/nvidia-device-plugin-g1", "uncordon g1"]
    assert ctx.state.upgrade is not None and ctx.state.upgrade.gpu_driver["g1"].stage == "done"
    assert ctx.state.upgrade.nodes == {}


def test_gpus_that_do_not_come_back_keep_the_node_cordoned_and_a_rerun_finishes_it(
        cluster: Cluster, fake: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def playbook(name: str, cluster: Cluster, settings: Settings, **kwargs: Any) -> PlaybookResult:
        for host in kwargs["limit"]:
            fake.gpus[host] = 0
        return PlaybookResult("upgrade_gpu_driver", name, 0, "successful", tmp_path, {}, [], 0.1)

    monkeypatch.setattr(node_upgrade, "run_playbook", playbook)
    found = {name: {"driver": OLD, "toolkit": ""} for name in ("g1", "g2")}
    ctx = context(cluster, tmp_path, found, timeout_s=1)
    with pytest.raises(BootstrapError, match=r"^g1: after its NVIDIA driver upgrade 0 nvidia.com/gpu allocatable of 2 "
                                             r"after 1 s: .*\(g1 stays cordoned\)$"):
        upgrade_gpu_driver.check(ctx)
    assert fake.unschedulable == {"g1": True} and "g2" not in fake.unschedulable
    assert ctx.state.upgrade is not None and ctx.state.upgrade.gpu_driver["g1"].stage == "upgraded"
    # The plugin finds the GPUs (the operator fixed the node); the same command finds g1 at the branch but left out
    # of service, and finishes it and g2.
    fake.gpus["g1"] = 2
    fake.on_delete = lambda namespace, pod: fake.gpus.__setitem__(pod.removeprefix("nvidia-device-plugin-"), 2)
    again = context(cluster, tmp_path / "again", {"g1": {"driver": NEW, "toolkit": ""}, "g2": found["g2"]})
    again.state = ctx.state
    upgrade_gpu_driver.check(again)
    assert fake.unschedulable == {"g1": False, "g2": False}


def test_nothing_to_do_when_every_gpu_node_runs_the_branch(cluster: Cluster, fake: FakeCluster,
                                                          tmp_path: Path) -> None:
    toolkit = Settings().gpu.container_toolkit_version
    found = {name: {"driver": NEW, "toolkit": f"version {toolkit}"} for name in ("g1", "g2")}
    assert upgrade_gpu_driver.check(context(cluster, tmp_path, found)) == (
        f"every GPU node runs driver 595 and container toolkit {toolkit}")
    assert fake.actions() == []


def test_a_driver_branch_outside_the_table_is_refused_before_any_connection(cluster: Cluster) -> None:
    inventory = str(cluster.inventory_path)
    assert_refused(run_main("upgrade", "--gpu-driver", "570", "-i", inventory), "--gpu-driver:",
                   "is not in the versions table")
    assert_refused(run_main("upgrade", "--gpu-driver", "latest", "-i", inventory), "--gpu-driver")
