"""The platform table: every node operating system cluster-bootstrap knows, and what it knows about each.

One row per OS id (os-release `ID`) and release. A `Platform` is a system `prepare` manages ("supported", or
"warned": it runs, with a reason shown); a `Refusal` is one it refuses, with the reason and the way out. Each
Platform holds the OS facts the rest of the product needs: its family (which role variables apply), package
manager, the Python interpreter Ansible runs on it and its version (the oldest, NODE_PYTHON_FLOOR, is what every
Python file that runs on a node is held to), the package that brings it when the distribution does not install it,
the controller's ansible-core it needs, its x86-64 baseline, and the names of the repository layouts
its packages come from (Docker, NVIDIA CUDA, the OS mirror). Component versions live in their own table.

Preflight judges nodes with it (`platform_for`, `controller_refusal`, `choose_python`, `missing_cpu_flags`), the
roles receive it as `cb_platforms` (`role_rows`) and find their node's row by what Ansible calls the
distribution, and docs/os-support.md and the Vagrant lab's OS choices are tested against it.

Where a fact comes from is said beside it: [read] in the distribution's or vendor's own files or docs (as stored
for this project), [ansible] read in ansible-core's fact code, [inferred] derived, with the reason.
"""
from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Support = Literal["supported", "warned"]
Family = Literal["Debian", "RedHat"]
PackageManager = Literal["apt", "dnf"]

# The x86-64 micro-architecture levels (psABI) as /proc/cpuinfo names their CPU features: SSE3 is "pni" there
# and LZCNT is "abm". RHEL 10 and its rebuilds are built for x86-64-v3 and do not start on older CPUs.
X86_64_LEVEL_FLAGS: dict[int, frozenset[str]] = {
    2: frozenset({"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}),
}
X86_64_LEVEL_FLAGS[3] = X86_64_LEVEL_FLAGS[2] | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}

# What every supported Python must reach to run ansible-core's modules (2.21 supports targets from 3.9).
MIN_NODE_PYTHON = (3, 9)
# The interpreters ansible-core's dnf module tries, in order, when the one running it cannot import dnf (2.19:
# these; 2.21: the module's own first) [ansible: modules/dnf.py]; it respawns (2.19) or runs its package step
# (2.21) under the first that can.
ANSIBLE_DNF_PROBE = ("/usr/libexec/platform-python", "/usr/bin/python3", "/usr/bin/python")
# The controller that manages every supported system (it needs Python >= 3.12 on the machine that runs it).
NEWEST_CONTROLLER = (2, 21)


@dataclass(frozen=True)
class CudaRepo:
    """NVIDIA's CUDA repository for a release: its directory under the CUDA repository base, and the key file
    published in it (the keys differ between repositories)."""

    directory: str
    key: str
    # Whether the repository signs its metadata (repodata/repomd.xml.asc), so dnf may check it (repo_gpgcheck).
    # NVIDIA's own cuda-<distro>.repo files set only gpgcheck=1 (package signatures) [read], so none is assumed;
    # apt repositories always carry a signed InRelease, which apt checks whatever this says.
    signed_metadata: bool = False


@dataclass(frozen=True)
class OsMirror:
    """How the distribution's own repositories map onto a mirror (mirrors.os_repo, the cn profile, offline.source):
    its repository files, the mirror's directory for the distribution (<base>/<path>/$releasever/<Repo>/$basearch/os/)
    and the repository ids and directory names of the two repositories every node installs from."""

    files: str
    path: str
    repos: tuple[tuple[str, str], ...] = (("baseos", "BaseOS"), ("appstream", "AppStream"))
    # The directories of the other repositories the distribution's own repository files enable, which os_prep
    # moves to the mirror too: dnf stops on any enabled repository it cannot read (skip_if_unavailable=False), so
    # an offline source carries their metadata as well [read: Rocky's and AlmaLinux's rocky-extras.repo and
    # almalinux-extras.repo are enabled].
    also_enabled: tuple[str, ...] = ("extras",)


@dataclass(frozen=True)
class Platform:
    os_id: str  # os-release ID (compared without case: openEuler spells its own in mixed case)
    releases: tuple[str, ...]  # VERSION_ID values, or their major part ("9" matches 9.5)
    name: str
    ansible_distribution: str  # what Ansible's facts call it [ansible]
    family: Family  # whose role variables apply; ansible_os_family is the distribution's own name where Ansible
    # does not know it (Anolis OS)
    package_manager: PackageManager
    package_set: str  # the name of its list of prerequisite packages in os_prep's defaults/main/<family>.yml
    docker_repo: str  # Docker's layout under mirrors.docker_repo: debian, ubuntu, or <centos|rhel>/<EL release>
    cuda: CudaRepo | None
    # Why a GPU node cannot run it, when cuda is None.
    no_cuda_reason: str = ""
    support: Support = "supported"
    note: str = ""  # for "warned": the reason and the way out
    python: str = "/usr/bin/python3"  # the interpreter Ansible runs modules with
    # Its version (major, minor) as the release ships it: every row states one, and the oldest is the floor all
    # node-side Python is held to (NODE_PYTHON_FLOOR).
    python_version: tuple[int, int] = (0, 0)
    python_package: str | None = None  # installed (dnf, before facts) when `python` is missing
    dnf_python: str | None = None  # where dnf's own bindings are, when not under `python`
    min_ansible_core: tuple[int, int] = (2, 19)
    x86_64_level: int = 1
    os_mirror: OsMirror | None = None  # None: the node keeps its own OS repositories
    epel: bool = False  # its own repositories offer epel-release (the NVIDIA driver's DKMS comes from EPEL)
    containerd: str | None = None  # the containerd (major.minor) the distribution ships; None: none
    codename: str = ""  # apt: the release's suite name (ansible_distribution_release); "" for dnf systems
    # The distribution's own archive, in the layout os_prep appends to mirrors.os_repo (<archive>/debian, ...): where
    # an offline bundle's OS packages come from when mirrors.os_repo is not set. None: no public archive has that
    # layout, so a bundle needs mirrors.os_repo.
    archive: str | None = None

    def __post_init__(self) -> None:
        if self.python_version < MIN_NODE_PYTHON:
            raise ValueError(f"{self.name}: state the version of {self.python} (python_version), at least "
                             f"{'.'.join(map(str, MIN_NODE_PYTHON))}")

    @property
    def support_level(self) -> str:
        return self.support


@dataclass(frozen=True)
class Refusal:
    os_id: str
    releases: tuple[str, ...]
    name: str
    ansible_distribution: str
    reason: str
    fix: str

    @property
    def support_level(self) -> str:
        return "refused"


Row = Platform | Refusal

# deb.debian.org serves /debian and /debian-security; archive.ubuntu.com /ubuntu (security is a suite there) [read].
DEBIAN_ARCHIVE = "http://deb.debian.org"
UBUNTU_ARCHIVE = "http://archive.ubuntu.com"
ROCKY_MIRROR = OsMirror(files="[Rr]ocky*.repo", path="rockylinux")
ALMA_MIRROR = OsMirror(files="almalinux*.repo", path="almalinux")
CUDA_RHEL8 = CudaRepo("rhel8", "D42D0685.pub")
CUDA_RHEL9 = CudaRepo("rhel9", "D42D0685.pub")
NO_EL10_DRIVER = ("NVIDIA's rhel10 repository installs a driver branch without dnf module streams (EL10 has none), "
                  "and the nvidia role installs the branch through its module stream: run GPU nodes on EL9 for now, "
                  "or set gpu=false for this node")
EL7_REASON = ("no Python 3.9 or newer for ansible-core; kernel 3.10 runs cgroup v1 only, which the kubelet refuses "
              "from Kubernetes 1.35; no containerd 2 packages")
EL7_FIX = ("reinstall the node with Rocky Linux or AlmaLinux 9 or 10 (same RPM family), or Alibaba Cloud Linux 3 / "
           "Anolis OS 8 with `mirrors.profile: cn`")
EL8_PYTHON: dict[str, Any] = {"python": "/usr/bin/python3.12", "python_version": (3, 12), "python_package": "python3.12",
              "dnf_python": "/usr/libexec/platform-python", "min_ansible_core": NEWEST_CONTROLLER}
# The default Python 3 of each EL release: RHEL 9's python3 is 3.9, RHEL 10's 3.12 [read: RHEL 9 and 10 release notes].
EL_PYTHON = {9: (3, 9), 10: (3, 12)}


def _el(os_id: str, name: str, distribution: str, el: int, release: str | None = None, **kwargs: Any) -> Platform:
    """A RHEL rebuild (or RHEL) of one EL release (its own release number when it differs): Docker's rhel tree of
    that EL release [read: docs.docker.com lists RHEL 8, 9, 10], NVIDIA's rhel<N> repository, EL8's Python 3.12 from
    AppStream (EL9 and EL10: their own python3), EL10's x86-64-v3 baseline."""
    release = release or str(el)
    defaults: dict[str, Any] = {
        "package_manager": "dnf", "package_set": "el8" if el == 8 else "el9", "docker_repo": f"rhel/{el}",
        "cuda": {8: CUDA_RHEL8, 9: CUDA_RHEL9}.get(el), "no_cuda_reason": NO_EL10_DRIVER if el == 10 else "",
        "x86_64_level": 3 if el == 10 else 1, **(EL8_PYTHON if el == 8 else {"python_version": EL_PYTHON[el]}),
    }
    return Platform(os_id, (release,), f"{name} {release}", distribution, "RedHat", **(defaults | kwargs))


PLATFORMS: tuple[Row, ...] = (
    # --- Debian and Ubuntu ------------------------------------------------------------------------------------
    Platform("debian", ("12",), "Debian 12 (bookworm)", "Debian", "Debian", "apt", "debian", "debian",
             CudaRepo("debian12", "3bf863cc.pub"), containerd="1.6", codename="bookworm", archive=DEBIAN_ARCHIVE,
             python_version=(3, 11)),
    Platform("debian", ("13",), "Debian 13 (trixie)", "Debian", "Debian", "apt", "debian", "debian",
             CudaRepo("debian13", "8793F200.pub"), containerd="1.7", codename="trixie", archive=DEBIAN_ARCHIVE,
             python_version=(3, 13)),
    # Debian testing/unstable have no VERSION_ID; Ansible reports their major version as "<codename>/sid".
    Platform("debian", ("sid",), "Debian testing/unstable", "Debian", "Debian", "apt", "debian", "debian", None,
             "NVIDIA publishes no CUDA repository for Debian testing/unstable: set gpu=false for this node",
             support="warned", containerd="2.1", codename="sid", archive=DEBIAN_ARCHIVE, python_version=(3, 14),
             note="testing/unstable changes every day, and what works today may not tomorrow: use Debian 13 for a "
                  "cluster you keep"),
    Refusal("debian", ("11",), "Debian 11 (bullseye)", "Debian",
            "its long-term support ended in August 2026, and its containerd is 1.4",
            "upgrade the node to Debian 12 or 13"),
    Platform("ubuntu", ("22.04",), "Ubuntu 22.04 LTS", "Ubuntu", "Debian", "apt", "debian", "ubuntu",
             CudaRepo("ubuntu2204", "3bf863cc.pub"), containerd="1.7", codename="jammy", archive=UBUNTU_ARCHIVE,
             python_version=(3, 10)),
    Platform("ubuntu", ("24.04",), "Ubuntu 24.04 LTS", "Ubuntu", "Debian", "apt", "debian", "ubuntu",
             CudaRepo("ubuntu2404", "3bf863cc.pub"), containerd="1.7", codename="noble", archive=UBUNTU_ARCHIVE,
             python_version=(3, 12)),
    Refusal("ubuntu", ("20.04",), "Ubuntu 20.04 LTS", "Ubuntu",
            "its standard support ended in May 2025; it boots with cgroup v1, which the kubelet refuses from "
            "Kubernetes 1.35; its Python 3.8 is older than ansible-core 2.21 manages",
            "upgrade the node to Ubuntu 22.04 or 24.04 (`do-release-upgrade`)"),
    # --- the RHEL family: 9 and 10 ------------------------------------------------------------------------------
    *(_el("rocky", "Rocky Linux", "Rocky", el, os_mirror=ROCKY_MIRROR, epel=True) for el in (9, 10)),
    _el("almalinux", "AlmaLinux", "AlmaLinux", 9, os_mirror=ALMA_MIRROR, epel=True),
    # AlmaLinux 10 is also built for x86-64-v2 (a separate variant) [read: AlmaLinux wiki].
    _el("almalinux", "AlmaLinux", "AlmaLinux", 10, os_mirror=ALMA_MIRROR, epel=True, x86_64_level=2),
    *(_el("rhel", "Red Hat Enterprise Linux", "RedHat", el) for el in (9, 10)),
    # Docker's own CentOS tree is for CentOS Stream [read: docs.docker.com lists Stream 9 and 10].
    *(_el("centos", "CentOS Stream", "CentOS", el, docker_repo=f"centos/{el}", epel=True) for el in (9, 10)),
    *(_el("ol", "Oracle Linux", "OracleLinux", el) for el in (9, 10)),
    # --- the EL8 family: Python 3.12 from AppStream, dnf on platform-python -------------------------------------
    _el("rocky", "Rocky Linux", "Rocky", 8, os_mirror=ROCKY_MIRROR, epel=True),
    _el("almalinux", "AlmaLinux", "AlmaLinux", 8, os_mirror=ALMA_MIRROR, epel=True),
    _el("rhel", "Red Hat Enterprise Linux", "RedHat", 8),
    _el("ol", "Oracle Linux", "OracleLinux", 8),
    # Anolis OS 8 names itself in /etc/redhat-release, which Ansible takes as the distribution's name, and which
    # its os_family map does not know: ansible_os_family is "Anolis" there [ansible], so the family comes from here.
    _el("anolis", "Anolis OS", "Anolis", 8),
    # Alibaba Cloud Linux 3 is built on Anolis OS 8 (PLATFORM_ID platform:al8); its $releasever is 3, so Docker's
    # tree is named by its EL release [read: Aliyun's own guides do the same].
    _el("alinux", "Alibaba Cloud Linux", "Alibaba", 8, release="3"),
    Refusal("centos", ("8",), "CentOS Linux 8 / CentOS Stream 8", "CentOS",
            "end of life (CentOS Linux 8 in December 2021, CentOS Stream 8 in May 2024): no updates, and its "
            "repositories moved to vault.centos.org", "reinstall the node with Rocky Linux or AlmaLinux 8, 9 or 10"),
    # --- openEuler: dnf, its own repositories and Python -------------------------------------------------------
    # Docker publishes no openEuler packages: Docker's EL9 tree is used (glibc 2.34 on both) [inferred, not run].
    # Its python3: 3.9.9 in 22.03 LTS, 3.11.6 in 24.03 LTS [read: openEuler's package lists].
    *(Platform("openEuler", (release,), f"openEuler {release} LTS", "openEuler", "RedHat", "dnf", "openeuler",
               "rhel/9", None, "NVIDIA publishes no CUDA repository for openEuler: set gpu=false for this node, or "
               "run GPU nodes on a RHEL-family 8 or 9 or Ubuntu release", python_version=python)
      for release, python in (("22.03", (3, 9)), ("24.03", (3, 11)))),
    # --- the end of the line: the 7 generation ----------------------------------------------------------------
    *(Refusal(os_id, ("7",), f"{name} 7", distribution, f"{ended}; {EL7_REASON}", EL7_FIX)
      for os_id, name, distribution, ended in (
          ("centos", "CentOS", "CentOS", "end of life since June 2024"),
          ("rhel", "Red Hat Enterprise Linux", "RedHat", "maintenance support ended in June 2024"),
          ("ol", "Oracle Linux", "OracleLinux", "Premier Support ended in December 2024"))),
)


def node_python_floor(rows: Iterable[Row] = PLATFORMS) -> tuple[int, int]:
    """The oldest Python any platform the table manages runs our modules with: what every node-side Python file
    (modules, module_utils, scripts shipped to nodes) must run on (tests/test_node_python.py holds them to it)."""
    return min(row.python_version for row in rows if isinstance(row, Platform))


NODE_PYTHON_FLOOR = node_python_floor()


def release_of(os_release: Mapping[str, str]) -> str:
    """The release an os-release names: VERSION_ID, or "sid" for Debian testing/unstable (which has none)."""
    version = os_release.get("VERSION_ID", "").strip()
    if version:
        return version
    if os_release.get("ID", "").lower() == "debian" and "sid" in os_release.get("PRETTY_NAME", ""):
        return "sid"
    return ""


def _matches(row: Row, os_id: str, release: str) -> bool:
    return row.os_id.lower() == os_id.lower() and any(
        release == wanted or release.startswith(wanted + ".") for wanted in row.releases)


def _release_order(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split(".") if part.isdigit())


def supported_text(rows: Iterable[Row] = PLATFORMS) -> str:
    """The supported systems in one line: "Debian 12/13, Ubuntu 22.04/24.04, Rocky Linux 8/9/10, ..."."""
    releases: dict[str, list[str]] = {}
    for row in rows:
        if isinstance(row, Platform) and row.support == "supported":
            release = row.releases[0]
            releases.setdefault(row.name.split(f" {release}")[0], []).append(release)
    return ", ".join(f"{name} {'/'.join(sorted(found, key=_release_order))}" for name, found in releases.items())


def bundle_key(platform: Platform) -> str:
    """How `bootstrap bundle build --for` names a platform: its os-release ID and first release, lower case
    (debian-12, rocky-9, ubuntu-22.04, openeuler-24.03)."""
    return f"{platform.os_id.lower()}-{platform.releases[0]}"


def platform_named(key: str) -> Platform | Refusal | None:
    """The row `bundle_key` names (debian-12, rocky-9), or None."""
    return next((row for row in PLATFORMS if isinstance(row, Platform | Refusal)
                 and f"{row.os_id.lower()}-{row.releases[0]}" == key.lower()), None)


def platform_for(os_release: Mapping[str, str]) -> Platform | Refusal:
    """The node's row, found by its os-release; a system the table does not list is refused with the list."""
    os_id, release = os_release.get("ID", ""), release_of(os_release)
    for row in PLATFORMS:
        if _matches(row, os_id, release):
            return row
    name = f"{os_release.get('NAME', os_id)} {release}".strip() or "an unknown system (no /etc/os-release)"
    return Refusal(os_id, (release,), name, "", "it is not a system cluster-bootstrap prepares",
                   f"use one of: {supported_text()}")


def _core(version: str) -> tuple[int, int]:
    parts = version.split(".")
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


CONTROLLER_FIX = "run bootstrap from .venv-modern / install with Python 3.12+"


def controller_need(platform: Platform) -> str:
    """What the platform asks of the controller, in words."""
    wanted = ".".join(map(str, platform.min_ansible_core))
    who = "EL8-family nodes" if platform.package_set == "el8" else f"{platform.name} nodes"
    return f"{who} need ansible-core {wanted} (Python >= 3.12 on this machine)"


def controller_refusal(platform: Platform, ansible_core: str) -> str | None:
    """Why this controller (its ansible-core version) cannot manage the platform, or None when it can.

    ansible-core before 2.21 runs its whole dnf module under the interpreter that has the dnf bindings, which on
    the EL8 family is platform-python 3.6, too old for it; 2.21 runs only a small 3.6-compatible script there
    (ansible/module_utils/_embed/dnf.py: "Requires-Python: >=3.6")."""
    if _core(ansible_core) >= platform.min_ansible_core:
        return None
    return f"{controller_need(platform)}, and this machine runs ansible-core {ansible_core}: {CONTROLLER_FIX}"


def missing_cpu_flags(platform: Platform, arch: str, flags: frozenset[str]) -> frozenset[str]:
    """The CPU features the platform's x86-64 level needs and the node's CPU lacks (none off x86_64, or when the
    CPU's flags could not be read)."""
    if arch != "x86_64" or platform.x86_64_level < 2 or not flags:
        return frozenset()
    return X86_64_LEVEL_FLAGS[platform.x86_64_level] - flags


# --- the node's Python -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PythonFound:
    """An interpreter the probe found on the node: its version and which of dnf and selinux it imports."""

    path: str
    version: tuple[int, int]
    modules: frozenset[str] = frozenset()


@dataclass(frozen=True)
class NodePython:
    """The interpreter Ansible runs on a node, the package that brings it when it is not there yet, and the row
    of the table it was chosen by (os-release ID and release)."""

    interpreter: str
    install: str | None = None
    os_id: str = ""
    release: str = ""

    @property
    def platform(self) -> Platform | Refusal:
        return platform_for({"ID": self.os_id, "VERSION_ID": self.release})


@dataclass(frozen=True)
class PythonProblem:
    detail: str
    fix: str


def probed_interpreters() -> tuple[str, ...]:
    """Every interpreter path the table names, and those Ansible's dnf module tries: what the probe looks for."""
    paths = {p.python for p in PLATFORMS if isinstance(p, Platform)} | \
        {p.dnf_python for p in PLATFORMS if isinstance(p, Platform) and p.dnf_python} | set(ANSIBLE_DNF_PROBE)
    return tuple(sorted(paths))


def choose_python(platform: Platform, found: Mapping[str, PythonFound]) -> NodePython | PythonProblem:
    """The node's interpreter: the platform's, installed first when the platform names its package; refused when
    it is missing or older than the floor, or when no interpreter Ansible's dnf module would try holds the dnf
    bindings (the table's dnf_python where it names one; else the node's interpreter, then ANSIBLE_DNF_PROBE)."""
    wanted = found.get(platform.python)
    row = {"os_id": platform.os_id, "release": platform.releases[0]}
    if platform.package_manager == "dnf":
        holders = (platform.dnf_python,) if platform.dnf_python else tuple(dict.fromkeys(
            (platform.python, *ANSIBLE_DNF_PROBE)))
        present = [found[path] for path in holders if path in found]
        if (present or platform.dnf_python) and not any("dnf" in python.modules for python in present):
            paths = [python.path for python in present] or [holders[0]]
            who = paths[0] if len(paths) == 1 else f"none of {', '.join(paths)}"
            return PythonProblem(f"{who} {'can' if len(paths) > 1 else 'cannot'} import dnf (dnf's Python bindings)",
                                 "install them: `dnf install python3-dnf`")
    if wanted is None:
        if platform.python_package:
            return NodePython(platform.python, install=platform.python_package, **row)
        return PythonProblem(f"no {platform.python}", "install Python 3 on the node (`apt-get install python3` or "
                                                      "`dnf install python3`)")
    needed = max(MIN_NODE_PYTHON, NODE_PYTHON_FLOOR)
    if wanted.version < needed:
        shown, floor = ".".join(map(str, wanted.version)), ".".join(map(str, needed))
        who = "ansible-core manages" if needed == MIN_NODE_PYTHON else "cluster-bootstrap's modules run on"
        return PythonProblem(f"{platform.python} is Python {shown}, older than {who} ({floor})",
                             f"install a newer Python 3 and name it with ansible_python_interpreter (or use one of: "
                             f"{supported_text()})")
    return NodePython(platform.python, **row)


def bootstrap_script(platform: Platform, install: str, os_repo: str | None) -> str:
    """The shell the prepare playbook runs (raw, before anything needs Python) to install the node's interpreter:
    nothing when it is there; otherwise dnf installs its package, from the OS mirror when one is configured and
    the platform's repositories have a known layout there (the repository files are switched to it later, by
    os_prep, which needs this Python)."""
    options = ["-y", "-q"]
    mirror = platform.os_mirror
    if os_repo and mirror:
        options += ["--disablerepo=*", f"--enablerepo={','.join(repo for repo, _ in mirror.repos)}"]
        for repo, directory in mirror.repos:
            options += [f"--setopt={repo}.baseurl={os_repo}/{mirror.path}/$releasever/{directory}/$basearch/os/",
                        f"--setopt={repo}.mirrorlist=", f"--setopt={repo}.metalink="]
    command = shlex.join(["dnf", *options, "install", install])
    return f"[ -x {shlex.quote(platform.python)} ] && exit 0; {command} && echo cb-python-installed"


# --- what the roles receive ------------------------------------------------------------------------------------

def _ansible_versions(row: Row) -> list[str]:
    """The releases as Ansible's ansible_distribution_major_version, after the last '/' ("forky/sid" -> "sid")."""
    return sorted({release.split(".")[0] for release in row.releases})


def role_rows(rows: Iterable[Row] = PLATFORMS) -> list[dict[str, Any]]:
    """The table as the roles receive it (cb_platforms): each row found by ansible_distribution and major version."""
    found = []
    for row in rows:
        common: dict[str, Any] = {"name": row.name, "os_id": row.os_id, "ansible_distribution": row.ansible_distribution,
                  "ansible_versions": _ansible_versions(row), "support": row.support_level}
        if isinstance(row, Refusal):
            found.append(common | {"reason": row.reason, "fix": row.fix})
            continue
        found.append(common | {
            "family": row.family, "package_manager": row.package_manager, "package_set": row.package_set,
            "python": row.python, "docker_repo": row.docker_repo,
            "cuda": {"directory": row.cuda.directory, "key": row.cuda.key,
                     "signed_metadata": row.cuda.signed_metadata} if row.cuda else None,
            "no_cuda_reason": row.no_cuda_reason, "epel": row.epel, "note": row.note,
            "os_mirror": {"files": row.os_mirror.files, "path": row.os_mirror.path} if row.os_mirror else None,
            "ansible_core": ".".join(map(str, row.min_ansible_core)),
            "ansible_core_need": controller_need(row), "ansible_core_fix": CONTROLLER_FIX,
        })
    return found
