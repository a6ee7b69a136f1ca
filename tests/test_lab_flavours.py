"""Lab flavours: the product can be tried on Debian trixie and sid, and on nodes shaped like Rocky Linux 9 and 8.

Each flavour boots one node (shared by this module's tests), answers SSH with checked host keys, and tells
Ansible the distribution it stands for. sid brings containerd 2 from Debian's archive; the RHEL-shaped nodes
install from the lab's signed RPM repositories (tests/lab/repos.py) with every signature check on.

`bootstrap prepare` (preflight, then the prepare playbook) runs for real, twice, on a Rocky-9-shaped and an
EL8-shaped node under ansible-core 2.21: repository files and key import, dnf installs and versionlock, firewalld
ports on a running firewalld, the SELinux config file set to permissive, chrony; on the EL8 node Python 3.12 is
installed first and runs every module while dnf runs on platform-python. Under ansible-core 2.19 the EL8 node is
refused with the reason before anything changes. What such nodes cannot show: tests/lab/README.md.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ansible
import pytest
import yaml

from provision.errors import BootstrapError
from provision.inputs.inventory import load_inventory
from provision.inputs.platforms import Platform, platform_for, role_rows
from provision.inputs.settings import load_settings
from provision.inputs.state import ClusterState
from provision.inputs.versions import DRIVER_BRANCH_DEFAULT, KUBERNETES_DEFAULT
from provision.nodes.preflight.probe import parse_os_release
from provision.nodes.preflight.run import PreflightReport
from provision.nodes.prepare import PrepareResult
from provision.phases import PhaseContext, run_phases, select_phases
from provision.resources import ROLES_DIR
from tests.lab.lab import FLAVOURS, Lab
from tests.lab.prepare import prepare_nodes
from tests.lab.repos import RpmTree
from tests.support.lab_traces import lab_cgroups, traces_of
from tests.support.paths import REPO_ROOT

ANSIBLE = Path(sys.executable).parent / "ansible"
ROLES = ROLES_DIR
MODERN = tuple(int(part) for part in ansible.__version__.split(".")[:2]) >= (2, 21)
# The kubelet as a unit that runs (the placeholder package's exits at once) and kubeadm's mark of a joined node, as
# tests/test_doctor_lab.py gives its nodes.
STAND_IN_KUBELET = (
    "mkdir -p /etc/systemd/system/kubelet.service.d /etc/kubernetes && "
    "printf '[Service]\\nExecStart=\\nExecStart=/bin/sleep infinity\\n' "
    "> /etc/systemd/system/kubelet.service.d/99-cblab-stand-in.conf && "
    "printf 'apiVersion: v1\\nkind: Config\\n' > /etc/kubernetes/kubelet.conf && "
    "systemctl daemon-reload && systemctl restart kubelet && systemctl is-active kubelet")
# The ports prepare opens on a control plane (os_prep's defaults), and Calico's IP-in-IP.
CONTROL_PLANE_PORTS = {"6443/tcp", "2379-2380/tcp", "10250/tcp", "10257/tcp", "10259/tcp", "10256/tcp",
                       "30000-32767/tcp", "179/tcp", "4789/udp", "5473/tcp"}


@pytest.fixture(scope="module")
def flavour_lab(lab_factory: Callable[..., Lab], request: pytest.FixtureRequest) -> Callable[[str], Lab]:
    """One single-node lab per flavour, booted when a test first asks for it (RHEL-shaped ones share the
    session's RPM tree, built only when one of them is asked for)."""
    labs: dict[str, Lab] = {}

    def get(flavour: str) -> Lab:
        if flavour not in labs:
            extra = {"rpm_tree": request.getfixturevalue("rpm_tree")} if FLAVOURS[flavour].rhel_shaped else {}
            labs[flavour] = lab_factory(1, flavour=flavour, **extra)
        return labs[flavour]

    return get


def ansible(lab: Lab, module: str, args: str = "") -> dict[str, object]:
    """Run one Ansible module on the lab's first node over SSH (host keys checked against the lab's file);
    returns that node's result, as `--tree` records it."""
    ssh_args = (f"-o UserKnownHostsFile={lab.known_hosts_path} -o GlobalKnownHostsFile=/dev/null "
                "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes")
    env = os.environ | {"ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_SSH_ARGS": ssh_args,
                        "ANSIBLE_PIPELINING": "True"}
    with tempfile.TemporaryDirectory() as tree:
        command = [str(ANSIBLE), "all", "-i", str(lab.inventory_path), "--tree", tree, "-m", module,
                   "-e", f"ansible_python_interpreter={lab.flavour.python}", *(["-a", args] if args else [])]
        run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, cwd=REPO_ROOT)
        result = Path(tree) / lab.nodes[0].name
        if not result.is_file():
            raise AssertionError(f"ansible -m {module} exited {run.returncode}: {run.stdout[-800:]} {run.stderr[-800:]}")
        return json.loads(result.read_text())


def processes_mentioning(text: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # ended meanwhile
        if text in cmdline:
            found.append(f"{pid} {cmdline}")
    return found


def rpm_names(repo: Path) -> set[str]:
    primary = next((repo / "repodata").glob("*primary.xml.gz"))
    return set(re.findall(r"<name>([^<]+)</name>", gzip.decompress(primary.read_bytes()).decode()))


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_each_flavour_boots_and_ansible_sees_the_distribution_it_stands_for(
        flavour_lab: Callable[[str], Lab], flavour: str) -> None:
    lab = flavour_lab(flavour)
    node = lab.nodes[0]
    assert node.ssh("hostname", user="tester").stdout.strip() == node.name
    facts = ansible(lab, "ansible.builtin.setup",
                    "gather_subset=!all,!min,distribution,pkg_mgr,python,service_mgr")["ansible_facts"]
    expected = FLAVOURS[flavour]
    seen = {key: facts[f"ansible_{key}"] for key in ("distribution", "os_family", "distribution_major_version",
                                                      "pkg_mgr")}
    assert seen == {"distribution": expected.distribution, "os_family": expected.os_family,
                    "distribution_major_version": expected.major_version, "pkg_mgr": expected.pkg_mgr}
    assert facts["ansible_python"]["executable"] == expected.python
    # The Python the modules run with there: the version docs/os-support.md's lab column states (rocky9: a real 3.9).
    assert tuple(facts["ansible_python"]["version_info"][:2]) == expected.python_version
    assert facts["ansible_service_mgr"] == "systemd"
    # The row it stands for is the one the product finds for it, by os-release and by what Ansible calls it.
    row = platform_for(parse_os_release(node.ssh("cat /etc/os-release").stdout.splitlines()))
    assert isinstance(row, Platform) and (row.os_id, row.releases[0]) == expected.stands_for
    assert [r["name"] for r in role_rows() if r["ansible_distribution"] == facts["ansible_distribution"]
            and facts["ansible_distribution_major_version"].split("/")[-1] in r["ansible_versions"]] == [row.name]
    if row.codename and row.support == "supported":
        assert facts["ansible_distribution_release"] == row.codename


@pytest.mark.parametrize("flavour", ["trixie", "sid"])
def test_debian_flavours_take_packages_from_their_own_suite(flavour_lab: Callable[[str], Lab], flavour: str) -> None:
    node = flavour_lab(flavour).nodes[0]
    # The archive's Release files for these suites are past their Valid-Until date: the node is told to accept them.
    node.ssh("apt-get update -q", timeout=300)
    assert f"debian {flavour}/main amd64 Packages" in node.ssh("apt-cache policy").stdout


def test_sid_installs_containerd_2_from_the_archive(flavour_lab: Callable[[str], Lab]) -> None:
    node = flavour_lab("sid").nodes[0]
    node.ssh("apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
             "containerd", timeout=600)
    assert re.search(r"^containerd \S+ 2\.\d+\.", node.ssh("containerd --version").stdout, re.M)
    node.ssh("systemctl start containerd")
    assert node.ssh("systemctl is-active containerd").stdout.strip() == "active"
    assert "Version:  2." in node.ssh("ctr version").stdout


def test_rocky9_installs_containerd_io_from_the_signed_repository_and_runs_it(
        flavour_lab: Callable[[str], Lab]) -> None:
    lab = flavour_lab("rocky9")
    node = lab.nodes[0]
    # As Docker's docker-ce.repo, with the metadata signature required as well.
    node.ssh("cat > /etc/yum.repos.d/docker-ce.repo", input=(
        "[docker-ce-stable]\nname=Docker CE Stable - $basearch\n"
        f"baseurl={lab.repo_url}/docker/centos/$releasever/$basearch/stable\n"
        f"enabled=1\ngpgcheck=1\nrepo_gpgcheck=1\ngpgkey={lab.repo_url}/docker/centos/gpg\n"))
    # Both containerd generations are there: the newest is installed unless a test names 'containerd.io-1.6*'.
    offered = node.ssh("dnf -y -q list --showduplicates containerd.io").stdout  # -y: import the key
    assert re.search(r" 1\.6\.\d+-", offered) and re.search(r" 2\.\d+\.\d+-", offered)
    node.ssh("dnf -y -q install containerd.io", timeout=600)
    assert node.ssh("rpm -q --qf '%{VERSION}' containerd.io").stdout.startswith("2.")
    checked = node.ssh("dnf -q download --destdir /tmp/cblab-rpms containerd.io && rpm -K /tmp/cblab-rpms/*.rpm")
    assert "digests signatures OK" in checked.stdout
    node.ssh("systemctl start containerd")
    assert node.ssh("systemctl is-active containerd").stdout.strip() == "active"
    assert re.search(r"Server:\s+Version:\s+2\.", node.ssh("ctr version").stdout)


def test_rocky9_refuses_repository_metadata_whose_signature_does_not_verify(
        flavour_lab: Callable[[str], Lab]) -> None:
    lab = flavour_lab("rocky9")
    node = lab.nodes[0]
    # A copy of the Kubernetes repository's signed repomd.xml, changed by one line, checked with the right key.
    source = f"{lab.repo_url}/kubernetes/v{KUBERNETES_DEFAULT}/rpm"
    node.ssh(f"mkdir -p /tmp/tampered/repodata && cd /tmp/tampered/repodata && "
             f"curl -fsS -O {source}/repodata/repomd.xml -O {source}/repodata/repomd.xml.asc && "
             "sed -i '2i <!-- changed -->' repomd.xml")
    node.ssh("cat > /etc/yum.repos.d/tampered.repo", input=(
        "[tampered]\nname=tampered\nbaseurl=file:///tmp/tampered/\nenabled=1\ngpgcheck=1\nrepo_gpgcheck=1\n"
        f"gpgkey={source}/repodata/repomd.xml.key\n"))
    try:
        refused = node.ssh("dnf -y makecache --repo=tampered", check=False, timeout=120)
    finally:
        node.ssh("rm -r /etc/yum.repos.d/tampered.repo /tmp/tampered")
    assert refused.returncode != 0
    assert "tampered" in refused.stdout + refused.stderr


def test_rocky9_ansible_installs_os_packages_from_the_nodes_rocky_repositories(
        flavour_lab: Callable[[str], Lab]) -> None:
    lab = flavour_lab("rocky9")
    repo_file = lab.nodes[0].ssh("cat /etc/yum.repos.d/rocky.repo").stdout
    assert f"baseurl={lab.repo_url}/os/rockylinux/$releasever/BaseOS/$basearch/os/" in repo_file
    first = ansible(lab, "ansible.builtin.dnf", "name=socat,conntrack-tools state=present")
    assert first.get("changed") is True, first
    again = ansible(lab, "ansible.builtin.dnf", "name=socat,conntrack-tools state=present")
    assert again.get("changed") is False, again
    assert lab.nodes[0].ssh("rpm -q socat conntrack-tools && command -v socat conntrack").returncode == 0


def test_el8_has_the_dnf_bindings_only_in_platform_python(flavour_lab: Callable[[str], Lab]) -> None:
    lab = flavour_lab("el8")
    node = lab.nodes[0]
    assert node.ssh("/usr/libexec/platform-python -c 'import dnf; print(dnf.Base().conf.releasever)'"
                    ).stdout.strip() == "8"
    interpreter = FLAVOURS["el8"].python
    refused = node.ssh(f"{interpreter} -c 'import dnf'", check=False)
    assert refused.returncode != 0 and "No module named 'dnf'" in refused.stderr
    assert "PLATFORM_ID=\"platform:el8\"" in node.ssh("cat /etc/os-release").stdout
    # As in a user's inventory: no interpreter named, the product chooses one per node.
    assert "ansible_python_interpreter" not in lab.inventory_path.read_text()
    assert node.ssh("command -v python3.12", check=False).returncode != 0


def controller_219() -> Path | None:
    """A `bootstrap` whose ansible-core is older than 2.21: this one, or the checkout's .venv (scripts/setup.sh)."""
    for bin_dir in (Path(sys.executable).parent, REPO_ROOT / ".venv" / "bin"):
        probe = subprocess.run([str(bin_dir / "python"), "-c", "import ansible; print(ansible.__version__)"],
                               capture_output=True, text=True, check=False)
        version = tuple(int(part) for part in probe.stdout.strip().split(".")[:2] if part.isdigit())
        if probe.returncode == 0 and version < (2, 21) and (bin_dir / "bootstrap").exists():
            return bin_dir / "bootstrap"
    return None


def test_under_ansible_core_2_19_an_el8_node_is_refused_with_the_reason_before_anything_changes(
        flavour_lab: Callable[[str], Lab], tmp_path: Path) -> None:
    bootstrap = controller_219()
    if bootstrap is None:
        pytest.skip("no ansible-core 2.19 controller here (scripts/setup.sh makes .venv with one)")
    lab = flavour_lab("el8")
    node = lab.nodes[0]
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump(yaml.safe_load(lab.config_path.read_text()) | {"offline": {"source": lab.repo_url}}))
    before = node.ssh("hostname; ls /etc/yum.repos.d; rpm -qa | sort | md5sum").stdout
    run = subprocess.run([str(bootstrap), "--state-dir", str(tmp_path / "state"), "prepare", "--inventory",
                          str(lab.inventory_path), "--config", str(config)], capture_output=True, text=True,
                         timeout=300, env=os.environ | {"COLUMNS": "200"})
    said = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0
    assert "EL8-family nodes need ansible-core 2.21 (Python >= 3.12 on this machine)" in said
    assert "run bootstrap from .venv-modern / install with Python 3.12+" in said
    # Preflight refused it: no playbook ran, nothing was installed, no repository was written.
    assert not list((tmp_path / "state").glob("runs/*-prepare"))
    assert node.ssh("hostname; ls /etc/yum.repos.d; rpm -qa | sort | md5sum").stdout == before


@dataclass
class Prepared:
    lab: Lab
    config: Path
    preflight: PreflightReport
    first: PrepareResult
    second: PrepareResult


def bootstrap_prepare(lab: Lab, config: Path) -> tuple[PreflightReport, PrepareResult]:
    """`bootstrap prepare` as `up` runs it: the phase pipeline, preflight first."""
    cluster = load_inventory(lab.inventory_path)
    ctx = PhaseContext(cluster=cluster, settings=load_settings(config), state=ClusterState.load(cluster))
    result = run_phases(select_phases(("preflight", "prepare")), ctx)
    if result.error:
        raise result.error
    return ctx.results.preflight, ctx.results.prepare


@pytest.fixture(scope="module")
def prepared(lab_factory: Callable[..., Lab], rpm_tree: RpmTree,
             tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Prepared]:
    """A RHEL-shaped node after `bootstrap prepare`, twice, with `offline.source` the lab's RPM tree, firewalld
    running and SELinux's config file saying enforcing (as on a real node); one lab per flavour."""
    done: dict[str, Prepared] = {}

    def get(flavour: str) -> Prepared:
        if flavour not in done:
            lab = lab_factory(1, flavour=flavour, rpm_tree=rpm_tree)
            node = lab.nodes[0]
            node.ssh("systemctl start dbus firewalld && firewall-cmd --state")
            node.ssh("mkdir -p /etc/selinux && printf 'SELINUX=enforcing\\nSELINUXTYPE=targeted\\n' > /etc/selinux/config")
            tmp = tmp_path_factory.mktemp(flavour)
            config = tmp / "cluster.yaml"
            config.write_text(yaml.safe_dump(yaml.safe_load(lab.config_path.read_text())
                                             | {"offline": {"source": lab.repo_url}}))
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("BOOTSTRAP_STATE_DIR", str(tmp / "state"))
                preflight, first = bootstrap_prepare(lab, config)
                _, second = bootstrap_prepare(lab, config)
            done[flavour] = Prepared(lab, config, preflight, first, second)
        return done[flavour]

    return get


@pytest.fixture(scope="module")
def prepared_rocky9(prepared: Callable[[str], Prepared]) -> Prepared:
    return prepared("rocky9")


def assert_prepared_for_real(run: Prepared, major: str) -> None:
    """What prepare must leave on a RHEL-shaped node, read on the node itself."""
    lab, first = run.lab, run.first
    node = lab.nodes[0]
    assert first.playbook.ok and first.changed[node.name] > 0
    report = first.reports[node.name]
    assert (report.unit("containerd").active, report.unit("docker").active, report.unit("kubelet").enabled) == (
        "active", "active", "enabled")
    assert report.containerd.cri == "ok"
    assert {name: (package.installed, package.held) for name, package in report.packages.items()} == \
        dict.fromkeys(("kubeadm", "kubelet", "kubectl"), (True, True))
    # Repository files, every signature check on, and the lab's key imported by dnf.
    docker_repo = node.ssh("cat /etc/yum.repos.d/cb-docker.repo").stdout.replace(" = ", "=")
    assert f"baseurl={lab.repo_url}/docker/rhel/{major}/$basearch/stable" in docker_repo and "\ngpgcheck=1" in docker_repo
    assert node.ssh("rpm -q --qf '%{VERSION}' containerd.io").stdout.startswith("2.")
    # containerd 2: configuration version 3, read back by prepare (the node report's `containerd config dump`).
    assert "\nversion = 3\n" in node.ssh("cat /etc/containerd/config.toml").stdout
    kubernetes_repo = node.ssh("cat /etc/yum.repos.d/cb-kubernetes.repo").stdout.replace(" = ", "=")
    assert f"baseurl={lab.repo_url}/kubernetes/v{KUBERNETES_DEFAULT}/rpm/" in kubernetes_repo
    assert "\ngpgcheck=1" in kubernetes_repo and "\nrepo_gpgcheck=1" in kubernetes_repo
    assert "cluster-bootstrap lab" in node.ssh("rpm -qi gpg-pubkey").stdout
    assert node.ssh("rpm -q --qf '%{VERSION}' containerd.io").stdout.startswith("2.")
    locked = node.ssh("dnf -q versionlock list").stdout.split()
    assert sorted(entry.split("-0:")[0] for entry in locked) == ["kubeadm", "kubectl", "kubelet"], locked
    # firewalld, running: the ports open now and permanently.
    for listing in ("firewall-cmd --list-ports", "firewall-cmd --permanent --list-ports"):
        assert set(node.ssh(listing).stdout.split()) >= CONTROL_PLANE_PORTS, listing
    assert "ipip" in node.ssh("firewall-cmd --list-protocols").stdout.split()
    # SELinux: the file says permissive (enforcement itself cannot run in a container: getenforce says Disabled).
    assert "SELINUX=permissive" in node.ssh("cat /etc/selinux/config").stdout.splitlines()
    assert node.ssh("getenforce").stdout.strip() == "Disabled"
    assert node.ssh("systemctl is-active chronyd").stdout.strip() == "active"
    assert " -x" in node.ssh("cat /etc/sysconfig/chronyd").stdout
    assert run.second.playbook.ok and run.second.changed[node.name] == 0


def test_prepare_runs_for_real_on_a_rocky9_node_and_a_second_run_changes_nothing(prepared_rocky9: Prepared) -> None:
    """OS stand-ins from rocky.repo switched to offline.source, Docker's repository (containerd.io 2 and dockerd
    running), the Kubernetes packages version-locked; every repository with its signatures checked."""
    assert_prepared_for_real(prepared_rocky9, "9")
    node = prepared_rocky9.lab.nodes[0]
    python = prepared_rocky9.preflight.node(node.name).finding("python")
    assert python is not None and python.detail == "/usr/bin/python3 (3.9)"
    # Every module ran under EL9's Python 3.9 (the node report says which), while dnf ran on the Python that has its
    # bindings: Ansible's dnf module found them in platform-python.
    for run in (prepared_rocky9.first, prepared_rocky9.second):
        assert run.reports[node.name].python.startswith("3.9."), run.reports[node.name].python
    assert node.ssh("/usr/bin/python3 -c 'import dnf'", check=False).returncode != 0


def test_doctor_finds_a_prepared_rocky9_node_healthy(prepared_rocky9: Prepared) -> None:
    """`bootstrap doctor` on the node prepare left (given a kubelet that runs and kubeadm's kubelet.conf, as a
    joined node has): firewalld's ports, SELinux's mode, containerd, the kubelet, the OS repositories dnf reads."""
    lab, node = prepared_rocky9.lab, prepared_rocky9.lab.nodes[0]
    assert node.ssh(STAND_IN_KUBELET).stdout.strip() == "active"
    run = subprocess.run([str(Path(sys.executable).parent / "bootstrap"), "doctor", "-o", "json", "--inventory",
                          str(lab.inventory_path), "--config", str(prepared_rocky9.config)], capture_output=True,
                         text=True, timeout=600, env=os.environ | {
                             "COLUMNS": "200", "BOOTSTRAP_STATE_DIR": str(prepared_rocky9.config.parent / "state")})
    document = json.loads(run.stdout)
    (found,) = document["nodes"]
    assert found["probed"], found
    checks = {c["check"]: c for c in found["checks"]}
    assert set(checks) >= {"swap", "clock", "hostname", "hosts", "firewall", "selinux", "containerd", "kubelet",
                           "dns", "package_source"}
    # The disk check reads this machine's disk (a lab node's filesystems are the host's): judged elsewhere.
    assert {name: (c["status"], c["detail"]) for name, c in checks.items() if name != "disk" and c["status"] != "ok"} \
        == {}
    assert checks["kubelet"]["detail"] == "running"


def _run_inventory(run_dir: Path) -> dict[str, Any]:
    """The inventory a run handed Ansible (nodes/runner.py), read as plain YAML: the document carries Ansible's
    `!unsafe` tag (nothing in it is templated), which a plain loader does not know."""
    document: dict[str, Any] = yaml.safe_load((run_dir / "inventory.yml").read_text().removeprefix("!unsafe\n"))
    return document


@pytest.mark.skipif(not MODERN, reason="EL8-family nodes need ansible-core 2.21 (the 2.19 refusal is tested above)")
def test_prepare_runs_for_real_on_an_el8_node_with_python_3_12_and_a_second_run_changes_nothing(
        prepared: Callable[[str], Prepared]) -> None:
    """The EL8 path: preflight finds no python3.12 and names platform-python's dnf bindings; prepare installs it from
    the offline source's AppStream (raw, before facts), every module runs on it, dnf on platform-python."""
    run = prepared("el8")
    node = run.lab.nodes[0]
    chosen = run.preflight.node(node.name).finding("python")
    assert chosen is not None and chosen.detail == "/usr/bin/python3.12: prepare installs python3.12 first"
    assert_prepared_for_real(run, "8")
    assert node.ssh("rpm -q --qf '%{NAME}' python3.12").stdout == "python3.12"
    assert node.ssh("/usr/bin/python3.12 -c 'import dnf'", check=False).returncode != 0
    groups = _run_inventory(run.first.playbook.run_dir)
    host = groups["all"]["children"]["control_plane"]["hosts"][node.name]
    assert host["ansible_python_interpreter"] == "/usr/bin/python3.12" and "dnf -y -q" in host["cb_python_bootstrap"]
    first = run.first.playbook.run_dir / "run.log"
    assert re.search(r"\tchanged\tInstall the node's Python where preflight found it missing", first.read_text())
    # The second preflight found it: nothing to install, the same interpreter.
    second_groups = _run_inventory(run.second.playbook.run_dir)
    again = second_groups["all"]["children"]["control_plane"]["hosts"][node.name]
    assert again == {k: v for k, v in host.items() if k != "cb_python_bootstrap"}


def test_a_gpu_node_on_rocky9_gets_nvidias_stack_and_the_verdict_names_the_missing_gpu(
        prepared_rocky9: Prepared, tmp_path: Path) -> None:
    """NVIDIA's path for the RHEL family runs to its end against the placeholders: the CUDA and toolkit
    repositories, EPEL and kernel headers, the driver's dnf module stream, the toolkit. The placeholders have no
    GPU and nvidia-ctk changes nothing, and prepare's own check says so."""
    lab = prepared_rocky9.lab
    node = lab.nodes[0]
    inventory = lab.inventory_path.with_name("inventory-gpu.ini")
    inventory.write_text(lab.inventory_path.read_text().replace(f"ansible_host={node.ip}",
                                                                f"ansible_host={node.ip} gpu=true"))
    # Preflight would refuse gpu=true without a GPU on the bus: the playbook runs on its own here, with
    # preflight's interpreter.
    pythons = prepared_rocky9.preflight.pythons
    with pytest.raises(BootstrapError, match="nvidia-smi lists no GPU"):
        prepare_nodes(load_inventory(inventory), load_settings(prepared_rocky9.config), gpus={node.name: 0}, pythons=pythons)
    installed = node.ssh("rpm -q epel-release kernel-headers nvidia-driver nvidia-driver-cuda "
                         "nvidia-container-toolkit --qf '%{NAME}\\n'").stdout.split()
    assert installed == ["epel-release", "kernel-headers", "nvidia-driver", "nvidia-driver-cuda",
                         "nvidia-container-toolkit"]
    # No GPU generation known (gpu=true, none found): NVIDIA's default, the open kernel modules' stream.
    assert f"{DRIVER_BRANCH_DEFAULT}-open [e]" in node.ssh("dnf -q module list --enabled nvidia-driver").stdout


def test_a_rhel_shaped_lab_leaves_nothing_behind(prepared_rocky9: Prepared, rpm_tree: RpmTree) -> None:
    """down() removes every trace, the hub's repository server included (this module's last use of the lab)."""
    lab = prepared_rocky9.lab
    slot, cgroups, server = lab.slot, lab_cgroups(lab), f" {lab.hub_ip} {rpm_tree.root}"
    assert processes_mentioning(server)
    lab.down()
    assert traces_of(slot, cgroups, lab.dir) == []
    assert not processes_mentioning(server)


def test_the_rpm_tree_holds_every_package_the_roles_install_on_the_rhel_family(rpm_tree: RpmTree) -> None:
    os_vars = yaml.safe_load((ROLES / "os_prep/defaults/main/RedHat.yml").read_text())
    package_sets = {"8": "el8", "9": "el9"}
    runtime = yaml.safe_load((ROLES / "container_runtime/defaults/main/main.yml").read_text())
    nvidia = yaml.safe_load((ROLES / "nvidia/defaults/main/main.yml").read_text())
    kubernetes = yaml.safe_load((ROLES / "kubernetes_packages/defaults/main/main.yml").read_text())
    docker_ce = re.findall(r"'([\w.-]+)'", runtime["container_runtime_packages"]["docker"])
    for releasever in rpm_tree.releasevers:
        os_repos = rpm_tree.root / f"os/rockylinux/{releasever}"
        os_names = set().union(*(rpm_names(os_repos / f"{repo}/x86_64/os") for repo in ("BaseOS", "AppStream",
                                                                                         "extras")))
        assert set(os_vars["os_prep_packages_by_set"][package_sets[releasever]]) | {
            "epel-release", "kernel-headers", "python3.12"} <= os_names
        for layout in ("centos", "rhel"):
            assert set(docker_ce) <= rpm_names(rpm_tree.root / f"docker/{layout}/{releasever}/x86_64/stable")
        cuda = rpm_tree.root / f"nvidia-cuda/rhel{releasever}/x86_64"
        assert (cuda / "D42D0685.pub").is_file() and "nvidia-driver" in rpm_names(cuda)
        modules = (cuda / "modules.yaml").read_text()
        assert f"stream: \"{DRIVER_BRANCH_DEFAULT}-open\"" in modules and f"stream: \"{DRIVER_BRANCH_DEFAULT}-dkms\"" in modules
    assert set(kubernetes["kubernetes_packages_names"]) | {"cri-tools"} <= \
        rpm_names(rpm_tree.root / f"kubernetes/v{rpm_tree.kube_minor}/rpm")
    assert set(nvidia["nvidia_toolkit_packages"]) <= rpm_names(rpm_tree.root / "nvidia-container-toolkit/rpm/x86_64")
    for key in ("docker/centos/gpg", "docker/rhel/gpg", "nvidia-container-toolkit/gpgkey",
                f"kubernetes/v{rpm_tree.kube_minor}/rpm/repodata/repomd.xml.key"):
        assert (rpm_tree.root / key).read_text() == rpm_tree.key.read_text()


def test_every_repository_in_the_rpm_tree_has_signed_metadata(rpm_tree: RpmTree, tmp_path: Path) -> None:
    keyring = tmp_path / "key.gpg"
    subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "--output", str(keyring), str(rpm_tree.key)],
                   check=True, capture_output=True)
    repomds = sorted(rpm_tree.root.rglob("repodata/repomd.xml"))
    # per releasever: BaseOS, AppStream, extras, Docker (centos and rhel), CUDA; once: Kubernetes, the NVIDIA toolkit
    assert len(repomds) == 6 * len(rpm_tree.releasevers) + 2
    for repomd in repomds:
        check = subprocess.run(["gpgv", "--keyring", str(keyring), f"{repomd}.asc", str(repomd)],
                               capture_output=True, text=True)
        assert check.returncode == 0, f"{repomd}: {check.stderr}"
