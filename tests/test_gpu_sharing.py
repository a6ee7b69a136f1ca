"""GPU sharing and MIG from one setting: refused in one line where the settings contradict each other or the GPUs
cannot take them (config validation, then preflight on the PCI device ids), rendered into the device plugin's own
configuration, laid out on the node by NVIDIA's own tool (a stand-in nvidia-smi here: no GPU in this project's
tests), and held to by verify: allocatable must be what the scheduler was promised, not the GPUs preflight saw."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.inputs.inventory import Node
from provision.inputs.settings import parse_settings
from provision.kube.client import load_api_client
from provision.kube.verify import Expectations, verify_cluster
from provision.nodes.preflight.checks import evaluate
from provision.nodes.preflight.probe import NodeFacts
from provision.render.manifests import device_plugin_config, device_plugin_manifest, gpu_node_labels
from provision.resources import PLAYBOOKS_DIR
from tests.support import fake_nvidia_smi
from tests.support.apiserver import FakeApiServer, object_list
from tests.support.kube_objects import VERSION, healthy_pods, node
from tests.support.refusal import assert_refused, run_main

INVENTORY = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2\n"
NODE = Node(name="n1", address="10.0.0.1", role="worker", user="ops")
CORE = "2.21.5"
A100_80GB, H200, L40S = 0x20B2, 0x2335, 0x26B9


# --- settings that contradict each other: refused before anything runs -----------------------------------------

@pytest.mark.parametrize(("settings", "field", "words"), [
    ("gpu:\n  sharing: time-slicing\n  replicas: 1\n", "gpu.replicas", ["1 replica shares nothing", "2 to 64"]),
    ("gpu:\n  sharing: mps\n  replicas: 0\n", "gpu.replicas", ["shares nothing"]),
    ("gpu:\n  sharing: time-slicing\n  replicas: 1000\n", "gpu.replicas", ["more than 64"]),
    ("gpu:\n  sharing: time-slicing\n", "gpu", ["sharing time-slicing needs gpu.replicas"]),
    ("gpu:\n  replicas: 4\n", "gpu", ["only used with gpu.sharing"]),
    ("gpu:\n  sharing: everything\n  replicas: 4\n", "gpu.sharing", ["time-slicing"]),
    ("gpu:\n  sharing: mps\n  replicas: 4\n  mig:\n    strategy: single\n    profile: 1g.10gb\n", "gpu",
     ["mps cannot run on MIG instances", "time-slicing"]),
    ("gpu:\n  mig:\n    strategy: single\n", "gpu.mig", ["set gpu.mig.profile"]),
    ("gpu:\n  mig:\n    profile: 1g.10gb\n", "gpu.mig", ["only applied with gpu.mig.strategy"]),
    ("gpu:\n  mig:\n    strategy: mixed\n    profile: '1g.10gb; reboot'\n", "gpu.mig.profile", ["not a MIG profile"]),
    ("gpu:\n  mig:\n    strategy: mixed\n    profile: 1G.10GB\n", "gpu.mig.profile", ["not a MIG profile"]),
    ("gpu:\n  sharing: time-slicing\n  replicas: 4\nsmoke_test:\n  gpus: 2\n", "cluster.yaml",
     ["smoke_test.gpus 2 cannot be granted", "smoke_test.gpus: 1"]),
    ("gpu:\n  sharing: time-slicing\n  replicas: 4\nsmoke_test:\n  nodes: 2\n", "cluster.yaml",
     ["shared GPUs cannot carry"]),
    ("smoke_test:\n  shared_pods: 3\n", "cluster.yaml", ["gpu.sharing is none"]),
])
def test_sharing_settings_that_contradict_each_other_are_refused(tmp_path: Path, settings: str, field: str,
                                                                words: list[str]) -> None:
    inventory, config = tmp_path / "hosts.ini", tmp_path / "cluster.yaml"
    inventory.write_text(INVENTORY)
    config.write_text(settings)
    expected_field = f"{config}: {field}" if field != "cluster.yaml" else f"{config}: "
    assert_refused(run_main("up", "-i", str(inventory), "-c", str(config)), expected_field, *words)


def test_shared_pods_follow_the_replicas_unless_set() -> None:
    assert parse_settings({}).shared_pods == 1
    assert parse_settings({"gpu": {"sharing": "time-slicing", "replicas": 4}}).shared_pods == 4
    assert parse_settings({"gpu": {"sharing": "mps", "replicas": 4}, "smoke_test": {"shared_pods": 2}}).shared_pods == 2


# --- preflight: MIG only on GPUs that have it, and the count the scheduler will be offered ----------------------

def verdict(device_ids: tuple[int, ...], **sections: Any) -> tuple[dict[str, Any], Any]:
    facts = NodeFacts(os_release={"ID": "debian", "VERSION_ID": "13", "NAME": "Debian GNU/Linux"}, hostname="n1",
                      product_uuid=None, macs={}, cpus=8, memory_mb=64000, listeners=(), swaps_active=(),
                      fstab_swaps=(), selinux=None, gpus=tuple(f"0000:0{i}:00.0" for i in range(len(device_ids))),
                      nvidia_driver=None, kube_configs=(), kernel="6.12.48", cgroup_version=2,
                      gpu_device_ids=device_ids)
    result = evaluate([NODE], {"n1": facts}, CORE, settings=parse_settings(sections))["n1"]
    return {c.check: c for c in result.checks}, result.advertised


def test_mig_on_a_gpu_without_it_is_refused_at_preflight_with_the_reason() -> None:
    checks, offered = verdict((L40S, L40S), gpu={"mig": {"strategy": "single", "profile": "1g.10gb"}})
    mig = checks["gpu_mig"]
    assert mig.status == "fail" and offered is None
    assert "0x26b9 does not support MIG" in mig.detail and "A100, A30, H100, H200, H20 or B200" in mig.detail
    assert "gpu.mig.strategy: none" in mig.fix and "time-slicing" in mig.fix


def test_a_profile_the_product_lacks_is_refused_naming_the_ones_it_has() -> None:
    checks, _ = verdict((H200,), gpu={"mig": {"strategy": "single", "profile": "1g.10gb"}})
    assert checks["gpu_mig"].status == "fail"
    assert checks["gpu_mig"].detail == "H200 141GB, H200 NVL GPUs have no MIG profile 1g.10gb"
    assert "1g.18gb" in checks["gpu_mig"].fix and "7g.141gb" in checks["gpu_mig"].fix


@pytest.mark.parametrize(("devices", "gpu", "resource", "count", "detail"), [
    ((A100_80GB,) * 8, {}, "nvidia.com/gpu", 8, None),
    ((A100_80GB,) * 8, {"mig": {"strategy": "single", "profile": "1g.10gb"}}, "nvidia.com/gpu", 56,
     "8 GPUs x 7 MIG 1g.10gb: 56 nvidia.com/gpu schedulable"),
    ((H200,) * 2, {"mig": {"strategy": "mixed", "profile": "3g.71gb"}}, "nvidia.com/mig-3g.71gb", 4,
     "2 GPUs x 2 MIG 3g.71gb: 4 nvidia.com/mig-3g.71gb schedulable"),
    ((L40S,) * 2, {"sharing": "time-slicing", "replicas": 4}, "nvidia.com/gpu", 8,
     "2 GPUs x 4 time-slicing replicas: 8 nvidia.com/gpu schedulable"),
    ((A100_80GB,), {"sharing": "time-slicing", "replicas": 3, "mig": {"strategy": "single", "profile": "3g.40gb"}},
     "nvidia.com/gpu", 6, "1 GPU x 2 MIG 3g.40gb x 3 time-slicing replicas: 6 nvidia.com/gpu schedulable"),
])
def test_preflight_counts_what_the_scheduler_will_advertise(devices: tuple[int, ...], gpu: dict[str, Any],
                                                           resource: str, count: int, detail: str | None) -> None:
    checks, offered = verdict(devices, gpu=gpu)
    assert (offered.resource, offered.count) == (resource, count)
    shown = checks.get("gpu_mig") or checks.get("gpu_sharing")
    assert (shown.detail if shown else None) == detail
    assert all(c.status != "fail" for c in checks.values() if c.check.startswith("gpu"))


def test_mig_settings_mean_nothing_on_a_node_without_gpus() -> None:
    checks, offered = verdict((), gpu={"mig": {"strategy": "single", "profile": "1g.10gb"}})
    assert "gpu_mig" not in checks and offered is None


# --- the device plugin's own configuration ----------------------------------------------------------------------

def plugin(settings: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    config_map, *daemon_sets = yaml.safe_load_all(device_plugin_manifest(parse_settings(settings)))
    assert config_map["kind"] == "ConfigMap" and all(d["kind"] == "DaemonSet" for d in daemon_sets)
    return yaml.safe_load(config_map["data"]["config.yaml"]), daemon_sets


def test_without_sharing_the_plugin_reads_a_config_that_shares_nothing() -> None:
    config, (daemon_set,) = plugin({})
    assert config == {"version": "v1", "flags": {"migStrategy": "none", "failOnInitError": True}}
    container = daemon_set["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "CONFIG_FILE", "value": "/config/config.yaml"} in container["env"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_time_slicing_replicates_each_gpu_and_refuses_requests_for_two_slices() -> None:
    config, (daemon_set,) = plugin({"gpu": {"sharing": "time-slicing", "replicas": 4}})
    assert config["sharing"] == {"timeSlicing": {"failRequestsGreaterThanOne": True,
                                                 "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}
    assert "shareProcessNamespace" not in daemon_set["spec"]["template"]["spec"]


def test_mps_adds_the_control_daemon_on_nodes_labelled_for_it() -> None:
    settings = {"gpu": {"sharing": "mps", "replicas": 2}}
    config, (daemon_set, control) = plugin(settings)
    assert config["flags"]["mpsRoot"] == "/run/nvidia/mps"
    assert config["sharing"]["mps"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 2}]
    assert control["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/mps.capable": "true"}
    mounts = {m["name"] for m in daemon_set["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert {"mps-root", "mps-shm", "config"} <= mounts
    assert "nvidia.com/mps.capable=true" in gpu_node_labels(parse_settings(settings))
    # Turned off again, the label goes, so a control daemon left from before runs nowhere.
    assert "nvidia.com/mps.capable-" in gpu_node_labels(parse_settings({}))


def test_mig_sets_the_strategy_and_a_new_profile_restarts_the_plugin() -> None:
    config, (daemon_set,) = plugin({"gpu": {"mig": {"strategy": "mixed", "profile": "1g.10gb"},
                                            "sharing": "time-slicing", "replicas": 2}})
    assert config["flags"]["migStrategy"] == "mixed"
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]
    assert daemon_set["spec"]["template"]["spec"]["containers"][0]["securityContext"] == \
        {"capabilities": {"add": ["SYS_ADMIN"]}}

    def config_hash(profile: str) -> str:
        _, (ds,) = plugin({"gpu": {"mig": {"strategy": "single", "profile": profile}}})
        return str(ds["spec"]["template"]["metadata"]["annotations"]["cluster-bootstrap.io/config-hash"])
    assert config_hash("1g.10gb") != config_hash("3g.40gb") and config_hash("1g.10gb") == config_hash("1g.10gb")


# --- verify: allocatable is what the scheduler was promised -----------------------------------------------------

def verify_gpus(tmp_path: Path, allocatable: int, resource: str, offered: dict[str, int]) -> list[str]:
    with FakeApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        server.add("GET", "/version/", VERSION)
        gpu_node = node("w1")
        gpu_node["status"]["allocatable"][resource] = str(allocatable)
        server.add("GET", "/api/v1/nodes", object_list("NodeList", [node("cp1"), gpu_node]))
        server.add("GET", "/api/v1/namespaces/kube-system/pods", object_list("PodList", healthy_pods()))
        report = verify_cluster(load_api_client(kubeconfig),
                                Expectations(nodes=("cp1", "w1"), gpus={"w1": 2}, gpu_offered={"w1": offered}),
                                checks=("gpus",), timeout_s=0.5, poll_s=0.05, sleep=time.sleep)
    return [p.describe() for p in report.problems]


def test_verify_holds_allocatable_to_the_shared_or_mig_count(tmp_path: Path) -> None:
    assert verify_gpus(tmp_path, 8, "nvidia.com/gpu", {"nvidia.com/gpu": 8}) == []
    assert verify_gpus(tmp_path, 14, "nvidia.com/mig-1g.10gb", {"nvidia.com/mig-1g.10gb": 14}) == []
    (problem,) = verify_gpus(tmp_path, 2, "nvidia.com/gpu", {"nvidia.com/gpu": 8})
    assert problem.startswith("w1: advertises 2 nvidia.com/gpu, 8 expected from its 2 GPUs and the gpu settings")
    (problem,) = verify_gpus(tmp_path, 2, "nvidia.com/gpu", {"nvidia.com/mig-1g.10gb": 14})
    assert "no nvidia.com/mig-1g.10gb allocatable" in problem


# --- the MIG layout on the node: nvidia-smi mig, idempotent ------------------------------------------------------

MODULE = PLAYBOOKS_DIR / "roles" / "nvidia_mig" / "library" / "cb_nvidia_mig.py"


def run_module(tmp_path: Path, profile: str, instances: dict[str, int]) -> dict[str, Any]:
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"profile": profile, "instances": instances}}))
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    done = subprocess.run([sys.executable, str(MODULE), str(args)], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    return dict(json.loads(done.stdout))


def calls(state: Path) -> list[list[str]]:
    return list(json.loads(state.read_text())["calls"])


def test_every_gpu_is_cut_into_the_profile_once_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    state = fake_nvidia_smi.install(tmp_path, [{"device": "0x20B210DE", "mode": "Disabled"},
                                               {"device": "0x20B210DE", "mode": "Enabled",
                                                "instances": ["3g.40gb", "3g.40gb"]}])
    first = run_module(tmp_path, "1g.10gb", {"20b2": 7})
    assert first["changed"] is True, first
    assert [g["instances"] for g in first["cb_nvidia_mig"]["gpus"]] == [["1g.10gb"] * 7] * 2
    made = calls(state)
    assert ["-i", "0", "-mig", "1"] in made and ["-i", "1", "-mig", "1"] not in made
    # GPU 1 held another layout: destroyed first, then created.
    assert made.index(["mig", "-i", "1", "-dgi"]) < made.index(["mig", "-i", "1", "-cgi", ",".join(["1g.10gb"] * 7), "-C"])
    second = run_module(tmp_path, "1g.10gb", {"20b2": 7})
    assert second["changed"] is False
    assert not [c for c in calls(state)[len(made):] if c[:1] == ["mig"] or "-mig" in c]


def test_a_gpu_whose_mig_mode_stays_pending_fails_with_the_fix(tmp_path: Path) -> None:
    fake_nvidia_smi.install(tmp_path, [{"device": "0x233510DE", "mode": "Disabled", "needs_reset": True}])
    result = run_module(tmp_path, "1g.18gb", {"2335": 7})
    assert result["failed"] is True
    assert "GPU 0: MIG mode is Enabled but not yet active" in result["msg"]
    assert "reboot the node, then `bootstrap up --from gpu`" in result["msg"]


def test_instances_in_use_are_not_destroyed_quietly(tmp_path: Path) -> None:
    fake_nvidia_smi.install(tmp_path, [{"device": "0x20B210DE", "mode": "Enabled", "busy": True,
                                        "instances": ["7g.80gb"]}])
    result = run_module(tmp_path, "1g.10gb", {"20b2": 7})
    assert result["failed"] is True and "In use by another client" in result["msg"]


def test_the_gpu_phase_hands_the_role_each_products_count(tmp_path: Path) -> None:
    from provision.render.playbook_vars import mig_layout

    settings = parse_settings({"gpu": {"mig": {"strategy": "single", "profile": "1g.10gb"}}})

    class Cluster:
        @staticmethod
        def node(name: str) -> Node:
            return replace(NODE, name=name)

    layout = mig_layout(settings, Cluster(), ["n1"])  # type: ignore[arg-type]
    assert layout["hosts"] == ["n1"] and layout["profile"] == "1g.10gb"
    # A100 80GB and H100 80GB hold seven; A100 40GB four; H200 has no 1g.10gb at all.
    assert layout["instances"]["n1"]["20b2"] == 7 and layout["instances"]["n1"]["2330"] == 7
    assert layout["instances"]["n1"]["20b0"] == 4 and "2335" not in layout["instances"]["n1"]


# --- through the phases `up` runs: preflight counts, gpu applies and checks ----------------------------------

def test_up_counts_the_shared_gpus_at_preflight_and_the_gpu_phase_holds_allocatable_to_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from provision import phases as phases_module
    from provision.inputs.gpu_sharing import Advertised
    from provision.inputs.inventory import load_inventory
    from provision.inputs.state import ClusterState
    from provision.kube.kubeconfig import admin_kubeconfig_path
    from provision.nodes.preflight.run import PreflightNode, PreflightReport
    from provision.nodes.runner import PlaybookResult
    from provision.phases import PhaseContext, run_phases, select_phases

    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.20.0.10\n[workers]\nw1 ansible_host=10.20.0.11\n")
    cluster = load_inventory(hosts)
    settings = parse_settings({"gpu": {"sharing": "time-slicing", "replicas": 4}})
    playbooks: list[dict[str, Any]] = []

    def fake_preflight(cluster: Any, settings: Any, *, nodes: list[str] | None = None, **_: Any) -> PreflightReport:
        return PreflightReport((PreflightNode("cp1", "control_plane", "", (), 0),
                                PreflightNode("w1", "worker", "", (), 2, gpu_generations=("Hopper",),
                                           advertised=Advertised("nvidia.com/gpu", 8, "2 GPUs x 4 replicas"))), 0.1)

    def fake_playbook(playbook: str, *args: Any, extra_vars: dict[str, Any] | None = None, **_: Any) -> PlaybookResult:
        playbooks.append({"playbook": playbook, **(extra_vars or {})})
        return PlaybookResult("gpu", playbook, 0, "successful", tmp_path, {}, [], 1.0)

    monkeypatch.setattr(phases_module.preflight, "run_preflight", fake_preflight)
    monkeypatch.setattr(phases_module.engine, "run_playbook", fake_playbook)
    with FakeApiServer() as server:
        admin_kubeconfig_path(cluster).parent.mkdir(parents=True)
        server.write_kubeconfig(admin_kubeconfig_path(cluster))
        server.add("GET", "/version/", VERSION)
        server.add("GET", "/api/v1/nodes", object_list("NodeList", [node("cp1"), node("w1", gpus=8)]))
        server.add("GET", "/api/v1/namespaces/kube-system/pods", object_list("PodList", healthy_pods()))
        context = PhaseContext(cluster=cluster, settings=settings, state=ClusterState.load(cluster))
        result = run_phases(select_phases(("preflight", "gpu")), context)
    assert [(o.name, o.status) for o in result.outcomes] == [("preflight", "ok"), ("gpu", "ok")], result.error
    preflight, gpu = result.outcomes
    assert preflight.detail == "2 nodes ready to prepare, 2 GPUs found (8 nvidia.com/gpu schedulable)"
    assert gpu.detail == "device plugin v0.20.1: 8 nvidia.com/gpu (time-slicing x4) allocatable on 1 nodes"
    (applied,) = playbooks
    assert applied["cb_gpu_node_labels"]["w1"][:2] == ["nvidia.com/gpu.present=true", "nvidia.com/mps.capable-"]
    assert applied["cb_mig"] == {"hosts": [], "profile": "", "instances": {}}
    assert ClusterState.load(cluster).gpu_offered == {"w1": {"nvidia.com/gpu": 8}}


# --- the plugin's configuration against its config API ------------------------------------------------------------
# The fields of NVIDIA/k8s-device-plugin api/config/v1 (read at v0.20.0, tagged 2026-08-19; v0.20.1 is the pinned
# release): each struct's JSON names and kinds, and what its UnmarshalJSON refuses (replicas.go: resources
# required and non-empty, a name on each, replicas >= 2, devices "all", a count or a list; config.go: version v1;
# consts.go: the MIG strategies; resources.go: names under nvidia.com/, at most 63 characters). The plugin reads
# the file with sigs.k8s.io/yaml, which drops unknown fields silently: here they are refused, so a misspelt one is
# caught before the plugin runs without it.
PLUGIN_CONFIG_API: dict[str, dict[str, str]] = {
    "Config": {"version": "str", "flags": "Flags", "resources": "object", "sharing": "Sharing", "imex": "object"},
    "Flags": {"migStrategy": "str", "failOnInitError": "bool", "mpsRoot": "str", "nvidiaDriverRoot": "str",
              "nvidiaDevRoot": "str", "gdrcopyEnabled": "bool", "gdsEnabled": "bool", "mofedEnabled": "bool",
              "useNodeFeatureAPI": "bool", "deviceDiscoveryStrategy": "str", "plugin": "object", "gfd": "object"},
    "Sharing": {"timeSlicing": "ReplicatedResources", "mps": "ReplicatedResources"},
    "ReplicatedResources": {"renameByDefault": "bool", "failRequestsGreaterThanOne": "bool",
                            "resources": "list[ReplicatedResource]"},
    "ReplicatedResource": {"name": "str", "rename": "str", "devices": "object", "replicas": "int"},
}
MIG_STRATEGIES = ("none", "single", "mixed")


def plugin_config_problems(value: Any, kind: str = "Config", where: str = "") -> list[str]:
    if kind.startswith("list["):
        if not isinstance(value, list):
            return [f"{where}: not a list"]
        return [p for i, item in enumerate(value) for p in plugin_config_problems(item, kind[5:-1], f"{where}[{i}]")]
    simple = {"str": str, "bool": bool, "int": int, "object": (dict, list, str, int)}
    if kind in simple:
        ok = isinstance(value, simple[kind]) and not (kind == "int" and isinstance(value, bool))
        return [] if ok else [f"{where}: not a {kind}"]
    if not isinstance(value, dict):
        return [f"{where}: not a {kind}"]
    fields = PLUGIN_CONFIG_API[kind]
    found = [f"{where}.{key}: not a field of {kind}" for key in value if key not in fields]
    found += [p for key, item in value.items() if key in fields for p in plugin_config_problems(item, fields[key],
                                                                                                 f"{where}.{key}")]
    if kind == "Config" and value.get("version") != "v1":
        found.append(f"{where}.version: unknown version {value.get('version')!r}")
    if kind == "Flags" and value.get("migStrategy") not in MIG_STRATEGIES:
        found.append(f"{where}.migStrategy: not one of {MIG_STRATEGIES}")
    if kind == "ReplicatedResources" and not value.get("resources"):
        found.append(f"{where}: no resources specified")
    if kind == "ReplicatedResource":
        name = str(value.get("name", ""))
        full = name if name.startswith("nvidia.com/") else f"nvidia.com/{name}"
        if "name" not in value or len(full) > 63 or not re.fullmatch(r"nvidia\.com/[a-z0-9]([-a-z0-9.]*[a-z0-9])?", full):
            found.append(f"{where}.name: not a resource name under nvidia.com/ ({name!r})")
        if "replicas" not in value or not isinstance(value["replicas"], int) or value["replicas"] < 2:
            found.append(f"{where}.replicas: number of replicas must be >= 2")
    return found


@pytest.mark.parametrize("gpu", [{}, {"sharing": "time-slicing", "replicas": 4}, {"sharing": "mps", "replicas": 2},
                                 {"mig": {"strategy": "single", "profile": "1g.10gb"}},
                                 {"mig": {"strategy": "mixed", "profile": "3g.40gb"}, "sharing": "time-slicing",
                                  "replicas": 64}])
def test_the_plugin_config_is_one_its_config_api_reads(gpu: dict[str, Any]) -> None:
    config = device_plugin_config(parse_settings({"gpu": gpu}))
    assert plugin_config_problems(config) == []
    # What the plugin is told is what the settings say.
    assert config["flags"]["migStrategy"] == parse_settings({"gpu": gpu}).gpu.mig.strategy


def test_the_config_api_table_refuses_what_the_plugin_would_not_read() -> None:
    config = device_plugin_config(parse_settings({"gpu": {"sharing": "time-slicing", "replicas": 4}}))
    config["sharing"]["timeSlicing"]["resources"][0]["replicas"] = 1
    config["flags"]["migStrategys"] = "none"
    assert plugin_config_problems(config) == [".flags.migStrategys: not a field of Flags",
                                              ".sharing.timeSlicing.resources[0].replicas: number of replicas must be >= 2"]
