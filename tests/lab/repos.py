"""Signed package repositories of stand-in packages, for lab nodes that cannot reach the real ones.

pkgs.k8s.io, download.docker.com, NVIDIA's repositories and Rocky Linux's own cannot be reached here. The
lab builds repositories in their layouts instead, signed with a throwaway GPG key so that every signature
check the product turns on stays on:

- `build_kubernetes_repo`: a flat apt repository in the pkgs.k8s.io layout (`kubernetes/v<minor>/deb/`), for
  Debian nodes (the tests copy it onto the nodes and use it as file://).
- `build_rpm_tree`: the `offline.source` layout of docs/offline.md for RHEL-shaped nodes (`os/rockylinux/...`,
  `docker/centos/...`, `kubernetes/v<minor>/rpm/`, `nvidia-cuda/rhel<N>/...`, `nvidia-container-toolkit/...`);
  the lab serves it over HTTP from the hub to the nodes of a RHEL-shaped lab (`Lab.up(flavour="rocky9")`).

Most packages are PLACEHOLDERS: their binaries only print a version (`placeholder_script`); kubeadm, the kubelet
and kubectl are stand-ins that know their release and act out what the upgrade and certificate commands rely on
(tests/lab/kube_acting.py). What is real is everything around them: names, versions and dependencies as the
product asks for them, the repository layout and its signatures, install, version locks, units. Two payloads
are real, taken from Debian's archive (cached under the lab's cache directory): containerd.io (Debian's
containerd and runc, so containerd runs on the node) and docker-ce/docker-ce-cli (Debian's dockerd and docker).
The RHEL-shaped nodes' own tools (chronyd, conntrack, ipset, ...) are Debian's, already in their base: the os
repository's stand-ins own only what Rocky's packages add around them (chronyd.service, /etc/sysconfig/chronyd).
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path

import yaml

from provision.inputs.platforms import PLATFORMS, Platform
from provision.inputs.versions import (
    CONTAINER_TOOLKIT_DEFAULT,
    DRIVER_BRANCH_DEFAULT,
    KUBERNETES_DEFAULT,
    KUBERNETES_RELEASES,
)
from tests.lab import kube_acting
from tests.lab.lab import CACHE_DIR, Lab, LabError, _flock

KUBERNETES_PACKAGES = ("kubeadm", "kubelet", "kubectl")
# What build_rpm_tree runs on the host (besides gpg and dpkg-deb, which the apt side needs too).
RPM_TOOLS = ("rpmbuild", "rpmsign", "createrepo_c", "modifyrepo_c")
KUBELET_UNIT = """[Unit]
Description=kubelet placeholder (cluster-bootstrap lab)

[Service]
ExecStart=/usr/bin/kubelet
Restart=no

[Install]
WantedBy=multi-user.target
"""


def placeholder_script(name: str, version: str) -> str:
    """The whole of a placeholder binary: it says what it stands for and exits 0."""
    return f"#!/bin/sh\necho '{name} placeholder v{version}'\n"


@dataclass
class Package:
    """One package for either family: files by absolute path (content, mode), relations in RPM syntax."""

    name: str
    version: str
    release: str
    summary: str
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    requires: list[str] = field(default_factory=list)
    provides: list[str] = field(default_factory=list)
    pre: str = ""  # shell run before the files are laid down (RPM %pre)
    post: str = ""  # shell run after (RPM %post)
    postun: str = ""  # shell run after removal (RPM %postun)
    arch: str = "noarch"

    def add_placeholder_binaries(self, *paths: str) -> Package:
        for path in paths:
            self.files[path] = (placeholder_script(path.rsplit("/", 1)[1], self.version).encode(), 0o755)
        return self

    def add_text(self, path: str, text: str, mode: int = 0o644) -> Package:
        self.files[path] = (text.encode(), mode)
        return self

    def stage(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        for path, (content, mode) in self.files.items():
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            target.chmod(mode)


# The images `kubeadm config images list` names besides the control plane's own four, for the stand-in kubeadm:
# stand-in versions (the real kubeadm of each release names its own), enough for a bundle to carry and a node to pull.
STAND_IN_KUBEADM_EXTRA = ("coredns/coredns:v1.12.1", "etcd:3.6.5-0")


def stand_in_images(minor: str, patch: int) -> list[str]:
    """What the stand-in kubeadm's `config images list` names, as kubeadm's does (what a bundle build asks it)."""
    version = f"v{minor}.{patch}"
    release = next((r for r in KUBERNETES_RELEASES if r.name == minor), KUBERNETES_RELEASES[-1])
    images = [f"kube-{part}:{version}" for part in ("apiserver", "controller-manager", "scheduler", "proxy")] + \
        list(STAND_IN_KUBEADM_EXTRA) + [f"pause:{release.pause}"]
    return [f"registry.k8s.io/{image}" for image in images]


def kubernetes_packages(minor: str, patch: int, family: str) -> list[Package]:
    """kubeadm, kubelet and kubectl at <minor>.<patch>, versioned and laid out as pkgs.k8s.io's for the family
    ("deb" or "rpm"), each a stand-in that knows its release and acts out what the product relies on
    (tests/lab/kube_acting.py); the RPM kubeadm needs cri-tools (crictl), as pkgs.k8s.io's does."""
    rpm = family == "rpm"
    version, release = f"{minor}.{patch}", "150500.1.1" if rpm else "1.1"
    scripts = {"kubeadm": kube_acting.kubeadm_script(version, stand_in_images(minor, patch)),
               "kubelet": kube_acting.kubelet_script(version), "kubectl": kube_acting.kubectl_script(version)}
    packages = [Package(name, version, release, f"{name} stand-in").add_text(f"/usr/bin/{name}", scripts[name], 0o755)
                for name in KUBERNETES_PACKAGES]
    packages[0].add_text(kube_acting.PKI_LIB, kube_acting.PKI)
    packages[1].add_text(f"{'/usr' if rpm else ''}/lib/systemd/system/kubelet.service", KUBELET_UNIT)
    if rpm:
        packages.append(Package("cri-tools", f"{minor}.0", release, "crictl placeholder")
                        .add_placeholder_binaries("/usr/bin/crictl"))
        packages[0].requires.append(f"cri-tools >= {minor}.0")
    return packages


# ---------------------------------------------------------------------------------------------- signing key

@dataclass(frozen=True)
class SigningKey:
    """A throwaway GPG key in its own keyring; `run` is gpg on that keyring."""

    home: Path
    uid: str

    def run(self, *args: str) -> None:
        subprocess.run(["gpg", "--batch", "--quiet", "--yes", "--pinentry-mode", "loopback", "--passphrase", "",
                        *args], check=True, capture_output=True, env=os.environ | {"GNUPGHOME": str(self.home)},
                       timeout=120)

    def export(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.run("--armor", "--output", str(path), "--export", self.uid)
        return path

    def detach_sign(self, path: Path, suffix: str) -> None:
        self.run("--armor", "--detach-sign", "--output", f"{path}{suffix}", str(path))


@contextmanager
def signing_key(work: Path, uid: str) -> Iterator[SigningKey]:
    """A fresh ed25519 key, valid for a day (apt, rpm and dnf on the nodes all verify ed25519 signatures)."""
    home = work / "gnupg"
    home.mkdir(mode=0o700)
    key = SigningKey(home, uid)
    key.run("--quick-gen-key", uid, "ed25519", "sign", "1d")
    try:
        yield key
    finally:
        # The gpg-agent started for the throwaway keyring must not outlive it.
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=os.environ | {"GNUPGHOME": str(home)},
                       capture_output=True, timeout=30)


def _world_readable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


# ---------------------------------------------------------------------------------------------- apt

def _build_deb(work: Path, package: Package) -> Path:
    root = work / f"{package.name}-root"
    (root / "DEBIAN").mkdir(parents=True)
    version = f"{package.version}-{package.release}"
    (root / "DEBIAN" / "control").write_text(
        f"Package: {package.name}\nVersion: {version}\nArchitecture: amd64\nMaintainer: cluster-bootstrap tests "
        f"<tests@invalid>\nSection: admin\nPriority: optional\n"
        + (f"Provides: {', '.join(package.provides)}\n" if package.provides else "")
        + (f"Depends: {', '.join(_deb_relation(r) for r in package.requires)}\n" if package.requires else "")
        + f"Description: {package.summary} for the cluster-bootstrap lab\n"
        " Prints its version and exits; stands in for the real package, which cannot be downloaded here.\n")
    package.stage(root)
    deb = work / f"{package.name}_{version}_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
                   check=True, capture_output=True)
    return deb


def _deb_relation(relation: str) -> str:
    """An RPM relation in apt's syntax: `name = 1.2-1` -> `name (= 1.2-1)`, `name` as it is."""
    name, *rest = relation.split()
    return f"{name} ({rest[0]} {rest[1]})" if rest else name


def _packages_entry(deb: Path) -> str:
    control = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True).stdout
    data = deb.read_bytes()
    return (control.rstrip("\n") + f"\nFilename: ./{deb.name}\nSize: {len(data)}\n"
            f"MD5sum: {hashlib.md5(data).hexdigest()}\nSHA256: {hashlib.sha256(data).hexdigest()}\n")


def _release(directory: Path, files: list[str], label: str) -> str:
    lines = ["Origin: cluster-bootstrap lab", f"Label: {label}", "Architectures: amd64",
             f"Date: {formatdate(usegmt=True)}", "SHA256:"]
    for name in files:
        data = (directory / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    return "\n".join(lines) + "\n"


def _publish_flat_apt_repo(repo: Path, debs: list[Path], key: SigningKey, label: str) -> None:
    """A flat apt repository (`deb URI /`, as pkgs.k8s.io's and NVIDIA's are): the packages, Packages(.gz), a
    Release signed inline (InRelease) and detached (Release.gpg), and the key beside them (Release.key)."""
    repo.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        shutil.copy2(deb, repo / deb.name)
    packages = "\n".join(_packages_entry(repo / deb.name) for deb in debs)
    (repo / "Packages").write_text(packages)
    (repo / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
    (repo / "Release").write_text(_release(repo, ["Packages", "Packages.gz"], label))
    key.export(repo / "Release.key")
    key.run("--clearsign", "--output", str(repo / "InRelease"), str(repo / "Release"))
    key.detach_sign(repo / "Release", ".gpg")


def build_kubernetes_repo(dest: Path, minor: str = KUBERNETES_DEFAULT, patch: int = 0) -> Path:
    """Write `<dest>/kubernetes/v<minor>/deb/` (signed flat repository + Release.key); returns `<dest>/kubernetes`."""
    return build_kubernetes_repos(dest, {minor: (patch,)})


def build_kubernetes_repos(dest: Path, published: dict[str, tuple[int, ...]]) -> Path:
    """One repository per minor, as pkgs.k8s.io lays them out (`<dest>/kubernetes/v<minor>/deb/`), each with the
    packages of the patches `published` names for it, all signed by one key (pkgs.k8s.io signs every minor's
    repository with the same key); returns `<dest>/kubernetes`."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        with signing_key(work, "cluster-bootstrap lab repository <tests@invalid>") as key:
            for minor, patches in published.items():
                repo = dest / "kubernetes" / f"v{minor}" / "deb"
                repo.mkdir(parents=True)
                debs = []
                for number in patches:
                    patch_work = work / f"{minor}.{number}"
                    patch_work.mkdir()
                    debs += [_build_deb(patch_work, package) for package in kubernetes_packages(minor, number, "deb")]
                _publish_flat_apt_repo(repo, debs, key, "kubernetes placeholders")
    _world_readable(dest)
    return dest / "kubernetes"


# ---------------------------------------------------------------------------------------------- Debian payloads

DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEB_CACHE = CACHE_DIR / "debs"


def debian_debs(suite: str, names: list[str]) -> dict[str, Path]:
    """The suite's current .deb of each package, downloaded from the Debian mirror once and kept in the cache."""
    directory = DEB_CACHE / suite
    directory.mkdir(parents=True, exist_ok=True)
    with _flock(DEB_CACHE / f"{suite}.lock"):
        missing = [name for name in names if not list(directory.glob(f"{name}_*.deb"))]
        if missing:
            state = DEB_CACHE / f"apt-{suite}"
            for sub in ("lists/partial", "archives/partial"):
                (state / sub).mkdir(parents=True, exist_ok=True)
            (state / "sources.list").write_text(f"deb {DEBIAN_MIRROR} {suite} main\n")
            # A private apt state for this one suite: the host's own sources and lists are not touched.
            options = [f"-oDir::Etc::SourceList={state / 'sources.list'}", "-oDir::Etc::SourceParts=/dev/null",
                       f"-oDir::State::Lists={state / 'lists'}", f"-oDir::Cache={state}",
                       "-oAcquire::Check-Valid-Until=false", "-oAcquire::Check-Date=false",
                       "-oAPT::Sandbox::User=root", "-oDebug::NoLocking=1"]
            for args in (["update"], ["download", *missing]):
                result = subprocess.run(["apt-get", "-q", *options, *args], cwd=directory, capture_output=True,
                                        text=True, timeout=600)
                if result.returncode != 0:
                    raise LabError(f"apt-get {args[0]} ({suite}) failed: {result.stderr.strip()[-300:]}")
            shutil.rmtree(state)  # the package lists (tens of MB) are not needed once the .debs are here
    return {name: sorted(directory.glob(f"{name}_*.deb"))[-1] for name in names}


def _deb_version(deb: Path) -> str:
    """The upstream part of a Debian version: 2.1.9+ds1-5 -> 2.1.9."""
    version = deb.name.split("_")[1].split(":")[-1]
    return version.split("~")[0].split("+")[0].split("-")[0]


def _extract(deb: Path, work: Path) -> Path:
    root = work / deb.stem
    if not root.is_dir():
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, capture_output=True)
    return root


# ---------------------------------------------------------------------------------------------- RPM packages

# Docker's own units and configuration for containerd.io and docker-ce (the Debian binaries run under them).
CONTAINERD_UNIT = """[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target local-fs.target dbus.service

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
"""
# As containerd.io ships it: the CRI plugin is off until the product writes its own configuration.
CONTAINERD_IO_CONFIG = 'disabled_plugins = ["cri"]\n'
DOCKER_UNIT = """[Unit]
Description=Docker Application Container Engine
Documentation=https://docs.docker.com
After=network-online.target docker.socket firewalld.service containerd.service time-set.target
Wants=network-online.target containerd.service
Requires=docker.socket

[Service]
Type=notify
ExecStart=/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock
ExecReload=/bin/kill -s HUP $MAINPID
TimeoutStartSec=0
RestartSec=2
Restart=always
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
Delegate=yes
KillMode=process
OOMScoreAdjust=-500

[Install]
WantedBy=multi-user.target
"""
DOCKER_SOCKET = """[Unit]
Description=Docker Socket for the API

[Socket]
ListenStream=/run/docker.sock
SocketMode=0660
SocketUser=root
SocketGroup=docker

[Install]
WantedBy=sockets.target
"""
# Rocky's chronyd.service, around Debian's chronyd (which is already on a RHEL-shaped node); Debian's build
# needs the runtime and state directories Debian's own unit creates.
CHRONYD_UNIT = """[Unit]
Description=NTP client/server
Documentation=man:chronyd(8) man:chrony.conf(5)
Conflicts=ntpd.service systemd-timesyncd.service
ConditionCapability=CAP_SYS_TIME

[Service]
Type=forking
PIDFile=/run/chrony/chronyd.pid
EnvironmentFile=-/etc/sysconfig/chronyd
ExecStart=/usr/sbin/chronyd $OPTIONS
RuntimeDirectory=chrony
RuntimeDirectoryMode=0750
StateDirectory=chrony

[Install]
WantedBy=multi-user.target
"""
UNIT_DIR = "/usr/lib/systemd/system"
RPM_RELEASE = "1.cblab"
# EL8's python3.12 (AppStream), as the product sees it: /usr/bin/python3.12, a Python without the dnf bindings
# (those are platform-python's). Here: a venv of the node's Debian Python (no system site packages, so no dnf and
# no selinux), made when the package is installed, behind Rocky's path.
PYTHON312_VENV = "/usr/lib/cblab/python3.12"
PYTHON312_WRAPPER = f"""#!/bin/sh
# python3.12 stand-in (cluster-bootstrap lab): a Python without the dnf bindings, as EL8's is.
exec {PYTHON312_VENV}/bin/python3 "$@"
"""


def _cli_plugin(name: str, version: str) -> str:
    # The docker CLI asks every plugin for its metadata; a plain placeholder would be listed as broken.
    return (f"#!/bin/sh\nif [ \"$1\" = docker-cli-plugin-metadata ]; then\n"
            f"  echo '{{\"SchemaVersion\":\"0.1.0\",\"Vendor\":\"cluster-bootstrap lab\",\"Version\":\"v{version}\","
            f"\"ShortDescription\":\"{name} placeholder\"}}'\n  exit 0\nfi\necho '{name} placeholder v{version}'\n")


def _copy_binaries(package: Package, root: Path, sources: list[str], dest_dir: str) -> Package:
    for source in sources:
        path = root / source.lstrip("/")
        package.files[f"{dest_dir}/{path.name}"] = (path.read_bytes(), 0o755)
    return package


def containerd_io(containerd_deb: Path, runc_deb: Path, work: Path) -> Package:
    """containerd.io around Debian's containerd and runc (the versions are the Debian containerd's)."""
    containerd_root, runc_root = _extract(containerd_deb, work), _extract(runc_deb, work)
    binaries = sorted(f"/usr/bin/{p.name}" for p in (containerd_root / "usr/bin").iterdir()
                      if p.name.startswith(("containerd", "ctr")))
    package = Package("containerd.io", _deb_version(containerd_deb), RPM_RELEASE,
                      f"containerd runtime (Debian's containerd {_deb_version(containerd_deb)} and runc "
                      f"{_deb_version(runc_deb)})", provides=["containerd", "runc"], arch="x86_64")
    _copy_binaries(package, containerd_root, binaries, "/usr/bin")
    _copy_binaries(package, runc_root, ["/usr/sbin/runc"], "/usr/bin")
    package.add_text(f"{UNIT_DIR}/containerd.service", CONTAINERD_UNIT)
    package.add_text("/etc/containerd/config.toml", CONTAINERD_IO_CONFIG)
    return package


def docker_ce(dockerd_deb: Path, cli_deb: Path, work: Path) -> list[Package]:
    """docker-ce and docker-ce-cli around Debian's dockerd and docker; the CLI plugins are placeholders."""
    engine_root, cli_root = _extract(dockerd_deb, work), _extract(cli_deb, work)
    version = _deb_version(dockerd_deb)
    engine = Package("docker-ce", version, RPM_RELEASE, f"Docker engine (Debian's dockerd {version})",
                     requires=["containerd.io >= 1.7", "docker-ce-cli", "iptables"], arch="x86_64",
                     pre="getent group docker >/dev/null || groupadd -r docker")
    _copy_binaries(engine, engine_root, ["/usr/sbin/dockerd", "/usr/sbin/docker-proxy"], "/usr/bin")
    engine.add_text(f"{UNIT_DIR}/docker.service", DOCKER_UNIT).add_text(f"{UNIT_DIR}/docker.socket", DOCKER_SOCKET)
    cli = _copy_binaries(Package("docker-ce-cli", version, RPM_RELEASE, f"Docker CLI (Debian's docker {version})",
                                 arch="x86_64"), cli_root, ["/usr/bin/docker"], "/usr/bin")
    plugins = [Package(name, plugin_version, RPM_RELEASE, f"{plugin} placeholder").add_text(
        f"/usr/libexec/docker/cli-plugins/{plugin}", _cli_plugin(plugin, plugin_version), 0o755)
        for name, plugin, plugin_version in (("docker-buildx-plugin", "docker-buildx", "0.19.3"),
                                             ("docker-compose-plugin", "docker-compose", "2.32.1"))]
    return [engine, cli, *plugins]


def os_packages(kernel_release: str) -> dict[str, list[Package]]:
    """Stand-ins for the Rocky packages the product installs from the OS repositories, by repository. Their
    binaries are Debian's, already on a RHEL-shaped node; a stand-in adds what Rocky's package adds."""
    def named(name: str, version: str = "1.0", **kwargs: object) -> Package:
        return Package(name, version, RPM_RELEASE, f"{name} stand-in (the binaries are Debian's)",
                       **kwargs)  # type: ignore[arg-type]

    chrony = named("chrony", "4.6.1").add_text(f"{UNIT_DIR}/chronyd.service", CHRONYD_UNIT) \
        .add_text("/etc/sysconfig/chronyd", '# Command-line options for chronyd\nOPTIONS="-F 2"\n')
    # What Rocky's base system provides that every scriptlet needs (/bin/sh): a RHEL-family node has it installed
    # (the lab's rpm database holds a file-less stand-in of the same name), and a bundle resolved in an empty
    # install root takes it from here.
    shell = named("bash", "5.1.8", provides=["/bin/sh"])
    base_os = [chrony, shell, *(named(name) for name in (
        "conntrack-tools", "ethtool", "iproute-tc", "ipset", "iptables-nft", "iptables", "iptables-ebtables",
        "python3-libselinux", "python3-dnf-plugin-versionlock", "python3-firewall", "firewalld"))]
    python312 = named("python3.12", "3.12.8", post=f"/usr/bin/python3 -m venv --without-pip {PYTHON312_VENV}",
                      postun=f'[ "$1" != 0 ] || rm -rf {PYTHON312_VENV}') \
        .add_text("/usr/bin/python3.12", PYTHON312_WRAPPER, 0o755)
    # The NVIDIA driver's prerequisites: headers for the running kernel (this host's, not an EL kernel), and the
    # archive's current kernel-devel (what an offline bundle carries, not knowing the nodes' kernel).
    app_stream = [named("socat", "1.7.4.1"), named("kernel-headers", "5.14.0"),
                  named(f"kernel-devel-{kernel_release}", "5.14.0"), named("kernel-devel", "5.14.0"), python312]
    # EPEL's release package, without EPEL's repository file: EPEL cannot be reached from the lab.
    extras = [named("epel-release", "9")]
    return {"BaseOS": base_os, "AppStream": app_stream, "extras": extras}


def nvidia_packages(driver_branch: str, toolkit_version: str) -> tuple[list[Package], list[Package]]:
    """Placeholders for NVIDIA's CUDA repository (the driver, as the dnf module stream <branch>-dkms, and
    cuda-drivers) and for the container toolkit repository."""
    driver_version = f"{driver_branch}.57.01"
    driver = [Package("nvidia-driver", driver_version, RPM_RELEASE, "NVIDIA driver placeholder",
                      requires=["nvidia-driver-libs", "kmod-nvidia-latest-dkms"]),
              Package("nvidia-driver-libs", driver_version, RPM_RELEASE, "NVIDIA driver libraries placeholder"),
              Package("nvidia-driver-cuda", driver_version, RPM_RELEASE, "nvidia-smi placeholder")
              .add_placeholder_binaries("/usr/bin/nvidia-smi"),
              Package("kmod-nvidia-latest-dkms", driver_version, RPM_RELEASE, "NVIDIA kernel module placeholder"),
              Package("cuda-drivers", driver_version, RPM_RELEASE, "CUDA driver metapackage placeholder",
                      requires=["nvidia-driver", "nvidia-driver-cuda"])]
    toolkit = [Package(name, toolkit_version, "1", f"{name} placeholder") for name in (
        "nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
        "libnvidia-container1")]
    toolkit[0].requires += [f"nvidia-container-toolkit-base = {toolkit_version}-1",
                            f"libnvidia-container-tools = {toolkit_version}-1"]
    toolkit[1].add_placeholder_binaries("/usr/bin/nvidia-ctk")
    toolkit[2].requires.append(f"libnvidia-container1 = {toolkit_version}-1")
    toolkit[2].add_placeholder_binaries("/usr/bin/nvidia-container-cli")
    return driver, toolkit


def _driver_modules_yaml(driver_branch: str, packages: list[Package]) -> str:
    """modulemd for the streams the product installs (@nvidia-driver:<branch>-open for the open kernel modules,
    <branch>-dkms for the proprietary ones), each with its default profile."""
    modular = [p for p in packages if p.name != "cuda-drivers"]
    artifacts = "".join(f"      - {p.name}-0:{p.version}-{p.release}.{p.arch}\n" for p in modular)
    profile = "".join(f"        - {p.name}\n" for p in modular)
    streams = [f"{driver_branch}-open", f"{driver_branch}-dkms"]
    documents = "".join(
        f"---\ndocument: modulemd\nversion: 2\ndata:\n  name: nvidia-driver\n  stream: \"{stream}\"\n"
        f"  version: 1\n  context: cblab\n  arch: x86_64\n  summary: NVIDIA driver placeholder\n"
        f"  description: NVIDIA driver placeholder for the cluster-bootstrap lab\n"
        f"  license:\n    module: [MIT]\n  profiles:\n    default:\n      rpms:\n{profile}"
        f"  artifacts:\n    rpms:\n{artifacts}...\n" for stream in streams)
    defaults = "".join(f"    \"{stream}\": [default]\n" for stream in streams)
    return (f"{documents}---\ndocument: modulemd-defaults\nversion: 1\ndata:\n  module: nvidia-driver\n"
            f"  profiles:\n{defaults}...\n")


RPMBUILD_DEFINES = [
    # Debian's binaries are used as they are: no debuginfo packages, no stripping, no build-id links.
    "debug_package %{nil}", "__os_install_post %{nil}", "_build_id_links none",
    # Fast compression: the repository is rebuilt every session, and stays on this machine.
    "_binary_payload w1.gzdio",
]


def _build_rpm(work: Path, package: Package) -> Path:
    top = work / "rpmbuild" / f"{package.name}-{package.version}"
    stage = work / "stage" / f"{package.name}-{package.version}"
    package.stage(stage)
    config = {"/etc/containerd/config.toml", "/etc/sysconfig/chronyd"}
    files = "\n".join(f"%config(noreplace) {path}" if path in config else path for path in sorted(package.files))
    relations = "".join(f"Requires: {r}\n" for r in package.requires) + \
        "".join(f"Provides: {p}\n" for p in package.provides)
    units = any(path.startswith(UNIT_DIR) for path in package.files)
    spec = top / "SPECS" / f"{package.name}.spec"
    spec.parent.mkdir(parents=True)
    spec.write_text(
        f"Name: {package.name}\nVersion: {package.version}\nRelease: {package.release}\n"
        f"Summary: {package.summary}\nLicense: Placeholder\nBuildArch: {package.arch}\n"
        # Debian's binaries need Debian's libraries, which the node has but no RPM provides.
        f"AutoReqProv: no\n{relations}"
        f"%description\n{package.summary}; built for the cluster-bootstrap lab.\n"
        f"%install\ncp -a {stage}/. %{{buildroot}}/\n"
        + (f"%pre\n{package.pre}\n" if package.pre else "")
        + ("%post\n" + ("systemctl daemon-reload >/dev/null 2>&1 || :\n" if units else "") + package.post + "\n"
           if units or package.post else "")
        + (f"%postun\n{package.postun}\n" if package.postun else "")
        + f"%files\n{files}\n")
    result = subprocess.run(["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {top}",
                             *(arg for define in RPMBUILD_DEFINES for arg in ("--define", define)), str(spec)],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise LabError(f"rpmbuild {package.name} failed: {result.stderr.strip()[-500:]}")
    return next((top / "RPMS").rglob("*.rpm"))


@dataclass(frozen=True)
class RpmTree:
    """An `offline.source` tree of signed RPM repositories (docs/offline.md) and the key that signs all of it."""

    root: Path
    key: Path  # ASCII-armoured public key
    kube_minor: str
    releasevers: tuple[str, ...]

    def node_files(self, url: str, major: str) -> dict[str, str]:
        """What a RHEL-shaped node needs to use the tree served at url as its distribution's repositories:
        Rocky's repository files (the product's OS-mirror switch rewrites them) and their signing key."""
        key_path = f"/etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-{major}"

        def section(repo_id: str, name: str) -> str:
            return (f"[{repo_id}]\nname=Rocky Linux $releasever - {name}\n"
                    f"baseurl={url}/os/rockylinux/$releasever/{name}/$basearch/os/\n"
                    f"gpgcheck=1\nenabled=1\ncountme=1\nmetadata_expire=6h\ngpgkey=file://{key_path}\n")

        return {"/etc/yum.repos.d/rocky.repo": section("baseos", "BaseOS") + "\n" + section("appstream", "AppStream"),
                "/etc/yum.repos.d/rocky-extras.repo": section("extras", "extras"),
                key_path: self.key.read_text()}


def _rpmsign(key: SigningKey, rpms: list[Path]) -> None:
    """Sign the packages in place (rpm --addsign) with the throwaway key."""
    result = subprocess.run(
        # Debian's rpm looks for gpg2, which Debian calls gpg; the key has no passphrase.
        ["rpmsign", "--addsign", "--define", f"_gpg_name {key.uid}", "--define", f"_gpg_path {key.home}",
         "--define", f"__gpg {shutil.which('gpg') or 'gpg'}",
         "--define", "_gpg_sign_cmd_extra_args --batch --pinentry-mode loopback", *map(str, rpms)],
        capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise LabError(f"rpmsign failed: {result.stderr.strip()[-500:]}")


def build_kubernetes_rpm_repos(dest: Path, published: dict[str, tuple[int, ...]]) -> Path:
    """The RPM side of build_kubernetes_repos: `<dest>/kubernetes/v<minor>/rpm/` for each minor, with the packages
    of the patches `published` names for it (kubeadm, kubelet, kubectl, cri-tools, as pkgs.k8s.io's), every package
    signed and every repomd.xml signed, the key as repodata/repomd.xml.key (where the roles fetch it), one key for
    every minor; returns `<dest>/kubernetes`."""
    missing = [tool for tool in RPM_TOOLS if shutil.which(tool) is None]
    if missing:
        raise LabError(f"the lab's RPM repositories need {', '.join(missing)} (apt-get install rpm createrepo-c)")
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        built = {minor: [_build_rpm(work / f"{minor}.{patch}", package) for patch in patches
                         for package in kubernetes_packages(minor, patch, "rpm")]
                 for minor, patches in published.items()}
        with signing_key(work, "cluster-bootstrap lab Kubernetes RPM repositories <tests@invalid>") as key:
            _rpmsign(key, [rpm for rpms in built.values() for rpm in rpms])
            for minor, rpms in built.items():
                _publish_repo(dest / "kubernetes" / f"v{minor}" / "rpm", rpms, key)
    _world_readable(dest)
    return dest / "kubernetes"


def _publish_repo(directory: Path, rpms: list[Path], key: SigningKey, modules: str | None = None) -> None:
    """A dnf repository: the packages, createrepo_c's metadata, repomd.xml signed (.asc) and the key (.key)."""
    directory.mkdir(parents=True, exist_ok=True)
    for rpm in rpms:
        target = directory / rpm.name
        if not target.exists():
            os.link(rpm, target)  # one copy on disk however many trees list it
    subprocess.run(["createrepo_c", "--quiet", str(directory)], check=True, capture_output=True, timeout=300)
    if modules:
        (directory / "modules.yaml").write_text(modules)
        subprocess.run(["modifyrepo_c", "--mdtype=modules", str(directory / "modules.yaml"),
                        str(directory / "repodata")], check=True, capture_output=True, timeout=120)
    repomd = directory / "repodata" / "repomd.xml"
    key.detach_sign(repomd, ".asc")
    key.export(directory / "repodata" / "repomd.xml.key")


def build_rpm_tree(dest: Path, *, kube_minor: str = KUBERNETES_DEFAULT, kube_patch: int = 0,
                   driver_branch: str = DRIVER_BRANCH_DEFAULT, toolkit_version: str = CONTAINER_TOOLKIT_DEFAULT,
                   kernel_release: str | None = None,
                   releasevers: tuple[str, ...] = ("8", "9"), nvidia_apt: tuple[str, ...] = ()) -> RpmTree:
    """Build the RPM side of the offline layout under dest (about 150 MB; each package file is stored once
    and hard-linked into every repository that lists it):

        os/rockylinux/<rv>/{BaseOS,AppStream,extras}/x86_64/os/   stand-ins for Rocky's own packages
        docker/<centos|rhel>/<rv>/x86_64/stable/, .../gpg         containerd.io 2.x and 1.6, docker-ce(-cli), plugins
        kubernetes/v<minor>/rpm/                                    kubeadm, kubelet, kubectl, cri-tools
        nvidia-cuda/rhel<rv>/x86_64/ (+ D42D0685.pub)              driver module stream, cuda-drivers
        nvidia-container-toolkit/rpm/x86_64/, .../gpgkey           the toolkit

    Every package is signed (rpm --addsign) and every repomd.xml detached-signed, by one throwaway key that is
    also published under each name the product's roles fetch it from. `nvidia_apt` (CUDA directories: debian12,
    ubuntu2204, ...) adds NVIDIA's apt repositories beside the RPM ones (build_nvidia_apt_repos), signed by the
    same key, as upstream signs the toolkit's rpm and deb channels with one key."""
    missing = [tool for tool in RPM_TOOLS if shutil.which(tool) is None]
    if missing:
        raise LabError(f"the lab's RPM repositories need {', '.join(missing)} (apt-get install rpm createrepo-c)")
    dest.mkdir(parents=True)
    kernel_release = kernel_release or os.uname().release
    bookworm = debian_debs("bookworm", ["containerd", "runc"])
    sid = debian_debs("sid", ["containerd", "docker.io", "docker-cli"])
    with tempfile.TemporaryDirectory(dir=dest.parent) as scratch:
        work = Path(scratch)
        # sid's containerd 2 runs on bookworm's glibc, sid's runc does not (it needs glibc 2.38): both
        # containerd.io versions carry bookworm's runc. dnf picks 2.x; `containerd.io-1.6*` picks the other.
        docker = [containerd_io(sid["containerd"], bookworm["runc"], work),
                  containerd_io(bookworm["containerd"], bookworm["runc"], work),
                  *docker_ce(sid["docker.io"], sid["docker-cli"], work)]
        driver, toolkit = nvidia_packages(driver_branch, toolkit_version)
        groups = {"docker": docker, "kubernetes": kubernetes_packages(kube_minor, kube_patch, "rpm"),
                  "driver": driver, "toolkit": toolkit,
                  **{f"os-{repo}": packages for repo, packages in os_packages(kernel_release).items()}}
        built = {group: [_build_rpm(work, package) for package in packages] for group, packages in groups.items()}
        with signing_key(work, "cluster-bootstrap lab RPM repositories <tests@invalid>") as key:
            _rpmsign(key, [rpm for rpms in built.values() for rpm in rpms])
            for rv in releasevers:
                for repo in ("BaseOS", "AppStream", "extras"):
                    _publish_repo(dest / f"os/rockylinux/{rv}/{repo}/x86_64/os", built[f"os-{repo}"], key)
                # Docker's two RPM layouts: centos/<release> (CentOS Stream) and rhel/<release> (RHEL and rebuilds).
                for layout in ("centos", "rhel"):
                    _publish_repo(dest / f"docker/{layout}/{rv}/x86_64/stable", built["docker"], key)
                cuda = dest / f"nvidia-cuda/rhel{rv}/x86_64"
                _publish_repo(cuda, built["driver"], key, _driver_modules_yaml(driver_branch, driver))
                key.export(cuda / "D42D0685.pub")
            _publish_repo(dest / f"kubernetes/v{kube_minor}/rpm", built["kubernetes"], key)
            _publish_repo(dest / "nvidia-container-toolkit/rpm/x86_64", built["toolkit"], key)
            key.export(dest / "docker/centos/gpg")
            key.export(dest / "docker/rhel/gpg")
            key.export(dest / "nvidia-container-toolkit/gpgkey")
            key.export(dest / "RPM-GPG-KEY-cblab")
            if nvidia_apt:
                build_nvidia_apt_repos(dest, distributions=nvidia_apt, driver_branch=driver_branch,
                                       toolkit_version=toolkit_version, kernel_release=kernel_release, key=key)
    _world_readable(dest)
    return RpmTree(dest, dest / "RPM-GPG-KEY-cblab", kube_minor, releasevers)


def build_docker_apt_repo(dest: Path, codename: str = "bookworm") -> Path:
    """`<dest>/docker/debian/` in Docker's apt layout (dists/<codename>/stable/binary-amd64/, pool/stable/, the key
    as gpg beside them), holding containerd.io around sid's containerd 2 and bookworm's runc (real: containerd runs
    and pulls images on a node), signed by a throwaway key; returns `<dest>/docker`."""
    repo = dest / "docker" / "debian"
    bookworm = debian_debs("bookworm", ["runc"])
    sid = debian_debs("sid", ["containerd"])
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        deb = _build_deb(work, containerd_io(sid["containerd"], bookworm["runc"], work))
        pool = repo / "pool" / "stable" / "c" / "containerd.io"
        pool.mkdir(parents=True)
        shutil.copy2(deb, pool / deb.name)
        index = _packages_entry(pool / deb.name).replace(f"Filename: ./{deb.name}",
                                                         f"Filename: pool/stable/c/containerd.io/{deb.name}")
        dists = repo / "dists" / codename
        binary = dists / "stable" / "binary-amd64"
        binary.mkdir(parents=True)
        (binary / "Packages").write_text(index)
        (binary / "Packages.gz").write_bytes(gzip.compress(index.encode(), mtime=0))
        lines = ["Origin: cluster-bootstrap lab", f"Suite: {codename}", f"Codename: {codename}",
                 "Components: stable", "Architectures: amd64", f"Date: {formatdate(usegmt=True)}", "SHA256:"]
        for name in ("stable/binary-amd64/Packages", "stable/binary-amd64/Packages.gz"):
            data = (dists / name).read_bytes()
            lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
        (dists / "Release").write_text("\n".join(lines) + "\n")
        with signing_key(work, "cluster-bootstrap lab Docker stand-in <tests@invalid>") as key:
            key.export(repo / "gpg")
            key.run("--clearsign", "--output", str(dists / "InRelease"), str(dists / "Release"))
    _world_readable(dest)
    return dest / "docker"


def nvidia_deb_driver_packages(driver_branch: str) -> list[Package]:
    """Placeholders for what NVIDIA's Debian/Ubuntu CUDA repository holds of a driver branch, as the nvidia role
    installs it: `nvidia-open-<branch>` (the open kernel modules) or `cuda-drivers-<branch>` (the proprietary
    ones), each pulling its DKMS kernel module package and the userspace with nvidia-smi. The DKMS packages build
    nothing: building and loading the kernel module needs NVIDIA hardware and the node's real kernel headers."""
    version = f"{driver_branch}.57.01"

    def dkms(name: str) -> Package:
        return Package(name, version, "1", f"{name} placeholder").add_text(
            f"/usr/share/doc/{name}/README.cblab", "The kernel module DKMS would build here: it needs NVIDIA hardware "
            "and the running kernel's real headers, which the lab has not.\n")

    userspace = Package("nvidia-driver-cuda", version, "1", "NVIDIA driver userspace placeholder") \
        .add_placeholder_binaries("/usr/bin/nvidia-smi")
    return [dkms("nvidia-kernel-open-dkms"), dkms("nvidia-kernel-dkms"), userspace,
            Package(f"nvidia-open-{driver_branch}", version, "1", "NVIDIA open driver metapackage placeholder",
                    requires=[f"nvidia-kernel-open-dkms = {version}-1", f"nvidia-driver-cuda = {version}-1"]),
            Package(f"cuda-drivers-{driver_branch}", version, "1", "CUDA driver metapackage placeholder",
                    requires=[f"nvidia-kernel-dkms = {version}-1", f"nvidia-driver-cuda = {version}-1"])]


def _cuda_key_name(distribution: str) -> str:
    """The key file NVIDIA publishes in a CUDA repository directory (the platform table names it)."""
    return next(row.cuda.key for row in PLATFORMS if isinstance(row, Platform) and row.cuda
                and row.cuda.directory == distribution)


def build_nvidia_apt_repos(dest: Path, *, distributions: tuple[str, ...] = ("debian12",),
                           driver_branch: str = DRIVER_BRANCH_DEFAULT,
                           toolkit_version: str = CONTAINER_TOOLKIT_DEFAULT,
                           kernel_release: str | None = None, key: SigningKey | None = None) -> Path:
    """NVIDIA's Debian/Ubuntu repositories in their own layout, signed (by `key`, or a throwaway key of their own),
    as a mirror of developer.download.nvidia.com and of nvidia.github.io/libnvidia-container would hold them:

        nvidia-cuda/<distribution>/x86_64/     flat (`deb URI /`): the driver branch's placeholders
                                                (nvidia_deb_driver_packages), the key under the table's file name
        nvidia-container-toolkit/deb/amd64/    flat: the toolkit's four packages at <toolkit_version>-1
        nvidia-container-toolkit/gpgkey        the toolkit's key, beside the channel (`stable` links here, as
                                                upstream's .../stable/deb/amd64/ with .../gpgkey one level up)
        kernel-headers/                        flat: linux-headers-<kernel> for this host's kernel, which is not a
                                                Debian kernel and so has none in Debian's archive (a placeholder)

    Returns `dest`."""
    kernel_release = kernel_release or os.uname().release
    toolkit = nvidia_packages(driver_branch, toolkit_version)[1]
    headers = Package(f"linux-headers-{kernel_release}", "6.1.0", "1", "kernel headers placeholder").add_text(
        f"/usr/src/linux-headers-{kernel_release}/README.cblab", "Placeholder: no headers for this host's kernel.\n")
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        work = Path(scratch)
        key = key or stack.enter_context(signing_key(work, "cluster-bootstrap lab NVIDIA stand-in <tests@invalid>"))
        driver_debs = [_build_deb(work, package) for package in nvidia_deb_driver_packages(driver_branch)]
        for distribution in distributions:
            repo = dest / "nvidia-cuda" / distribution / "x86_64"
            _publish_flat_apt_repo(repo, driver_debs, key, "NVIDIA CUDA placeholders")
            key.export(repo / _cuda_key_name(distribution))
        toolkit_dir = dest / "nvidia-container-toolkit"
        _publish_flat_apt_repo(toolkit_dir / "deb" / "amd64", [_build_deb(work, package) for package in toolkit],
                               key, "NVIDIA container toolkit placeholders")
        key.export(toolkit_dir / "gpgkey")
        if not (toolkit_dir / "stable").exists():
            (toolkit_dir / "stable").symlink_to(".")
        _publish_flat_apt_repo(dest / "kernel-headers", [_build_deb(work, headers)], key, "kernel headers placeholder")
    _world_readable(dest)
    return dest


# Where the lab puts the placeholder Kubernetes repository on its nodes (a file:// offline source).
OFFLINE_DIR = "/srv/cb-offline"


def push_kubernetes_repo(lab: Lab, tmp: Path, minor: str = KUBERNETES_DEFAULT) -> None:
    """Build the placeholder repository once and copy it to every node (a local directory, file://)."""
    build_kubernetes_repo(tmp, minor)
    for node in lab.nodes:
        archive = subprocess.run(["tar", "-C", str(tmp), "-cf", "-", "."], check=True, capture_output=True).stdout
        ssh = [*node.ssh_command("root"), f"mkdir -p {OFFLINE_DIR} && tar -C {OFFLINE_DIR} -xf -"]
        subprocess.run(ssh, input=archive, check=True, capture_output=True, timeout=60)


def serve_kubernetes_repo(lab: Lab, tmp: Path, minor: str = KUBERNETES_DEFAULT) -> str:
    """Build the placeholder repository and serve it from the lab's hub over HTTP (a mirror stand-in); returns
    the base URL for mirrors.kubernetes_repo."""
    build_kubernetes_repo(tmp, minor)
    return f"{lab.serve_mirror(tmp).url}/kubernetes"


def write_config(lab: Lab, path: Path, **sections: dict[str, object]) -> Path:
    """The lab's cluster.yaml with `sections` merged in, written to `path`."""
    data = yaml.safe_load(lab.config_path.read_text()) or {}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    path.write_text(yaml.safe_dump(data))
    return path
