"""The roles' variables and templates, rendered with Ansible's own templating for every supported OS family.

Nothing RPM-based (and no Ubuntu or NVIDIA repository) can be reached from here, so these tests are what stands
between a typo in a repository URL or a package name and a failed run on a real node: each renders the
variables a task would use, for the default and `cn` profiles and the offline source, exactly as Ansible
would (same Jinja filters, same lazy variable resolution), from the same cb_* variables the driver passes.
"""
from __future__ import annotations

import json
import re
from typing import Any

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from provision.inputs.inventory import Node
from provision.inputs.platforms import PLATFORMS, Platform
from provision.inputs.settings import CACHE_MARKER, parse_settings
from provision.nodes.preflight.probe import NVIDIA_VENDOR
from provision.nodes.sources_check import NodeTarget, package_indexes
from provision.render.kubeadm_config import CRI_SOCKET
from provision.render.playbook_vars import playbook_vars, prepare_vars
from provision.resources import PLAYBOOKS_DIR
from tests.support.roles import CLUSTER, SUPPORTED, Rendered, node_want, role_files

CN = {"mirrors": {"profile": "cn"}}


@pytest.mark.parametrize("os", ["rocky8", "rocky9", "rhel9"])
def test_rhel_family_repositories_point_at_upstream_by_default(os: str) -> None:
    r = Rendered(os)
    el = r("ansible_distribution_major_version")
    assert r("container_runtime_docker_repo.uri") == f"https://download.docker.com/linux/rhel/{el}/$basearch/stable"
    assert r("container_runtime_docker_repo.key_url") == "https://download.docker.com/linux/rhel/gpg"
    assert r("kubernetes_packages_repo.uri") == "https://pkgs.k8s.io/core:/stable:/v1.36/rpm/"
    assert r("kubernetes_packages_repo.key_url") == "https://pkgs.k8s.io/core:/stable:/v1.36/rpm/repodata/repomd.xml.key"
    assert r("nvidia_cuda_repo.uri") == f"https://developer.download.nvidia.com/compute/cuda/repos/rhel{el}/x86_64"
    assert r("nvidia_cuda_repo.key_url") == \
        f"https://developer.download.nvidia.com/compute/cuda/repos/rhel{el}/x86_64/D42D0685.pub"
    assert r("nvidia_toolkit_repo.uri") == "https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch"
    assert r("nvidia_toolkit_repo.key_url") == "https://nvidia.github.io/libnvidia-container/gpgkey"
    assert r("container_runtime_sandbox_image") == "registry.k8s.io/pause:3.10.2"


@pytest.mark.parametrize("os", ["rocky8", "rocky9", "rhel9"])
def test_the_cuda_repository_is_trusted_by_its_package_signatures_not_a_metadata_signature_it_lacks(os: str) -> None:
    # NVIDIA's cuda-rhel<N>.repo sets gpgcheck=1 and no repo_gpgcheck: its repodata carries no repomd.xml.asc to
    # check, and dnf with repo_gpgcheck refuses such a repository outright.
    r = Rendered(os)
    assert r("nvidia_cuda_repo.gpgcheck | default(true)") is True
    assert r("nvidia_cuda_repo.repo_gpgcheck | default(true) | bool") is False
    # The toolkit's repository is the other way round, as NVIDIA's own file says: signed metadata, unsigned packages.
    assert r("nvidia_toolkit_repo.repo_gpgcheck | default(true) | bool") is True


@pytest.mark.parametrize("os", ["rocky8", "rocky9"])
def test_rhel_family_repositories_switch_to_aliyun_tsinghua_and_ustc_with_the_cn_profile(os: str) -> None:
    r = Rendered(os, CN)
    el = r("ansible_distribution_major_version")
    assert r("container_runtime_docker_repo.uri") == \
        f"https://mirrors.aliyun.com/docker-ce/linux/rhel/{el}/$basearch/stable"
    assert r("container_runtime_docker_repo.key_url") == "https://mirrors.aliyun.com/docker-ce/linux/rhel/gpg"
    assert r("kubernetes_packages_repo.uri") == "https://mirrors.aliyun.com/kubernetes-new/core/stable/v1.36/rpm/"
    assert r("kubernetes_packages_repo.key_url") == \
        "https://mirrors.aliyun.com/kubernetes-new/core/stable/v1.36/rpm/repodata/repomd.xml.key"
    assert r("nvidia_cuda_repo.uri") == f"https://mirrors.aliyun.com/nvidia-cuda/rhel{el}/x86_64"
    assert r("nvidia_toolkit_repo.uri") == "https://mirrors.ustc.edu.cn/libnvidia-container/stable/rpm/$basearch"
    assert r("nvidia_toolkit_repo.key_url") == "https://mirrors.ustc.edu.cn/libnvidia-container/gpgkey"
    assert r("os_prep_rpm_mirror_base") == "https://mirrors.aliyun.com/rockylinux"
    assert r("node_platform.os_mirror.files") == "[Rr]ocky*.repo"
    assert r("container_runtime_sandbox_image") == "registry.aliyuncs.com/google_containers/pause:3.10.2"
    assert r("cb_sources.registry_mirrors['docker.io']") == ["https://docker.m.daocloud.io"]


def test_an_offline_source_replaces_every_repository_and_its_key() -> None:
    r = Rendered("rocky9", {"offline": {"source": "/srv/offline"}})
    assert r("kubernetes_packages_repo.uri") == "file:///srv/offline/kubernetes/v1.36/rpm/"
    assert r("container_runtime_docker_repo.uri") == "file:///srv/offline/docker/rhel/9/$basearch/stable"
    assert r("nvidia_cuda_repo.key_url") == "file:///srv/offline/nvidia-cuda/rhel9/x86_64/D42D0685.pub"
    assert r("nvidia_toolkit_repo.key_url") == "file:///srv/offline/nvidia-container-toolkit/gpgkey"
    assert r("os_prep_rpm_mirror_base") == "file:///srv/offline/os/rockylinux"
    debian = Rendered("debian12", {"offline": {"source": "http://repo.example.internal/cb"}})
    assert debian("kubernetes_packages_repo.key_url") == "http://repo.example.internal/cb/kubernetes/v1.36/deb/Release.key"
    assert debian("os_prep_apt_archive") == "http://repo.example.internal/cb/os/debian"
    assert debian("nvidia_toolkit_repo.uri") == "http://repo.example.internal/cb/nvidia-container-toolkit/deb/amd64/"


def test_rhel_package_names_differ_between_releases_8_and_9() -> None:
    el8, el9 = Rendered("rocky8")("os_prep_packages"), Rendered("rocky9")("os_prep_packages")
    for common in ("conntrack-tools", "socat", "ipset", "ethtool", "chrony", "iproute-tc",
                   "python3-dnf-plugin-versionlock"):
        assert common in el8 and common in el9
    # ebtables: a package of its own on 8, part of iptables-nft on 9.
    assert {"iptables", "iptables-ebtables"} <= set(el8) and "iptables-nft" not in el8
    assert "iptables-nft" in el9 and "iptables-ebtables" not in el9
    assert Rendered("rocky9")("os_prep_chrony.service") == "chronyd"
    # EL10 takes EL9's names; Anolis OS 8 and Alibaba Cloud Linux 3, EL8's; openEuler has its own.
    assert Rendered("rocky10")("os_prep_packages") == el9
    assert Rendered("anolis8")("os_prep_packages") == Rendered("alinux3")("os_prep_packages") == el8
    euler = Rendered("openeuler2203")("os_prep_packages")
    assert {"iproute", "ebtables", "iptables"} <= set(euler) and "iproute-tc" not in euler


def test_rhel_driver_toolkit_and_kubernetes_package_specs() -> None:
    rocky = Rendered("rocky9", {"kubernetes": {"version": "1.36.4"}})
    assert rocky("nvidia_driver_prerequisites") == ["epel-release", "kernel-devel-5.14.0-427.13.1.el9_4.x86_64",
                                                    "kernel-headers"]
    # NVIDIA's own default where preflight named no generation: the open kernel modules.
    assert rocky("nvidia_driver_packages") == ["@nvidia-driver:580-open"]
    assert rocky("nvidia_toolkit_install") == ["nvidia-container-toolkit-1.20.0-1", "nvidia-container-toolkit-base-1.20.0-1",
                                               "libnvidia-container-tools-1.20.0-1", "libnvidia-container1-1.20.0-1"]
    assert rocky("kubernetes_packages_install") == ["kubeadm-1.36.4", "kubelet-1.36.4", "kubectl-1.36.4"]
    assert rocky("nvidia_initramfs_command") == "dracut --force"
    # RHEL itself has no epel-release in its own repositories: EPEL is a documented prerequisite there.
    assert "epel-release" not in Rendered("rhel9")("nvidia_driver_prerequisites")
    assert Rendered("rocky9")("kubernetes_packages_install") == ["kubeadm", "kubelet", "kubectl"]


def refusal(os: str, core: str = "2.21.5") -> str | None:
    """node_state's platform assert for this node and controller: None when it passes, else its message."""
    r = Rendered(os, ansible_version={"full": core}, ansible_service_mgr="systemd")
    tasks = DataLoader().load_from_file(str(PLAYBOOKS_DIR / "roles/node_state/tasks/0020-platform.yml"),
                                        trusted_as_template=True)
    check = tasks[0]["ansible.builtin.assert"]
    for condition in check["that"]:
        if not r.templar.evaluate_conditional(trust_as_template(condition)):
            return str(r.templar.template(check["fail_msg"]))
    return None


def test_centos_7_is_refused_with_the_reasons_and_the_way_out() -> None:
    message = refusal("centos7")
    assert message is not None and "CentOS 7.9" in message
    for reason in ("end of life since June 2024", "no Python 3.9 or newer", "cgroup v1", "no containerd 2 packages"):
        assert reason in message
    assert "Rocky Linux or AlmaLinux 9 or 10" in message and "mirrors.profile: cn" in message


def test_the_assert_reads_the_platform_table_for_every_os() -> None:
    for supported in SUPPORTED:
        assert refusal(supported) is None, supported
    assert "do-release-upgrade" in (refusal("ubuntu2004") or "")
    assert "Debian 12 or 13" in (refusal("debian11") or "")
    # A system the table does not list: no row, and the assert names the supported ones.
    arch = Rendered("debian12", ansible_distribution="Archlinux", ansible_distribution_major_version="")
    assert arch("node_platform") == {}


def test_debian_testing_runs_with_the_tables_warning() -> None:
    """Ansible reports Debian testing/unstable's major version as "<codename>/sid" (the lab's sid flavour)."""
    sid = Rendered("debian13", ansible_distribution_major_version="forky/sid", ansible_distribution_release="sid")
    assert sid("node_platform.name") == "Debian testing/unstable" and sid("node_platform.support") == "warned"
    assert sid("node_family") == "Debian"
    message = sid.task("node_state/tasks/0020-platform.yml", 1, "ansible.builtin.debug", "msg")
    assert "use Debian 13 for a cluster you keep" in message


def test_el8_family_nodes_are_refused_under_ansible_core_2_19_with_the_way_out() -> None:
    for os in ("rocky8", "alma8", "anolis8", "alinux3"):
        message = refusal(os, core="2.19.14")
        assert message is not None, os
        assert "EL8-family nodes need ansible-core 2.21 (Python >= 3.12 on this machine)" in message
        assert "runs ansible-core 2.19.14" in message and ".venv-modern" in message
    for os in ("rocky9", "rocky10", "openeuler2403", "debian12", "ubuntu2404"):
        assert refusal(os, core="2.19.14") is None, os


def test_the_family_comes_from_the_table_not_from_ansible_os_family() -> None:
    """Anolis OS reports ansible_os_family "Anolis": the roles still load the RHEL family's variables."""
    anolis = Rendered("anolis8")
    assert anolis.family == "RedHat" and anolis("ansible_os_family") == "Anolis"
    assert anolis("container_runtime_docker_repo.uri") == "https://download.docker.com/linux/rhel/8/$basearch/stable"
    assert anolis("nvidia_cuda_repo.uri") == "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64"
    assert anolis("kubernetes_packages_repo.uri") == "https://pkgs.k8s.io/core:/stable:/v1.36/rpm/"


def test_alibaba_cloud_linux_3_and_openeuler_take_dockers_tree_of_their_el_release() -> None:
    """Alibaba Cloud Linux's $releasever is 3 and openEuler's is its own: the tree is named, not $releasever."""
    alinux = Rendered("alinux3", CN)
    assert alinux("container_runtime_docker_repo.uri") == \
        "https://mirrors.aliyun.com/docker-ce/linux/rhel/8/$basearch/stable"
    assert alinux("nvidia_cuda_repo.uri") == "https://mirrors.aliyun.com/nvidia-cuda/rhel8/x86_64"
    # Its repositories already point at Aliyun's mirrors: they are kept as they are.
    assert alinux("node_platform.os_mirror") is None
    for os in ("openeuler2203", "openeuler2403"):
        assert Rendered(os)("container_runtime_docker_repo.uri") == \
            "https://download.docker.com/linux/rhel/9/$basearch/stable"
    assert Rendered("centos9")("container_runtime_docker_repo.uri") == \
        "https://download.docker.com/linux/centos/9/$basearch/stable"


@pytest.mark.parametrize(("os", "reason"), [
    ("rocky10", "without dnf module streams"), ("openeuler2203", "no CUDA repository for openEuler")])
def test_a_gpu_node_without_a_usable_cuda_repository_is_refused_with_the_reason(os: str, reason: str) -> None:
    r = Rendered(os)
    assert r("nvidia_cuda_distribution") == ""
    message = r.task("nvidia/tasks/0000-preflight.yml", 0, "ansible.builtin.assert", "fail_msg")
    assert reason in message and "gpu=false" in message


def test_each_cuda_repository_has_its_own_key() -> None:
    assert Rendered("debian13")("nvidia_cuda_repo.key_url") == \
        "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/8793F200.pub"
    assert Rendered("debian12")("nvidia_cuda_repo.key_url").endswith("/debian12/x86_64/3bf863cc.pub")
    assert Rendered("rocky8")("nvidia_cuda_repo.key_url").endswith("/rhel8/x86_64/D42D0685.pub")
    assert Rendered("ol9")("nvidia_driver_prerequisites")[0] == "kernel-devel-5.15.0-206.153.7.el9uek.x86_64"


def test_debian_family_sources_for_both_profiles() -> None:
    ubuntu = Rendered("ubuntu2204")
    assert ubuntu("container_runtime_docker_repo") == {
        "id": "docker", "name": "Docker CE", "uri": "https://download.docker.com/linux/ubuntu", "suites": "jammy",
        "components": "stable", "key_url": "https://download.docker.com/linux/ubuntu/gpg",
        "setting": "mirrors.docker_repo"}
    assert ubuntu("nvidia_cuda_repo.uri") == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
    assert ubuntu("nvidia_cuda_repo.key_url").endswith("/ubuntu2204/x86_64/3bf863cc.pub")
    assert ubuntu("nvidia_driver_prerequisites") == ["linux-headers-5.15.0-105-generic"]
    assert ubuntu("nvidia_driver_packages") == ["nvidia-open-580"]
    debian = Rendered("debian12", {"kubernetes": {"version": "1.36.4"}})
    assert debian("container_runtime_packages.distribution") == ["containerd", "runc", "docker.io"]
    assert debian("container_runtime_packages.docker") == ["containerd.io", "docker-ce", "docker-ce-cli",
                                                           "docker-buildx-plugin", "docker-compose-plugin"]
    assert debian("kubernetes_packages_install") == ["kubeadm=1.36.4-*", "kubelet=1.36.4-*", "kubectl=1.36.4-*"]
    assert debian("kubernetes_packages_repo.uri") == "https://pkgs.k8s.io/core:/stable:/v1.36/deb/"
    assert debian("nvidia_toolkit_install")[0] == "nvidia-container-toolkit=1.20.0-1"
    no_docker = Rendered("ubuntu2204", {"container_runtime": {"install_docker": False}})
    assert no_docker("container_runtime_packages.docker") == ["containerd.io"]
    assert no_docker("container_runtime_packages.distribution") == ["containerd", "runc"]
    cn = Rendered("ubuntu2204", CN)
    assert cn("container_runtime_docker_repo.uri") == "https://mirrors.aliyun.com/docker-ce/linux/ubuntu"
    assert cn("kubernetes_packages_repo.key_url") == \
        "https://mirrors.aliyun.com/kubernetes-new/core/stable/v1.36/deb/Release.key"
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
    ("containerd github.com/containerd/containerd/v2 2.1.9~ds1 2.1.9~ds1-1", 'version = 3'),
    ("containerd containerd.io v2.3.5 0123456789abcdef0123456789abcdef01234567", 'version = 3'),
])
def test_containerd_configuration_matches_the_installed_major_version(version_line: str, expect: str) -> None:
    r = Rendered("rocky9", CN, container_runtime_containerd_version={"stdout": version_line})
    # What the role writes (render/prepare_files.py, for the major it reads) is what the node read compares with.
    config = r("cb_prepare.containerd_config[container_runtime_major | string]")
    assert node_want.major(version_line) == r("container_runtime_major | string")
    assert f"\n{expect}\n" in config
    # containerd 2 imports the drop-ins (nvidia-ctk's) explicitly; 1.x merges imported plugin tables whole.
    assert ('imports = ["/etc/containerd/conf.d/*.toml"]' in config) == (expect == "version = 3")
    assert "SystemdCgroup = true" in config
    assert '"registry.aliyuncs.com/google_containers/pause:3.10.2"' in config
    assert 'config_path = "/etc/containerd/certs.d"' in config
    import tomllib

    parsed = tomllib.loads(config)
    plugins = parsed["plugins"]
    if expect == "version = 3":
        runc = plugins["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]
        assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"].endswith("pause:3.10.2")
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
    assert json.loads(r("container_runtime_docker_daemon_json"))["registry-mirrors"] == []


@pytest.mark.parametrize("os", SUPPORTED)
def test_every_role_variable_renders_for_every_supported_os(os: str) -> None:
    r = Rendered(os, CN)
    names = {"node_platform", "node_family"}
    for path in role_files():
        names |= set(DataLoader().load_from_file(str(path)) or {})
    # The other OS family's values are never picked on this node.
    other = "redhat" if r.family == "Debian" else "debian"
    names = {name for name in names if not name.endswith(f"_{other}")}
    # Values a task renders with its own variables (packages_repo, packages_install_packages) or its role's
    # templates (a template lookup).
    needs_results = {"packages_repo_paths", "packages_repo_list", "packages_repo_key", "packages_repo_read",
                     "packages_repo_holds", "packages_repo_sources", "packages_install_specs",
                     "container_runtime_holds_base", "container_runtime_holds_config",
                     "container_runtime_holds_containerd", "container_runtime_holds",
                     "container_runtime_repository_holds", "kubernetes_packages_repository_holds"}
    # Values the roles use only under a condition (the task's `when`): the OS mirror's, the CUDA repository's
    # where NVIDIA publishes one, the firewall's where one is installed.
    used_when = {"os_prep_rpm_mirror_base": "node_platform.os_mirror is not none",
                 "os_prep_apt_archive": "cb_sources.os_repo is not none",
                 "os_prep_apt_security_archive": "cb_sources.os_repo is not none",
                 "nvidia_cuda_repo_uri": "nvidia_cuda_distribution", "nvidia_cuda_key_url": "nvidia_cuda_distribution",
                 "nvidia_cuda_repo": "nvidia_cuda_distribution", "nvidia_cuda_distribution": "nvidia_cuda_distribution",
                 "nvidia_cuda_repo_debian": "nvidia_cuda_distribution",
                 "nvidia_cuda_repo_redhat": "nvidia_cuda_distribution"}
    # Values that are false on a fresh node.
    falsy = {name for name in names if "_holds" in name or name.endswith("_hold")} | {
        "os_prep_firewalld_installed", "os_prep_firewalld_active", "os_prep_ufw_installed", "node_state_running",
        "container_runtime_mirror_files", "kubernetes_packages_release", "os_prep_chrony_container",
        "os_prep_chrony_options_now", "os_prep_sysctls_written",
        "node_state_reads", "packages_transaction"}
    for name in sorted(names - needs_results):
        if name in used_when and not r(used_when[name]):
            continue
        value = r(name)
        assert name in falsy or value not in (None, ""), name
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
        assert templar.template(trust_as_template("{{ reset_cache_paths }}")) == [path]
        assert "/etc/kubernetes" in templar.template(trust_as_template("{{ reset_paths }}"))
        # Removed only where the smoke test left its mark (tests/test_reset_lab.py runs it).
        assert templar.template(trust_as_template("{{ cb_smoke_cache_marker }}")) == CACHE_MARKER


def _chosen_source(os: str, setting: str, candidate: str | None) -> str:
    """The container_runtime role's choice of containerd source (container_runtime_source), with the candidate its
    OS family's task found (candidate-<family>.yml: apt's, or none on the RHEL family)."""
    if candidate is None and os.startswith("rocky"):
        tasks = DataLoader().load_from_file(str(PLAYBOOKS_DIR / "roles/container_runtime/tasks/candidate-RedHat.yml"),
                                            trusted_as_template=True)
        registered = tasks[0]["ansible.builtin.set_fact"]["container_runtime_candidate"]
    else:
        registered = {"stdout": candidate} if candidate is not None else {"skipped": True}
    r = Rendered(os, {"container_runtime": {"containerd_source": setting}}, container_runtime_candidate=registered)
    return str(r("container_runtime_source")).strip()


@pytest.mark.parametrize(("os", "setting", "candidate", "os_release"), [
    ("debian12", "auto", "1.6.20~ds1-1+deb12u1", {"ID": "debian", "VERSION_ID": "12"}),
    ("debian12", "auto", "1.7.24~ds1-6", {"ID": "debian", "VERSION_ID": "13"}),
    ("debian12", "auto", "2.1.9~ds1-1", {"ID": "debian", "PRETTY_NAME": "Debian GNU/Linux forky/sid"}),
    ("debian12", "auto", "(none)", {"ID": "debian", "VERSION_ID": "12"}),
    ("ubuntu2204", "auto", "1.7.27-0ubuntu1~22.04.1", {"ID": "ubuntu", "VERSION_ID": "22.04"}),
    ("rocky9", "auto", None, {"ID": "rocky", "VERSION_ID": "9.4"}),
    ("debian12", "distribution", None, {"ID": "debian", "VERSION_ID": "12"}),
    ("debian12", "docker", None, {"ID": "debian", "PRETTY_NAME": "Debian GNU/Linux forky/sid"}),
])
def test_the_role_chooses_containerd_where_preflight_judged_it(os: str, setting: str, candidate: str | None,
                                                               os_release: dict[str, str]) -> None:
    # Preflight judges the rules on the containerd this choice installs: both sides must choose alike.
    from provision.nodes.preflight.checks import containerd_source
    from provision.nodes.preflight.probe import NodeFacts

    facts = NodeFacts(os_release=os_release, hostname="n1", product_uuid=None, macs={}, cpus=2, memory_mb=4096,
                      listeners=(), swaps_active=(), fstab_swaps=(), selinux=None, gpus=(), nvidia_driver=None,
                      kube_configs=(), containerd_candidate=None if candidate in (None, "(none)") else candidate)
    assert _chosen_source(os, setting, candidate) == containerd_source(facts, setting)


@pytest.mark.parametrize(("generations", "debian", "rhel"), [
    (["Hopper"], "nvidia-open-580", "@nvidia-driver:580-open"),
    (["Turing", "Ampere"], "nvidia-open-580", "@nvidia-driver:580-open"),
    (["Volta"], "cuda-drivers-580", "@nvidia-driver:580-dkms"),
    (["Pascal", "Ada"], "cuda-drivers-580", "@nvidia-driver:580-dkms"),
])
def test_the_driver_takes_the_kernel_module_the_gpus_need(generations: list[str], debian: str, rhel: str) -> None:
    # Turing and newer run NVIDIA's open modules; Maxwell, Pascal and Volta need the proprietary ones, which also
    # drive a newer GPU beside them.
    modules = prepare_vars(CLUSTER, {"gpu-1": 2}, {"gpu-1": generations})
    assert modules["cb_nvidia_nodes"] == ["gpu-1"]
    assert Rendered("ubuntu2204", **modules)("nvidia_driver_packages") == [debian]
    assert Rendered("rocky9", **modules)("nvidia_driver_packages") == [rhel]


def test_debian_13_gets_nvidias_debian13_tree_with_its_key_and_the_docker_client() -> None:
    trixie = Rendered("debian13")
    assert trixie("nvidia_cuda_repo.uri") == "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/"
    assert trixie("nvidia_cuda_repo.key_url").endswith("/debian13/x86_64/8793F200.pub")
    assert trixie("container_runtime_packages.distribution") == ["containerd", "runc", "docker.io", "docker-cli"]
    assert Rendered("debian12")("container_runtime_packages.distribution") == ["containerd", "runc", "docker.io"]


# --- the sources check asks for what the roles will install from ----------------------------------------------

@pytest.mark.parametrize("os_name,node", [("rocky9", "Rocky Linux 9"), ("rocky8", "Rocky Linux 8"),
                                          ("debian12", "Debian 12")])
@pytest.mark.parametrize("settings", [{}, {"mirrors": {"profile": "cn"}}, {"offline": {"source": "/srv/offline"}}])
def test_the_indexes_asked_for_are_those_of_the_repositories_the_roles_write(os_name: str, node: str,
                                                                            settings: dict[str, Any]) -> None:
    # The roles compose each repository's address from the same sources (their vars); a drift between the two
    # would prove one source and install from another.
    rendered = Rendered(os_name, settings)
    parsed = parse_settings(settings)
    row = next(p for p in PLATFORMS if isinstance(p, Platform) and p.name.startswith(node))
    worker = Node(name="n1", host="n1", address="127.0.0.1", role="worker", user="root")
    target = NodeTarget(worker, row, codename=rendered("ansible_distribution_release"),
                        release=str(rendered("ansible_distribution_major_version")), gpu=True)
    found = {i.name: i.url for i in package_indexes(parsed, target)}
    arch = "x86_64"
    for name, var in (("Kubernetes packages", "kubernetes_packages_repo"), ("Docker packages", "container_runtime_docker_repo"),
                      ("NVIDIA CUDA packages", "nvidia_cuda_repo"),
                      ("NVIDIA container toolkit packages", "nvidia_toolkit_repo")):
        uri = str(rendered(f"{var}.uri")).replace("$basearch", arch).rstrip("/")
        if os_name.startswith("debian"):
            suite = rendered(f"{var}.suites | default('')")
            expected = f"{uri}/dists/{suite}/InRelease" if suite and suite != "/" else f"{uri}/InRelease"
        else:
            expected = f"{uri}/repodata/repomd.xml"
        assert found[name] == expected, name
    # The OS mirror, where the settings name one (cn, offline): the archive the roles point the node's lists at.
    os_indexes = [url for name, url in ((i.name, i.url) for i in package_indexes(parsed, target)) if name == "OS packages"]
    if not settings:
        assert os_indexes == []
    elif os_name.startswith("debian"):
        assert os_indexes == [f"{rendered('os_prep_apt_archive')}/dists/{target.codename}/InRelease"]
    else:
        base = f"{rendered('os_prep_rpm_mirror_base')}/{target.release}"
        assert os_indexes == [f"{base}/BaseOS/x86_64/os/repodata/repomd.xml", f"{base}/AppStream/x86_64/os/repodata/repomd.xml"]


def test_the_ports_prepare_opens_are_the_ones_the_doctor_checks() -> None:
    """One table (render/node_tables.py): the roles open its ports, the doctor checks the same ones."""
    from provision.nodes.doctor.firewall import required_ports
    from provision.render.node_tables import open_ports

    for host, control_plane in (("cp1", True), ("gpu-1", False)):
        opened = Rendered("rocky9", inventory_hostname=host)("os_prep_open_ports")
        assert opened == [rule.spec for rule in open_ports(control_plane)]
        assert [str(port) for port in required_ports(control_plane)] == opened
    assert "6443/tcp" in Rendered("rocky9", inventory_hostname="cp1")("os_prep_open_ports")
    assert "6443/tcp" not in Rendered("rocky9")("os_prep_open_ports")
