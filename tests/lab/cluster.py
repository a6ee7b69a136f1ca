"""A running cluster on lab nodes, as `bootstrap up` would have left it, for the upgrade and certificate tests and
the upgrade's benchmark (bench/upgrade.py).

The nodes are real (tests/lab/lab.py); Kubernetes on them is the lab's stand-ins (tests/lab/kube_acting.py) installed
from the stand-in repositories (tests/lab/repos.py: one repository per minor, pushed to every node and named by
mirrors.kubernetes_repo as a file:// mirror; apt on Debian flavours, dnf on RHEL-shaped ones), held as prepare
holds them (apt-mark hold, dnf versionlock), the cluster formed by the stand-in
`kubeadm init` and `join`. The API is the stand-in API server (tests/lab/cluster_api.py), whose admin kubeconfig is
where `up` leaves the operator's. `bootstrap` runs as a user runs it: `python -m provision`, a process of its own.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provision.inputs.inventory import load_inventory
from provision.inputs.state import ClusterState
from provision.inputs.versions import kubernetes_release
from provision.kube.kubeconfig import admin_kubeconfig_path
from tests.lab import kube_acting
from tests.lab.cluster_api import ExecApiServer, FakeCluster
from tests.lab.lab import Lab
from tests.lab.repos import OFFLINE_DIR, build_kubernetes_repos, build_kubernetes_rpm_repos, write_config
from tests.support.refusal import Outcome

# What the stand-in repositories publish: minor -> its patches (the newest is what a bare minor installs).
PUBLISHED = {"1.35": (1, 2), "1.36": (3, 4), "1.37": (1,)}
# The Calico release every minor of the stand-in repositories pairs with (the versions table's).
CALICO = kubernetes_release(35).calico
REPOSITORY = f"file://{OFFLINE_DIR}/kubernetes"
APT_SOURCE = """# Ansible managed: Kubernetes (cluster-bootstrap setting mirrors.kubernetes_repo).
Types: deb
URIs: {uri}
Suites: /
Signed-By: /etc/apt/keyrings/cb-kubernetes.asc
"""


@dataclass(frozen=True)
class Call:
    """One call of a stand-in on a node."""

    start: float
    end: float
    node: str
    tool: str
    args: str

    def __str__(self) -> str:
        return f"{self.node} {self.tool} {self.args}".rstrip()


@dataclass
class KubeLab:
    lab: Lab
    control_planes: tuple[str, ...]
    workers: tuple[str, ...]
    config: Path
    state_dir: Path
    fake: FakeCluster

    @property
    def nodes(self) -> tuple[str, ...]:
        return (*self.control_planes, *self.workers)

    def command(self, *args: str) -> list[str]:
        """`bootstrap ARGS` for this cluster (its state directory, inventory and settings)."""
        return [sys.executable, "-m", "provision", "--state-dir", str(self.state_dir), *args,
                "-i", str(self.lab.inventory_path), "-c", str(self.config)]

    def printed(self, command: str, *rest: str) -> str:
        """`bootstrap COMMAND REST` as the tool prints a command for this run (invocation.complete): the state
        directory first, then the (sub)command, this cluster's inventory and settings, then the rest."""
        return shlex.join(["bootstrap", "--state-dir", str(self.state_dir), *command.split(), "--inventory",
                           str(self.lab.inventory_path), "--config", str(self.config), *rest])

    def bootstrap(self, *args: str, timeout_s: int = 1800) -> Outcome:
        done = subprocess.run(self.command(*args), capture_output=True, text=True, timeout=timeout_s)
        return Outcome(done.returncode, done.stdout, done.stderr)

    def settings(self, **sections: dict[str, Any]) -> Path:
        """The cluster's cluster.yaml with these sections merged in."""
        data = yaml.safe_load(self.config.read_text())
        for name, values in sections.items():
            data.setdefault(name, {}).update(values)
        self.config.write_text(yaml.safe_dump(data))
        return self.config

    @contextlib.contextmanager
    def in_state_dir(self) -> Iterator[None]:
        """The library's own calls (state, paths) read the cluster's state directory from the environment."""
        saved = os.environ.get("BOOTSTRAP_STATE_DIR")
        os.environ["BOOTSTRAP_STATE_DIR"] = str(self.state_dir)
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("BOOTSTRAP_STATE_DIR")
            else:
                os.environ["BOOTSTRAP_STATE_DIR"] = saved

    def state(self) -> ClusterState:
        with self.in_state_dir():
            return ClusterState.load(load_inventory(self.lab.inventory_path))

    def admin_kubeconfig(self) -> Path:
        with self.in_state_dir():
            return admin_kubeconfig_path(load_inventory(self.lab.inventory_path))

    def calls(self, nodes: Sequence[str] | None = None) -> list[Call]:
        """Every stand-in call on these nodes (default: all), by the time each began."""
        found = []
        for name in nodes or self.nodes:
            for line in self.lab.node(name).ssh(f"cat {kube_acting.CALLS} 2>/dev/null || true").stdout.splitlines():
                start, end, node, tool, *args = line.split(" ")
                found.append(Call(float(start), float(end), node, tool, " ".join(args)))
        return sorted(found, key=lambda call: call.start)

    def forget_calls(self) -> None:
        self.run_everywhere(f"rm -f {kube_acting.CALLS}")

    def run_everywhere(self, command: str, nodes: Sequence[str] | None = None) -> list[str]:
        with ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(lambda name: self.lab.node(name).ssh(command, timeout=600).stdout,
                                 nodes or self.nodes))

    def packages(self, name: str) -> dict[str, str]:
        """kubeadm, kubelet, kubectl -> the version installed on the node (with its hold: 'hold' or 'install'; on
        dnf nodes 'hold' is a version lock on exactly that version)."""
        node = self.lab.node(name)
        if self.lab.flavour.rhel_shaped:
            out = node.ssh("rpm -q --qf '%{NAME} %{VERSION}-%{RELEASE}\\n' kubeadm kubelet kubectl").stdout
            locked = node.ssh("dnf -q versionlock list").stdout.split()
            return {package: f"{version} {'hold' if f'{package}-0:{version}.*' in locked else 'install'}"
                    for package, version in (line.split() for line in out.splitlines())}
        out = node.ssh("dpkg-query -W -f '${Package} ${Version} ${db:Status-Want}\\n' kubeadm kubelet kubectl").stdout
        return {package: f"{version} {want}" for package, version, want in (line.split() for line in out.splitlines())}

    def running_kubelet(self, name: str) -> str | None:
        text = self.lab.node(name).ssh(f"cat {kube_acting.STATE}/kubelet-running 2>/dev/null || true").stdout.strip()
        return text or None


def write_inventory(lab: Lab, control_planes: Sequence[str], workers: Sequence[str]) -> Path:
    lines = ["[control_plane]", *(f"{n} ansible_host={lab.node(n).ip}" for n in control_planes), "", "[workers]",
             *(f"{n} ansible_host={lab.node(n).ip}" for n in workers), "", "[all:vars]", "ansible_user=tester",
             "ansible_become=true", f"ansible_ssh_private_key_file={lab.key_path}",
             # RHEL-shaped flavours name none: the product chooses it from preflight's probe and the platform table.
             *([f"ansible_python_interpreter={lab.flavour.python}"] if lab.flavour.python_in_inventory else []), ""]
    lab.inventory_path.write_text("\n".join(lines))
    return lab.inventory_path


def _push(lab: Lab, tree: Path, names: Sequence[str]) -> None:
    archive = subprocess.run(["tar", "-C", str(tree), "-cf", "-", "."], check=True, capture_output=True).stdout

    def push(name: str) -> None:
        ssh = [*lab.node(name).ssh_command("root"), f"mkdir -p {OFFLINE_DIR} && tar -C {OFFLINE_DIR} -xf -"]
        subprocess.run(ssh, input=archive, check=True, capture_output=True, timeout=300)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(push, names))


def _install_rpm(release: str) -> str:
    """_install on a dnf node: the minor's repository as the packages role lists it (signatures checked), the
    release installed and version-locked."""
    minor = ".".join(release.split(".")[:2])
    repo = f"{REPOSITORY}/v{minor}/rpm/"
    listing = (f"[cb-kubernetes]\nname=Kubernetes (cluster-bootstrap setting mirrors.kubernetes_repo)\nbaseurl={repo}\n"
               f"gpgcheck=1\ngpgkey={repo}repodata/repomd.xml.key\nrepo_gpgcheck=1\ntimeout=20\n")
    return (f"set -e; printf '%s' '{listing}' > /etc/yum.repos.d/cb-kubernetes.repo; "
            f"dnf -q -y install kubeadm-{release} kubelet-{release} kubectl-{release} >/dev/null; "
            "dnf -q versionlock add kubeadm kubelet kubectl >/dev/null; "
            "systemctl daemon-reload; systemctl enable kubelet >/dev/null 2>&1; "
            f"cat > /usr/local/bin/crictl <<'CBEOF'\n{kube_acting.CRICTL}CBEOF\nchmod 755 /usr/local/bin/crictl")


def _install(release: str) -> str:
    """A node as prepare leaves it: the minor's repository listed, kubeadm, kubelet and kubectl of the release
    installed and held, the kubelet enabled."""
    minor = ".".join(release.split(".")[:2])
    repo = f"{OFFLINE_DIR}/kubernetes/v{minor}/deb"
    source = APT_SOURCE.format(uri=f"{REPOSITORY}/v{minor}/deb/")
    return (f"set -e; install -m 0644 {repo}/Release.key /etc/apt/keyrings/cb-kubernetes.asc; "
            f"printf '%s' '{source}' > /etc/apt/sources.list.d/cb-kubernetes.sources; "
            "apt-get -q update -o Dir::Etc::sourcelist=sources.list.d/cb-kubernetes.sources -o Dir::Etc::sourceparts=- "
            "-o APT::Get::List-Cleanup=0 >/dev/null; "
            f"dpkg -i {repo}/kubeadm_{release}-1.1_amd64.deb {repo}/kubelet_{release}-1.1_amd64.deb "
            f"{repo}/kubectl_{release}-1.1_amd64.deb >/dev/null; apt-mark hold kubeadm kubelet kubectl >/dev/null; "
            "systemctl daemon-reload; systemctl enable kubelet >/dev/null 2>&1; "
            f"cat > /usr/local/bin/crictl <<'CBEOF'\n{kube_acting.CRICTL}CBEOF\nchmod 755 /usr/local/bin/crictl")


def form_cluster(lab: Lab, work: Path, control_planes: Sequence[str], workers: Sequence[str], *,
                 release: str = "1.35.2", **sections: dict[str, Any]) -> KubeLab:
    """The stand-in repositories on every node, the release installed, the cluster formed, the stand-in API up
    with the admin kubeconfig in the state directory `work/state`. `sections` go into cluster.yaml."""
    write_inventory(lab, control_planes, workers)
    tree = work / "offline"
    rpm = lab.flavour.rhel_shaped
    (build_kubernetes_rpm_repos if rpm else build_kubernetes_repos)(tree, PUBLISHED)
    (tree / "calico" / CALICO / "manifests").mkdir(parents=True)
    (tree / "calico" / CALICO / "manifests" / "calico.yaml").write_text("kind: List\nitems: []\n")
    everyone = [*control_planes, *workers]
    _push(lab, tree, everyone)
    minor = ".".join(release.split(".")[:2])
    config = write_config(lab, work / "cluster.yaml", kubernetes={"version": minor},
                          mirrors={"kubernetes_repo": REPOSITORY, "calico_manifest": f"file://{OFFLINE_DIR}/calico"},
                          # Debian 12's own containerd is 1.6, too old from 1.36 on: Docker's containerd.io 2.x is
                          # the one prepare would install (none is installed here: kubeadm is a stand-in).
                          container_runtime={"containerd_source": "docker", "install_docker": False},
                          smoke_test={"enabled": False}, verify={"timeout_s": 120}, **sections)
    kube = KubeLab(lab, tuple(control_planes), tuple(workers), config, work / "state", None)  # type: ignore[arg-type]
    kube.run_everywhere((_install_rpm if rpm else _install)(release))
    first, *others = control_planes
    lab.node(first).ssh("kubeadm init --config /etc/kubernetes/kubeadm-config.yaml >/dev/null")
    kube.run_everywhere("kubeadm join --control-plane >/dev/null", others)
    kube.run_everywhere("kubeadm join >/dev/null", workers)
    members = lab.node(first).ssh(f"cat {kube_acting.STATE}/etcd-members").stdout
    for name in others:
        members += lab.node(name).ssh(f"cat {kube_acting.STATE}/etcd-members").stdout
    kube.run_everywhere(f"printf '%s' '{members}' > {kube_acting.STATE}/etcd-members", control_planes)
    kube.run_everywhere("systemctl restart kubelet")
    kube.forget_calls()

    def api_version() -> str:
        out = lab.node(first).ssh("sed -n 's#^ *image: .*/kube-apiserver:##p' /etc/kubernetes/manifests/"
                                  "kube-apiserver.yaml 2>/dev/null || true").stdout.strip()
        return out or f"v{release}"

    def etcd_members() -> list[str]:
        return [line.split()[1] for line in lab.node(first).ssh(f"cat {kube_acting.STATE}/etcd-members")
                .stdout.splitlines() if line.strip()]

    server = ExecApiServer(lambda pod, command: "")
    server.start()
    kube.fake = FakeCluster(server, tuple(control_planes), tuple(workers), kubelet=kube.running_kubelet,
                            api_version=api_version, etcd_members=etcd_members).install()
    path = kube.admin_kubeconfig()
    path.parent.mkdir(parents=True, mode=0o700)
    server.write_kubeconfig(path)
    return kube
