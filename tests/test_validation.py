"""Bad input is refused before any node is touched: one line naming the file, host or field, and the fix."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from provision.errors import InputError
from provision.inputs.validation import load_cluster
from tests.support.keys import write_private_key

GOOD_INVENTORY = """\
[control_plane]
cp1 ansible_host=10.0.0.1
[workers]
w1 ansible_host=10.0.0.2
w2 ansible_host=10.0.0.3
[all:vars]
ansible_user=root
"""

# (case id, inventory text or None for GOOD_INVENTORY, settings text or None, words the error must contain)
BAD_INPUTS = [
    ("inventory-missing", "MISSING", None, ["inventory file not found"]),
    ("inventory-unparseable-ini", "[control_plane\ncp1 ansible_host=10.0.0.1\n", None, ["not a valid Ansible inventory"]),
    ("inventory-unparseable-yaml", "all: [unclosed\n", None, ["not valid YAML at line 2"]),
    ("no-control-plane", "[workers]\nw1 ansible_host=10.0.0.2\n", None, ["no control plane", "[control_plane]"]),
    ("empty-control-plane", "[control_plane]\n[workers]\nw1 ansible_host=10.0.0.2\n", None, ["no control plane"]),
    ("four-control-planes", "[control_plane]\n" + "".join(f"cp{i} ansible_host=10.0.0.{i}\n" for i in range(1, 5)),
     None, ["4 control-plane hosts", "'cp1', 'cp2', 'cp3', 'cp4'", "etcd wants an odd number",
            "keep 3 and move the others under [workers]"]),
    ("four-control-planes-via-aliases", "[masters]\ncp1 ansible_host=10.0.0.1\ncp2 ansible_host=10.0.0.2\n"
     "[kube_master]\ncp3 ansible_host=10.0.0.3\n[control_plane]\ncp4 ansible_host=10.0.0.4\n", None,
     ["4 control-plane hosts"]),
    ("nine-control-planes", "[control_plane]\n" + "".join(f"cp{i} ansible_host=10.0.0.{i}\n" for i in range(1, 10)),
     None, ["9 control-plane hosts", "at most 7", "keep 7"]),
    ("several-control-planes-without-endpoint", "[control_plane]\ncp1 ansible_host=10.0.0.1\ncp2 ansible_host=10.0.0.2\n"
     "cp3 ansible_host=10.0.0.3\n", "control_plane:\n  endpoint: none\n",
     ["control_plane.endpoint is none", "has 3 control planes", "endpoint: vip", "endpoint: proxy"]),
    ("host-in-both-groups", "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\ncp1\n", None,
     ["'cp1' is in both", "remove it from one group"]),
    ("host-in-no-group", GOOD_INVENTORY + "stray ansible_host=10.0.0.9\n[extra]\nstray\n", None,
     ["'stray' is in neither"]),
    ("upper-case-name", "[control_plane]\nNode1 ansible_host=10.0.0.1\n[workers]\nnode1 ansible_host=10.0.0.2\n",
     None, ["'Node1' is not a valid Kubernetes node name", "upper-case"]),
    ("duplicate-address", "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.1\n", None,
     ["share the address 10.0.0.1:22", "own ansible_host"]),
    ("invalid-node-name", "[control_plane]\ncp_1 ansible_host=10.0.0.1\n", None, ["'cp_1' is not a valid Kubernetes node name"]),
    ("node-name-too-long", f"[control_plane]\n{'a' * 64} ansible_host=10.0.0.1\n", None, ["not a valid Kubernetes node name"]),
    ("missing-key-file", "[control_plane]\ncp1 ansible_host=10.0.0.1 ansible_ssh_private_key_file=/nonexistent/id_x\n",
     None, ["host 'cp1'", "/nonexistent/id_x does not exist", "ansible_ssh_private_key_file"]),
    ("port-not-a-number", "[control_plane]\ncp1 ansible_host=10.0.0.1 ansible_port=ssh\n", None,
     ["host 'cp1'", "ansible_port='ssh' is not a number"]),
    ("port-out-of-range", "[control_plane]\ncp1 ansible_host=10.0.0.1 ansible_port=70000\n", None,
     ["ansible_port=70000 is out of range"]),
    ("gpu-invalid", "[control_plane]\ncp1 ansible_host=10.0.0.1 gpu=maybe\n", None,
     ["host 'cp1'", "gpu='maybe' is not valid", "gpu=auto"]),
    ("settings-missing", None, "MISSING", ["settings file not found"]),
    ("settings-not-yaml", None, "kubernetes: [1, 2\n", ["not valid YAML at line"]),
    ("settings-not-mapping", None, "- kubernetes\n", ["top level must be a mapping"]),
    ("unknown-top-level-key", None, "kubernets:\n  version: '1.31'\n", ["unknown key 'kubernets'", "did you mean 'kubernetes'"]),
    ("unknown-nested-key", None, "kubernetes:\n  podcidr: 10.244.0.0/16\n",
     ["unknown key 'kubernetes.podcidr'", "did you mean 'kubernetes.pod_cidr'"]),
    ("unknown-key-no-close-match", None, "mirrors:\n  zzz: 1\n", ["unknown key 'mirrors.zzz'", "known keys here"]),
    ("invalid-cidr", None, "kubernetes:\n  pod_cidr: 10.244.0.0/33\n", ["kubernetes.pod_cidr", "not a valid CIDR"]),
    ("cidr-host-bits-set", None, "kubernetes:\n  service_cidr: 10.96.0.1/12\n", ["kubernetes.service_cidr", "not a valid CIDR"]),
    ("cidr-ipv6", None, "kubernetes:\n  pod_cidr: fd00::/64\n", ["kubernetes.pod_cidr", "IPv6"]),
    ("pod-overlaps-service", None, "kubernetes:\n  pod_cidr: 10.96.0.0/16\n", ["overlaps service_cidr", "disjoint"]),
    ("version-format", None, "kubernetes:\n  version: latest\n", ["kubernetes.version", "write it as 1.36 or 1.36.4"]),
    ("version-unquoted-number", None, "kubernetes:\n  version: 1.30\n",
     ["kubernetes.version", "1.30 reads as 1.3", "quote it, version: '1.30'"]),
    # Issue 34.4: the fix quotes what was written (it suggested '1.31', past its end of life).
    ("version-unquoted-current", None, "kubernetes:\n  version: 1.37\n", ["kubernetes.version", "version: '1.37'"]),
    ("driver-branch-unquoted", None, "gpu:\n  driver_branch: 580\n", ["gpu.driver_branch", "driver_branch: '580'"]),
    ("version-too-old", None, "kubernetes:\n  version: '1.20'\n", ["kubernetes.version", "far past its end of life"]),
    ("unknown-profile", None, "mirrors:\n  profile: us\n", ["mirrors.profile", "'default' or 'cn'"]),
    ("calico-version-format", None, "calico:\n  version: 3.28\n", ["calico.version", "v3.33.1"]),
    ("accuracy-out-of-range", None, "smoke_test:\n  min_accuracy: 1.5\n", ["smoke_test.min_accuracy"]),
    ("gpus-not-a-number", None, "smoke_test:\n  gpus: two\n", ["smoke_test.gpus"]),
    ("offline-relative-path", None, "offline:\n  source: repo/dir\n", ["offline.source", "absolute path"]),
    ("ssh-timeout-zero", None, "ssh:\n  connect_timeout_s: 0\n", ["ssh.connect_timeout_s"]),
    ("runtime-mode-unknown", None, "gpu:\n  runtime: always\n", ["gpu.runtime"]),
    ("addon-unknown", None, "addons:\n  enabled: [kueue]\n",
     ["addons.enabled", "'volcano', 'training_operator', 'trainer', 'cert_manager'"]),
    ("addon-not-a-list", None, "addons:\n  enabled: volcano\n", ["addons.enabled", "write it as a list"]),
    ("addon-twice", None, "addons:\n  enabled: [volcano, volcano]\n", ["addons.enabled", "names an add-on twice"]),
    ("addon-version-format", None, "addons:\n  trainer_version: '2.3'\n", ["addons.trainer_version", "write it as v2.3.0"]),
    ("addon-queue-name", None, "addons:\n  volcano_queue: Smoke_Queue\n", ["addons.volcano_queue"]),
    ("smoke-workload-unknown", None, "smoke_test:\n  workload: mpijob\n", ["smoke_test.workload"]),
    ("smoke-shm-size", None, "smoke_test:\n  shm_size: 2GB\n", ["smoke_test.shm_size", "2Gi"]),
    ("smoke-env-name", None, "smoke_test:\n  env: {NCCL-DEBUG: INFO}\n", ["smoke_test.env", "'NCCL-DEBUG'"]),
    ("smoke-env-nested", None, "smoke_test:\n  env: {NCCL_DEBUG: [INFO]}\n", ["smoke_test.env", "single value"]),
    ("smoke-extra-resource-name", None, "smoke_test:\n  extra_resources: {hca: 1}\n",
     ["smoke_test.extra_resources", "vendor.example/device"]),
    ("smoke-extra-resource-amount", None, "smoke_test:\n  extra_resources: {rdma/hca: lots}\n",
     ["smoke_test.extra_resources", "'lots' is not a Kubernetes quantity"]),
    ("smoke-gpu-resource", None, "smoke_test:\n  gpu_resource: gpu\n", ["smoke_test.gpu_resource", "nvidia.com/gpu"]),
    ("smoke-md5", None, "smoke_test:\n  cifar10_md5: abc\n", ["smoke_test.cifar10_md5", "32 hex digits"]),
    ("smoke-cache-path-relative", None, "smoke_test:\n  cache_path: cache\n", ["smoke_test.cache_path", "absolute"]),
    ("smoke-cache-path-system", None, "smoke_test:\n  cache_path: /etc\n", ["smoke_test.cache_path", "system directory"]),
    ("smoke-cache-mode", None, "smoke_test:\n  cache: nfs\n", ["smoke_test.cache"]),
    ("cifar10-archive-url", None, "mirrors:\n  cifar10_archive: cifar.tgz\n", ["mirrors.cifar10_archive", "URL"]),
    ("pod-cidr-contains-node", None, "kubernetes:\n  pod_cidr: 10.0.0.0/16\n",
     ["pod_cidr 10.0.0.0/16 contains node 'cp1'", "outside your node network"]),
    ("service-cidr-contains-node", None, "kubernetes:\n  service_cidr: 10.0.0.0/24\n",
     ["service_cidr 10.0.0.0/24 contains node 'cp1'"]),
]


def _write_inputs(tmp_path: Path, inventory: str | None, settings: str | None) -> tuple[Path, Path | None]:
    inventory_path = tmp_path / ("hosts.yml" if inventory and inventory.startswith("all:") else "hosts.ini")
    if inventory != "MISSING":
        inventory_path.write_text(GOOD_INVENTORY if inventory is None else inventory)
    settings_path = None
    if settings is not None:
        settings_path = tmp_path / "cluster.yaml"
        if settings != "MISSING":
            settings_path.write_text(settings)
    return inventory_path, settings_path


def test_there_are_at_least_thirty_distinct_bad_inputs() -> None:
    assert len({case[0] for case in BAD_INPUTS}) == len(BAD_INPUTS) >= 30


@pytest.mark.parametrize("case, inventory, settings, expected", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_refused_with_one_line_naming_the_problem(
        tmp_path: Path, case: str, inventory: str | None, settings: str | None, expected: list[str]) -> None:
    inventory_path, settings_path = _write_inputs(tmp_path, inventory, settings)
    with pytest.raises(InputError) as raised:
        load_cluster(inventory_path, settings_path)
    message = str(raised.value)
    assert "\n" not in message
    for words in expected:
        assert words in message
    # The message names the file it is about (the inventory, the settings file, or the settings field).
    named = [str(inventory_path), str(settings_path)] if settings_path else [str(inventory_path)]
    assert any(name in message for name in named) or "kubernetes." in message


def test_good_inventory_and_default_settings_are_accepted(tmp_path: Path) -> None:
    inventory_path, _ = _write_inputs(tmp_path, None, None)
    cluster, settings = load_cluster(inventory_path, None)
    assert [n.name for n in cluster.nodes] == ["cp1", "w1", "w2"]
    assert cluster.control_plane.name == "cp1"
    assert [n.name for n in cluster.workers] == ["w1", "w2"]
    assert settings.kubernetes.pod_cidr == "10.244.0.0/16"


def test_seed_style_masters_group_and_single_node_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text("[masters]\nmaster ansible_host=192.168.10.5 gpu=yes\n")
    cluster, _ = load_cluster(path, None)
    assert cluster.control_plane.name == "master"
    assert cluster.control_plane.gpu == "true"
    assert cluster.workers == ()


def test_group_vars_and_relative_key_files_resolve_like_ansible(tmp_path: Path) -> None:
    write_private_key(tmp_path / "keys" / "id_lab")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "workers.yml").write_text("ansible_user: ubuntu\ngpu: true\n")
    path = tmp_path / "hosts.yml"
    path.write_text(
        "all:\n"
        "  vars:\n    ansible_ssh_private_key_file: keys/id_lab\n"
        "  children:\n"
        "    control_plane:\n      hosts:\n        cp1: {ansible_host: 10.0.0.1, gpu: false}\n"
        "    workers:\n      hosts:\n        w1: {ansible_host: 10.0.0.2, ansible_port: 2200}\n")
    cluster, _ = load_cluster(path, None)
    worker = cluster.node("w1")
    assert (worker.user, worker.port, worker.gpu) == ("ubuntu", 2200, "true")
    assert worker.key_file == (tmp_path / "keys" / "id_lab").resolve()
    assert cluster.control_plane.gpu == "false"


def test_cli_prints_one_line_and_exits_2_without_traceback(tmp_path: Path) -> None:
    inventory_path, settings_path = _write_inputs(tmp_path, None, "kubernetes:\n  pod_cidr: 10.96.0.0/16\n")
    result = subprocess.run(
        [sys.executable, "-c", "from provision.cli.app import main; main()", "config", "validate",
         "--inventory", str(inventory_path), "--config", str(settings_path)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "overlaps service_cidr" in lines[0]
    assert result.stdout == ""


def test_cli_error_line_shows_square_brackets_as_written(tmp_path: Path) -> None:
    # Group names in brackets are part of the fix; the renderer must not read them as markup (and drop them).
    inventory_path = tmp_path / "hosts.ini"
    inventory_path.write_text("[workers]\nw1 ansible_host=10.0.0.2\n")
    result = subprocess.run(
        [sys.executable, "-c", "from provision.cli.app import main; main()", "config", "validate",
         "--inventory", str(inventory_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "put one host (or three) under [control_plane]" in " ".join(result.stderr.split())
