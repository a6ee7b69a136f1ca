"""The roles' variables and templates, rendered with Ansible's own templating for every supported OS family.

Nothing RPM-based (and no Ubuntu or NVIDIA repository) can be reached from here, so these tests are what stands
between a typo in a repository URL or a package name and a failed run on a real node: each renders the
variables a task would use, for the default and `cn` profiles and the offline source, exactly as Ansible
would (same Jinja filters, same lazy variable resolution), from the same cb_* variables the driver passes.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from provision.inputs.inventory import Cluster, Node
from provision.inputs.settings import parse_settings
from provision.nodes.preflight.probe import NVIDIA_VENDOR
from provision.render.kubeadm_config import CRI_SOCKET
from provision.render.playbook_vars import playbook_vars, prepare_vars
from provision.resources import PLAYBOOKS_DIR

ROLES = ("os_prep", "container_runtime", "kubernetes_packages", "nvidia")
FACTS = {
    "rocky8": {"ansible_os_family": "RedHat", "ansible_distribution": "Rocky", "ansible_distribution_major_version": "8",
               "ansible_distribution_version": "8.10", "ansible_distribution_release": "Green Obsidian",
               "ansible_kernel": "4.18.0-553.el8_10.x86_64"},
    "rocky9": {"ansible_os_family": "RedHat", "ansible_distribution": "Rocky", "ansible_distribution_major_version": "9",
               "ansible_distribution_version": "9.4", "ansible_distribution_release": "Blue Onyx",
               "ansible_kernel": "5.14.0-427.13.1.el9_4.x86_64"},
    "rhel9": {"ansible_os_family": "RedHat", "ansible_distribution": "RedHat", "ansible_distribution_major_version": "9",
              "ansible_distribution_version": "9.4", "ansible_distribution_release": "Plow",
              "ansible_kernel": "5.14.0-427.el9.x86_64"},
    "centos7": {"ansible_os_family": "RedHat", "ansible_distribution": "CentOS", "ansible_distribution_major_version": "7",
                "ansible_distribution_version": "7.9", "ansible_distribution_release": "Core",
                "ansible_kernel": "3.10.0-1160.el7.x86_64"},
    "ubuntu2204": {"ansible_os_family": "Debian", "ansible_distribution": "Ubuntu", "ansible_distribution_major_version": "22",
                   "ansible_distribution_version": "22.04", "ansible_distribution_release": "jammy",
                   "ansible_kernel": "5.15.0-105-generic"},
    "debian12": {"ansible_os_family": "Debian", "ansible_distribution": "Debian", "ansible_distribution_major_version": "12",
                 "ansible_distribution_version": "12.5", "ansible_distribution_release": "bookworm",
                 "ansible_kernel": "6.1.0-21-amd64"},
}
CLUSTER = Cluster(inventory_path=Path("hosts.ini"), nodes=(
    Node(name="cp1", address="192.0.2.10", role="control_plane", user="root"),
    Node(name="gpu-1", address="192.0.2.11", role="worker", user="root"),
))


class Rendered:
    """Role variables (defaults, then the OS family's vars) plus facts and cb_* vars, rendered on demand."""

    def __init__(self, os: str, settings: dict[str, Any] | None = None, **extra: Any) -> None:
        loader = DataLoader()
        variables: dict[str, Any] = {}
        for role in ROLES:
            for part in ("defaults/main.yml", f"vars/{FACTS[os]['ansible_os_family']}.yml"):
                path = PLAYBOOKS_DIR / "roles" / role / part
                if path.exists():
                    variables |= loader.load_from_file(str(path), trusted_as_template=True) or {}
        # As the prepare playbook gets them: preflight found a GPU on gpu-1.
        variables |= playbook_vars(CLUSTER, parse_settings(settings or {})) | prepare_vars(CLUSTER, {"gpu-1": 1})
        variables |= FACTS[os] | {"ansible_architecture": "x86_64", "inventory_hostname": "gpu-1",
                                  "groups": {"control_plane": ["cp1"], "workers": ["gpu-1"]},
                                  "ansible_managed": "Ansible managed"}
        variables |= extra
        self.templar = Templar(loader=loader, variables=variables)

    def __call__(self, expression: str) -> Any:
        return self.templar.template(trust_as_template("{{ " + expression + " }}"))

    def template(self, role: str, name: str, **extra: Any) -> str:
        text = (PLAYBOOKS_DIR / "roles" / role / "templates" / name).read_text()
        return self.templar.copy_with_new_env(available_variables=self.templar.available_variables | extra) \
            .template(trust_as_template(text))


CN = {"mirrors": {"profile": "cn"}}


@pytest.mark.parametrize("os", ["rocky8", "rocky9", "rhel9"])
def test_rhel_family_repositories_point_at_upstream_by_default(os: str) -> None:
    r = Rendered(os)
    el = r("ansible_distribution_major_version")
    assert r("container_runtime_docker_repo.uri") == "https://download.docker.com/linux/centos/$releasever/$basearch/stable"
    assert r("container_runtime_docker_repo.key_url") == "https://download.docker.com/linux/centos/gpg"
    assert r("kubernetes_packages_repo.uri") == "https://pkgs.k8s.io/core:/stable:/v1.31/rpm/"
    assert r("kubernetes_packages_repo.key_url") == "https://pkgs.k8s.io/core:/stable:/v1.31/rpm/repodata/repomd.xml.key"
    assert r("nvidia_cuda_repo.uri") == f"https://developer.download.nvidia.com/compute/cuda/repos/rhel{el}/x86_64"
    assert r("nvidia_cuda_repo.key_url") == \
        f"https://developer.download.nvidia.com/compute/cuda/repos/rhel{el}/x86_64/D42D0685.pub"
    assert r("nvidia_toolkit_repo.uri") == "https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch"
    assert r("nvidia_toolkit_repo.key_url") == "https://nvidia.github.io/libnvidia-container/gpgkey"
    assert r("container_runtime_source") == "docker-ce"
    assert r("container_runtime_sandbox_image") == "registry.k8s.io/pause:3.10"


@pytest.mark.parametrize("os", ["rocky8", "rocky9"])
def test_rhel_family_repositories_switch_to_aliyun_tsinghua_and_ustc_with_the_cn_profile(os: str) -> None:
    r = Rendered(os, CN)
    el = r("ansible_distribution_major_version")
    assert r("container_runtime_docker_repo.uri") == \
        "https://mirrors.aliyun.com/docker-ce/linux/centos/$releasever/$basearch/stable"
    assert r("container_runtime_docker_repo.key_url") == "https://mirrors.aliyun.com/docker-ce/linux/centos/gpg"
    assert r("kubernetes_packages_repo.uri") == "https://mirrors.aliyun.com/kubernetes-new/core/stable/v1.31/rpm/"
    assert r("kubernetes_packages_repo.key_url") == \
        "https://mirrors.aliyun.com/kubernetes-new/core/stable/v1.31/rpm/repodata/repomd.xml.key"
    assert r("nvidia_cuda_repo.uri") == f"https://mirrors.aliyun.com/nvidia-cuda/rhel{el}/x86_64"
    assert r("nvidia_toolkit_repo.uri") == "https://mirrors.ustc.edu.cn/libnvidia-container/stable/rpm/$basearch"
    assert r("nvidia_toolkit_repo.key_url") == "https://mirrors.ustc.edu.cn/libnvidia-container/gpgkey"
    assert r("os_prep_rpm_mirror_base") == "https://mirrors.aliyun.com/rockylinux"
    assert r("os_prep_rpm_mirror_layouts[ansible_distribution].files") == "[Rr]ocky*.repo"
    assert r("container_runtime_sandbox_image") == "registry.aliyuncs.com/google_containers/pause:3.10"
    assert r("cb_sources.registry_mirrors['docker.io']") == ["https://docker.m.daocloud.io"]


def test_an_offline_source_replaces_every_repository_and_its_key() -> None:
    r = Rendered("rocky9", {"offline": {"source": "/srv/offline"}})
    assert r("kubernetes_packages_repo.uri") == "file:///srv/offline/kubernetes/v1.31/rpm/"
    assert r("container_runtime_docker_repo.uri") == "file:///srv/offline/docker/centos/$releasever/$basearch/stable"
    assert r("nvidia_cuda_repo.key_url") == "file:///srv/offline/nvidia-cuda/rhel9/x86_64/D42D0685.pub"
    assert r("nvidia_toolkit_repo.key_url") == "file:///srv/offline/nvidia-container-toolkit/gpgkey"
    assert r("os_prep_rpm_mirror_base") == "file:///srv/offline/os/rockylinux"
    debian = Rendered("debian12", {"offline": {"source": "http://repo.example.internal/cb"}})
    assert debian("kubernetes_packages_repo.key_url") == "http://repo.example.internal/cb/kubernetes/v1.31/deb/Release.key"
    assert debian("os_prep_apt_archive") == "http://repo.example.internal/cb/os/debian"
    assert debian("nvidia_toolkit_repo.uri") == "http://repo.example.internal/cb/nvidia-container-toolkit/deb/amd64/"


def test_rhel_package_names_differ_between_releases_8_and_9() -> None:
    el8, el9 = Rendered("rocky8")("os_prep_packages"), Rendered("rocky9")("os_prep_packages")
    for common in ("conntrack-tools", "socat", "ipset", "ethtool", "chrony", "iproute-tc",
                   "python3-dnf-plugin-versionlock", "python3-libselinux"):
        assert common in el8 and common in el9
    # ebtables: a package of its own on 8, part of iptables-nft on 9.
    assert {"iptables", "iptables-ebtables"} <= set(el8) and "iptables-nft" not in el8
    assert "iptables-nft" in el9 and "iptables-ebtables" not in el9
    assert Rendered("rocky9")("os_prep_chrony_service") == "chronyd"


def test_rhel_driver_toolkit_and_kubernetes_package_specs() -> None:
    rocky = Rendered("rocky9", {"kubernetes": {"version": "1.31.4"}})
    assert rocky("nvidia_driver_prerequisites") == ["epel-release", "kernel-devel-5.14.0-427.13.1.el9_4.x86_64",
                                                    "kernel-headers"]
    assert rocky("nvidia_driver_packages") == ["@nvidia-driver:565-dkms"]
    assert rocky("nvidia_toolkit_install") == ["nvidia-container-toolkit-1.17.3-1", "nvidia-container-toolkit-base-1.17.3-1",
                                               "libnvidia-container-tools-1.17.3-1", "libnvidia-container1-1.17.3-1"]
    assert rocky("kubernetes_packages_install") == ["kubeadm-1.31.4", "kubelet-1.31.4", "kubectl-1.31.4"]
    assert rocky("nvidia_initramfs_command") == "dracut --force"
    # RHEL itself has no epel-release in its own repositories: EPEL is a documented prerequisite there.
    assert "epel-release" not in Rendered("rhel9")("nvidia_driver_prerequisites")
    assert Rendered("rocky9")("kubernetes_packages_install") == ["kubeadm", "kubelet", "kubectl"]


def test_centos_7_is_refused_before_anything_is_changed() -> None:
    centos7 = Rendered("centos7")
    assert centos7("ansible_distribution_major_version in os_prep_supported[ansible_distribution]") is False
    tasks = DataLoader().load_from_file(str(PLAYBOOKS_DIR / "roles/os_prep/tasks/0000-preflight.yml"),
                                        trusted_as_template=True)
    message = centos7.templar.template(tasks[1]["ansible.builtin.assert"]["fail_msg"])
    assert "CentOS 7.9" in message and "end-of-life" in message and "ansible-core 2.19 cannot manage it" in message
    assert Rendered("rocky8")("ansible_distribution_major_version in os_prep_supported[ansible_distribution]") is False
    for supported in ("rocky9", "rhel9", "ubuntu2204", "debian12"):
        assert Rendered(supported)("ansible_distribution_major_version in os_prep_supported[ansible_distribution]")


def test_debian_family_sources_for_both_profiles() -> None:
    ubuntu = Rendered("ubuntu2204")
    assert ubuntu("container_runtime_source") == "docker-ce"
    assert ubuntu("container_runtime_docker_repo") == {
        "id": "docker", "name": "Docker CE", "uri": "https://download.docker.com/linux/ubuntu", "suites": "jammy",
        "components": "stable", "key_url": "https://download.docker.com/linux/ubuntu/gpg",
        "setting": "mirrors.docker_repo"}
    assert ubuntu("nvidia_cuda_repo.uri") == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
    assert ubuntu("nvidia_cuda_repo.key_url").endswith("/ubuntu2204/x86_64/3bf863cc.pub")
    assert ubuntu("nvidia_driver_prerequisites") == ["linux-headers-5.15.0-105-generic"]
    assert ubuntu("nvidia_driver_packages") == ["cuda-drivers-565"]
    debian = Rendered("debian12", {"kubernetes": {"version": "1.31.4"}})
    assert debian("container_runtime_source") == "docker.io"
    assert debian("container_runtime_packages[container_runtime_source]") == ["docker.io", "containerd", "runc"]
    assert debian("kubernetes_packages_install") == ["kubeadm=1.31.4-*", "kubelet=1.31.4-*", "kubectl=1.31.4-*"]
    assert debian("kubernetes_packages_repo.uri") == "https://pkgs.k8s.io/core:/stable:/v1.31/deb/"
    assert debian("nvidia_toolkit_install")[0] == "nvidia-container-toolkit=1.17.3-1"
    no_docker = Rendered("ubuntu2204", {"container_runtime": {"install_docker": False}})
    assert no_docker("container_runtime_packages[container_runtime_source]") == ["containerd.io"]
    cn = Rendered("ubuntu2204", CN)
    assert cn("container_runtime_docker_repo.uri") == "https://mirrors.aliyun.com/docker-ce/linux/ubuntu"
    assert cn("kubernetes_packages_repo.key_url") == \
        "https://mirrors.aliyun.com/kubernetes-new/core/stable/v1.31/deb/Release.key"
    assert cn("nvidia_cuda_repo.uri") == "https://mirrors.aliyun.com/nvidia-cuda/ubuntu2204/x86_64/"


def test_os_mirror_source_list_names_the_mirror_for_every_suite() -> None:
    ubuntu = Rendered("ubuntu2204", CN).template("os_prep", "cb-os.sources.j2")
    assert "URIs: https://mirrors.aliyun.com/ubuntu\nSuites: jammy jammy-updates jammy-backports\n" \
           "Components: main restricted universe multiverse" in ubuntu
    assert "Suites: jammy-security" in ubuntu
    debian = Rendered("debian12", CN).template("os_prep", "cb-os.sources.j2")
    assert "URIs: https://mirrors.aliyun.com/debian\nSuites: bookworm bookworm-updates\n" \
           "Components: main contrib non-free non-free-firmware" in debian
    assert "URIs: https://mirrors.aliyun.com/debian-security\nSuites: bookworm-security" in debian


@pytest.mark.parametrize(("version_line", "expect"), [
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u1", 'version = 2'),
    ("containerd containerd.io 1.7.25 bcc810d6b9066471b0b6fa75f557a15a1cbf31bb", 'version = 2'),
    ("containerd containerd.io v2.0.4 1a43cb6a1035441f9aca8f5666a9b3ef9e70ab20", 'version = 3'),
])
def test_containerd_configuration_matches_the_installed_major_version(version_line: str, expect: str) -> None:
    config = Rendered("rocky9", CN).template("container_runtime", "containerd-config.toml.j2",
                                             container_runtime_containerd_version={"stdout": version_line})
    assert f"\n{expect}\n" in config
    assert "SystemdCgroup = true" in config
    assert '"registry.aliyuncs.com/google_containers/pause:3.10"' in config
    assert 'config_path = "/etc/containerd/certs.d"' in config
    import tomllib

    parsed = tomllib.loads(config)
    plugins = parsed["plugins"]
    if expect == "version = 3":
        runc = plugins["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]
        assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"].endswith("pause:3.10")
    else:
        runc = plugins["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"]
    assert runc["options"]["SystemdCgroup"] is True


def test_registry_mirror_hosts_file_lists_every_mirror() -> None:
    r = Rendered("debian12", {"container_runtime": {"registry_mirrors": {"quay.io": ["https://q1.example", "https://q2.example"]}}})
    hosts = r.template("container_runtime", "hosts.toml.j2", item={"key": "docker.io", "value": ["https://hub.example"]})
    assert 'server = "https://registry-1.docker.io"' in hosts and '[host."https://hub.example"]' in hosts
    import tomllib

    quay = tomllib.loads(r.template("container_runtime", "hosts.toml.j2",
                                    item={"key": "quay.io", "value": ["https://q1.example", "https://q2.example"]}))
    assert quay["server"] == "https://quay.io"
    assert list(quay["host"]) == ["https://q1.example", "https://q2.example"]
    assert r("container_runtime_docker_daemon")["registry-mirrors"] == []


@pytest.mark.parametrize("os", ["rocky8", "rocky9", "rhel9", "ubuntu2204", "debian12"])
def test_every_role_variable_renders_for_every_supported_os(os: str) -> None:
    r = Rendered(os, CN)
    names = set()
    for role in ROLES:
        for part in ("defaults/main.yml", f"vars/{FACTS[os]['ansible_os_family']}.yml"):
            path = PLAYBOOKS_DIR / "roles" / role / part
            if path.exists():
                names |= set(DataLoader().load_from_file(str(path)) or {})
    # Values that need a task's registered result are rendered with it elsewhere.
    needs_results = {"os_prep_firewalld_installed", "os_prep_firewalld_active", "os_prep_ufw_installed"}
    # Values the roles use only under a condition (the task's `when`).
    used_when = {"os_prep_rpm_mirror_base": "ansible_distribution in os_prep_rpm_mirror_layouts"}
    for name in sorted(names - needs_results):
        if name in used_when and not r(used_when[name]):
            continue
        value = r(name)
        assert value not in (None, ""), name
        assert "{{" not in str(value), name


def test_every_dnf_repository_checks_signatures_of_its_packages_or_its_metadata() -> None:
    rocky = Rendered("rocky9")
    repos = {name: rocky(name) for name in ("container_runtime_docker_repo", "nvidia_cuda_repo", "nvidia_toolkit_repo")}
    for name, repo in repos.items():
        checks = (repo.get("gpgcheck", True), repo.get("repo_gpgcheck", True))
        assert any(str(c).lower() == "true" for c in checks), name
    # Docker signs its packages (as its own docker-ce.repo checks); that check is never dropped.
    assert repos["container_runtime_docker_repo"].get("gpgcheck", True) is True


def test_the_roles_take_what_python_owns_and_spell_none_of_it_again() -> None:
    """containerd's socket (cb_cri_socket), the NVIDIA PCI vendor id (preflight's probe) and the inventory's gpu
    flag (parsed by the inventory loader, decided into cb_nvidia_nodes) each live in one place in Python."""
    r = Rendered("debian12")
    assert r("cb_cri_socket") == CRI_SOCKET
    assert r("nvidia_gpu_node") is True
    texts = {path: path.read_text() for path in PLAYBOOKS_DIR.rglob("*") if path.suffix in (".yml", ".j2", ".py")}
    assert [path for path, text in texts.items() if CRI_SOCKET.removeprefix("unix://") in text] == []
    vendor = re.compile(rf"\b(0x)?{NVIDIA_VENDOR}\b")
    assert [path for path, text in texts.items() if vendor.search(text)] == []
    reads_gpu = re.compile(r"""(?<![\w.'"=/-])gpu(?![\w=/.-])""")
    assert [path for path, text in texts.items() if path.suffix == ".yml" and any(
        reads_gpu.search(line) for line in text.splitlines() if not line.lstrip().startswith("#"))] == []


def test_reset_removes_the_smoke_tests_cache_where_the_settings_put_it() -> None:
    from ansible.parsing.dataloader import DataLoader as Loader

    defaults = Loader().load_from_file(str(PLAYBOOKS_DIR / "roles" / "reset" / "defaults" / "main.yml"),
                                       trusted_as_template=True)
    for settings, path in (({}, "/var/lib/cluster-bootstrap/cache"),
                           ({"smoke_test": {"cache_path": "/data/cb-cache/"}}, "/data/cb-cache")):
        variables = defaults | playbook_vars(CLUSTER, parse_settings(settings))
        templar = Templar(loader=Loader(), variables=variables)
        removed = templar.template(trust_as_template("{{ reset_paths + reset_cache_paths }}"))
        assert removed[-1] == path and "/etc/kubernetes" in removed
    for task_file in ("0030-files.yml", "0050-verify.yml"):
        assert '"{{ reset_paths + reset_cache_paths }}"' in (PLAYBOOKS_DIR / "roles" / "reset" / "tasks" / task_file).read_text()
