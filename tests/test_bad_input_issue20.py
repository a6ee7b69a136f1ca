"""The bad inputs that got through before (issue #20), each now refused in one line naming the file, host, field
or option, exit code 2, before any connection and with nothing created: `up` is the command that would connect.

The 10.0.0.x addresses are never reached: every case is refused before the first connection.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.refusal import assert_refused, run_main

INVENTORY = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2\n"
LOOKUP = "{{ lookup('pipe', 'touch /tmp/cb-issue20') }}"

# (id, cluster.yaml, what the line names)
SETTINGS = [
    # Patterns that matched before a final newline, or a digit that is not ASCII.
    ("url-trailing-newline", 'mirrors:\n  kubernetes_repo: "https://mirror.example.com/k8s\\n"\n',
     ["mirrors.kubernetes_repo", "'\\n'"]),
    ("registry-trailing-newline", 'mirrors:\n  image_repository: "registry.example.com/k8s\\n"\n',
     ["mirrors.image_repository", "not a registry"]),
    ("queue-trailing-newline", 'addons:\n  volcano_queue: "smoke\\n"\n', ["addons.volcano_queue"]),
    ("version-trailing-newline", 'kubernetes:\n  version: "1.36\\n"\n', ["kubernetes.version"]),
    ("version-full-width-digit", "kubernetes:\n  version: '1.３6'\n", ["kubernetes.version"]),
    ("tag-arabic-indic-digit", "smoke_test:\n  image: 'docker.io/pytorch/pytorch:2.٥'\n", ["smoke_test.image"]),
    ("resource-trailing-newline", 'smoke_test:\n  extra_resources: {"rdma/hca\\n": 1}\n', ["smoke_test.extra_resources"]),
    ("gpu-resource-trailing-newline", 'smoke_test:\n  gpu_resource: "nvidia.com/gpu\\n"\n', ["smoke_test.gpu_resource"]),
    # Template expressions where Ansible would have evaluated them.
    ("github-raw-lookup", f'mirrors:\n  github_raw: "https://raw.example.com/{LOOKUP}"\n', ["mirrors.github_raw", "'{'"]),
    ("cifar10-archive-lookup", f'mirrors:\n  cifar10_archive: "{LOOKUP}"\n', ["mirrors.cifar10_archive"]),
    ("addon-manifests-lookup", f'mirrors:\n  addon_manifests: "https://m.example.com/{LOOKUP}"\n',
     ["mirrors.addon_manifests"]),
    ("cache-path-lookup", f'smoke_test:\n  cache_path: "/srv/{LOOKUP}"\n', ["smoke_test.cache_path"]),
    ("cache-path-yaml", 'smoke_test:\n  cache_path: "/srv/a: b"\n', ["smoke_test.cache_path"]),
    # Paths reset would delete.
    ("cache-path-dot-etc", "smoke_test:\n  cache_path: /./etc\n", ["smoke_test.cache_path"]),
    ("cache-path-double-slash", "smoke_test:\n  cache_path: //usr\n", ["smoke_test.cache_path"]),
    ("cache-path-var-lib", "smoke_test:\n  cache_path: /var/lib\n", ["smoke_test.cache_path", "system directory"]),
    ("cache-path-kubelet", "smoke_test:\n  cache_path: /var/lib/kubelet/cache\n", ["smoke_test.cache_path"]),
    # What failed only at the end of `up`.
    ("smoke-nodes-more-than-inventory", "smoke_test:\n  nodes: 3\n", ["smoke_test.nodes is 3", "2 node(s)"]),
    ("extended-resource-fraction", "smoke_test:\n  extra_resources: {rdma/hca: 0.5}\n", ["smoke_test.extra_resources"]),
    ("extended-resource-milli", "smoke_test:\n  extra_resources: {rdma/hca: 500m}\n", ["smoke_test.extra_resources"]),
    ("extended-resource-reserved-domain", "smoke_test:\n  extra_resources: {kubernetes.io/hca: 1}\n",
     ["kubernetes.io"]),
    ("gpu-resource-twice", "smoke_test:\n  gpu_resource: example.com/gpu\n  extra_resources: {example.com/gpu: 1}\n",
     ["requested by the smoke test itself"]),
    ("offline-source-root", "offline:\n  source: /\n", ["offline.source"]),
    ("registry-port-too-large", "container_runtime:\n  registry_mirrors:\n    'registry.example.com:70000': "
     "[https://m.example.com]\n", ["container_runtime.registry_mirrors", "1 to 65535"]),
    ("mirror-port-too-large", "mirrors:\n  pip_index: https://pypi.example.com:99999/simple\n", ["mirrors.pip_index"]),
    ("accuracy-nan", "smoke_test:\n  min_accuracy: .nan\n", ["smoke_test.min_accuracy"]),
    ("link-speed-infinite", "smoke_test:\n  min_link_gbps: .inf\n", ["smoke_test.min_link_gbps"]),
    ("throughput-floor-nan", "smoke_test:\n  throughput_floors: {H100: .nan}\n", ["smoke_test.throughput_floors"]),
    ("both-cgroup-ways-out", "kubelet:\n  allow_cgroup_v1: true\n  switch_to_cgroup_v2: true\n", ["kubelet", "keep one"]),
]


@pytest.mark.parametrize(("case", "settings", "expected"), SETTINGS, ids=[c[0] for c in SETTINGS])
def test_a_setting_that_got_through_before_is_refused(tmp_path: Path, case: str, settings: str,
                                                      expected: list[str]) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(INVENTORY)
    config = tmp_path / "cluster.yaml"
    config.write_text(settings)
    assert_refused(run_main("up", "-i", str(inventory), "-c", str(config)), str(config), *expected)
    assert not Path("/tmp/cb-issue20").exists()


# (id, inventory, cluster.yaml or None, what the line names)
CLUSTERS = [
    ("gpu-mode-without-gpus", INVENTORY + "[all:vars]\ngpu=false\n", "smoke_test:\n  mode: gpu\n",
     ["smoke_test.mode is gpu", "gpu=false"]),
    ("node-ip-unspecified", INVENTORY.replace("10.0.0.2", "10.0.0.2 node_ip=0.0.0.0"), None, ["node_ip", "0.0.0.0"]),
    ("node-ip-multicast", INVENTORY.replace("10.0.0.2", "10.0.0.2 node_ip=239.1.1.1"), None, ["node_ip", "multicast"]),
    ("node-ip-loopback-multi-node", INVENTORY.replace("10.0.0.2", "10.0.0.2 node_ip=127.0.0.5"), None,
     ["node_ip 127.0.0.5", "loopback"]),
    ("node-ip-shared", INVENTORY.replace("10.0.0.1", "10.0.0.1 node_ip=10.0.0.9").replace("10.0.0.2",
                                                                                          "10.0.0.2 ip=10.0.0.9"),
     None, ["both reach the cluster at 10.0.0.9"]),
    ("vip-is-the-bastion", INVENTORY.replace("10.0.0.2", "10.0.0.2 ansible_ssh_common_args='-J ops@10.0.0.100'"),
     "control_plane:\n  vip: 10.0.0.100\n", ["control_plane.vip 10.0.0.100", "bastion"]),
    ("aliases-mixed", "[masters]\ncp1 ansible_host=10.0.0.1\n[control_plane]\ncp2 ansible_host=10.0.0.2\n"
     "cp3 ansible_host=10.0.0.3\n", None, ["[control_plane] and [masters]", "first control plane"]),
    ("ssh-host-precedence", INVENTORY.replace("10.0.0.2", "10.0.0.2 ansible_ssh_host=10.0.0.7"), None,
     ["ansible_ssh_host", "differ"]),
    ("bundled-verbose-strict-off", INVENTORY.replace("10.0.0.2", "10.0.0.2 ansible_ssh_common_args='-vo "
                                                     "StrictHostKeyChecking=no'"), None, ["ansible_ssh_common_args"]),
    ("nested-sixty-deep", INVENTORY + "".join(f"[g{i}:children]\n{'workers' if i == 0 else f'g{i - 1}'}\n"
                                              for i in range(60)), None, ["nested 61 deep"]),
]


@pytest.mark.parametrize(("case", "inventory", "settings", "expected"), CLUSTERS, ids=[c[0] for c in CLUSTERS])
def test_an_inventory_that_got_through_before_is_refused(tmp_path: Path, case: str, inventory: str,
                                                         settings: str | None, expected: list[str]) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text(inventory)
    args = ["up", "-i", str(path)]
    if settings is not None:
        (tmp_path / "cluster.yaml").write_text(settings)
        args += ["-c", str(tmp_path / "cluster.yaml")]
    assert_refused(run_main(*args), *expected)


def test_a_yaml_inventory_yields_plain_strings_that_yaml_can_write(tmp_path: Path) -> None:
    """The shipped gpu-cluster.yml passed preflight and prepare, then crashed at control_plane: its host names were
    Ansible's tagged strings, which yaml.safe_dump cannot write. Plain str from the edge on."""
    import yaml

    from provision.inputs.inventory import load_inventory
    from provision.inputs.settings import Settings
    from provision.render.kubeadm_config import render_init_config

    path = tmp_path / "hosts.yml"
    path.write_text("all:\n  children:\n    control_plane:\n      hosts:\n        k8s-master: {ansible_host: 10.0.0.1}\n"
                    "    workers:\n      hosts:\n        gpu-node-1: {ansible_host: 10.0.0.2, node_ip: 10.0.0.2}\n")
    cluster = load_inventory(path)
    for node in cluster.nodes:
        assert type(node.name) is str and type(node.host) is str and type(node.address) is str
        assert all(type(key) is str for key in node.variables)
    assert "name: k8s-master" in render_init_config(cluster, Settings(), "1.36.4")
    yaml.safe_dump({node.host: node.variables for node in cluster.nodes})


# (id, arguments, what the line names)
OPTIONS = [
    ("image-latest", ["smoke-test", "--print-manifests", "job", "--image", "docker.io/pytorch/pytorch:latest"],
     ["--image", "no fixed tag"]),
    ("image-yaml", ["smoke-test", "--print-manifests", "job", "--image", "a: b"], ["--image", "not an image reference"]),
    ("image-newline", ["smoke-test", "--print-manifests", "job", "--image", "busybox:1.36\nx"], ["--image"]),
    ("state-dir-proc", ["--state-dir", "/proc/x", "config", "show"], ["--state-dir", "/proc"]),
    ("init-dir-proc", ["init", "--control-plane", "10.0.0.1", "--dir", "/proc"], ["--dir", "/proc"]),
    ("init-address-with-variables", ["init", "--control-plane", "127.0.0.1 ansible_port=1"],
     ["--control-plane", "spaces"]),
    ("init-address-newline", ["init", "--control-plane", "10.0.0.1\n[workers]"], ["--control-plane"]),
    ("init-user-shell", ["init", "--control-plane", "10.0.0.1", "--user", "root;id"], ["--user"]),
]


@pytest.mark.parametrize(("case", "arguments", "expected"), OPTIONS, ids=[c[0] for c in OPTIONS])
def test_an_option_that_got_through_before_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str,
                                                      arguments: list[str], expected: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert_refused(run_main(*arguments), *expected)
    assert list(tmp_path.iterdir()) == []


def test_save_into_a_file_or_an_uncreatable_place_is_refused_before_training(tmp_path: Path) -> None:
    (tmp_path / "results").write_text("not a folder\n")
    kubeconfig = tmp_path / "kubeconfig"
    for target, expected in ((tmp_path / "results", "is a file"), (Path("/proc/1/model"), "kernel")):
        outcome = run_main("smoke-test", "--kubeconfig", str(kubeconfig), "--save", str(target))
        assert_refused(outcome, "--save", expected)
