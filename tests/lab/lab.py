"""Real test nodes: Debian bookworm containers under systemd-nspawn, each reachable over SSH at its own IP.

A lab owns one slot S (1..60) for its whole life and touches only names derived from it, so several test
sessions on one machine never collide:

    root netns --veth cb{S}up (10.88.S.254/30)--> netns cb{S}hub: bridge cb{S}br 10.88.S.1/25
    netns cb{S}n{i}: eth0 10.88.S.(10+i)/25, its veth peer cb{S}v{i} on the bridge, a node container inside
    iptables rules tagged `cblab-S`: nodes reach only deb.debian.org's addresses (ports 80/443), NATed.

Every node is an overlay on one cached base rootfs (built once by build-base.sh under a file lock), has its
own cgroups, machine-id, product_uuid, SSH host keys, and `root` plus a passwordless-sudo user `tester`
who log in with the lab's own key. Host keys are collected with ssh-keyscan after boot (and compared with
the keys written into the node) into the lab's known_hosts file, which cluster.yaml points at.

A lab lives exactly as long as the process that brought it up (its owner, which holds the slot's lock): a reaper
started with it, in a session of its own, waits for that lock and removes every trace of the slot the moment the
owner is gone, however it went (down(), an exception, Ctrl-C, SIGTERM or SIGKILL of a whole pytest run).

See tests/lab/README.md for the API and how to clean up by hand (`python -m tests.lab.lab down-all`).
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.lab.mirror import read_requests, write_faults

if TYPE_CHECKING:
    from tests.lab.repos import RpmTree

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
BUILD_SCRIPT = HERE / "build-base.sh"
SUPERVISOR = HERE / "supervise.sh"
# The base rootfs is kept between runs; nothing else a lab creates outlives it.
CACHE_DIR = Path(os.environ.get("CBLAB_CACHE_DIR", "/var/cache/cluster-bootstrap/lab"))
# Slot locks live on tmpfs: a machine reboot frees every slot (leftover dirs are then cleaned as stale).
LOCK_DIR = Path("/run/cluster-bootstrap-lab")
# Node overlays hold installed packages (hundreds of MB each): on disk, not on tmpfs.
WORK_DIR = Path(os.environ.get("CBLAB_WORK_DIR", "/var/tmp/cluster-bootstrap-lab"))
SLOTS = range(1, 61)
FIRST_HOST_OCTET = 11
MAX_NODES = 116  # 10.88.S.11 .. 10.88.S.126: the nodes' /25
UNUSED_HOST_OCTET = 99  # never given to a node while a lab has fewer than 89 nodes
MIRROR_HOST = "deb.debian.org"
# The comment on a sealed hub's counting rules (Lab.seal).
EGRESS_TAG = "cblab-egress"
MIRROR_PORTS = "80,443"
# RHEL-shaped labs: the hub serves the lab's RPM tree here (a name in the nodes' /etc/hosts, so that repository
# URLs read like a mirror's). Each hub has its own network namespace, so every lab can use the same port.
REPO_HOST = "lab-repo"
REPO_PORT = 8080
# python -c ADDRESS DIRECTORY: http.server without its reverse lookup of the address it binds, which in the hub
# (no DNS gets out) costs 10 s of resolver timeouts.
REPO_SERVER = f"""import functools, http.server, socketserver, sys
class Server(http.server.ThreadingHTTPServer):
    def server_bind(self):
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[2])
Server((sys.argv[1], {REPO_PORT}), handler).serve_forever()
"""
# Mirror stand-ins (serve_mirror) listen in the hub beside the RPM repository.
MIRROR_PORT = 8081
TESTER_UID = 1000
# Host-wide settings a lab needs; saved by the first lab that starts, restored when the last one ends.
HOST_SYSCTLS = {"net.ipv4.ip_forward": 1, "fs.inotify.max_user_instances": 8192}
# el8 nodes: a venv without system site packages, so without the dnf bindings (build-base.sh makes it).
EL8_PYTHON = "/opt/python3.11/bin/python3"
# RHEL-shaped nodes: where build-base.sh moved apt and dpkg (out of PATH, as on a real RHEL-family node).
DEBIAN_TOOLS = "/usr/lib/cblab/debian-bin"
REQUIRED_TOOLS = ("systemd-nspawn", "debootstrap", "ip", "iptables", "ssh", "ssh-keyscan", "ssh-keygen")


@dataclass(frozen=True)
class Flavour:
    """What a lab node is: its base (build-base.sh FLAVOUR), what Ansible must see, and how it boots."""

    name: str
    distribution: str  # ansible_distribution
    os_family: str  # ansible_os_family
    major_version: str  # ansible_distribution_major_version
    pkg_mgr: str  # ansible_pkg_mgr
    # The interpreter a test's own ad-hoc Ansible call uses (ansible_python_interpreter).
    python: str = "/usr/bin/python3"
    # Whether the lab's inventory names it. RHEL-shaped labs leave the choice to the product (preflight's probe and
    # the platform table), as a user's inventory would.
    python_in_inventory: bool = True
    # systemd 256+ refuses cgroup v1 and 258+ cannot run on it at all: such nodes get a cgroup2-only
    # /sys/fs/cgroup (this host's cgroup2 hierarchy has no controllers, so nothing there is limited).
    unified_cgroup: bool = False
    # The platform table's row it stands for (os-release ID, release) and the version (major, minor) of the Python
    # the product's modules run with there (docs/os-support.md's lab column; the lab tests assert it).
    stands_for: tuple[str, str] = ("debian", "12")
    python_version: tuple[int, int] = (3, 11)
    # Where that Python reads its sitecustomize: the lab puts MODULE_RECORDER there ("": nothing is recorded).
    python_site: str = ""

    @property
    def rhel_shaped(self) -> bool:
        """A Debian rootfs dressed as the RHEL family: dnf from the lab's RPM repository is its package manager."""
        return self.os_family == "RedHat"


FLAVOURS = {flavour.name: flavour for flavour in (
    Flavour("bookworm", "Debian", "Debian", "12", "apt", stands_for=("debian", "12"), python_version=(3, 11)),
    Flavour("trixie", "Debian", "Debian", "13", "apt", unified_cgroup=True, stands_for=("debian", "13"),
            python_version=(3, 13)),
    # Ansible reads sid's major version from /etc/debian_version.
    Flavour("sid", "Debian", "Debian", "forky/sid", "apt", unified_cgroup=True, stands_for=("debian", "sid"),
            python_version=(3, 14)),
    # /usr/bin/python3 is a real CPython 3.9 (EL9's); dnf keeps the base's Python 3.11 (build-base.sh el9_python).
    Flavour("rocky9", "Rocky", "RedHat", "9", "dnf", python_in_inventory=False, stands_for=("rocky", "9"),
            python_version=(3, 9), python_site="/etc/python3.9/sitecustomize.py"),
    # As on a real EL8 node managed by a current ansible-core: the interpreter Ansible uses is a newer Python
    # without dnf bindings; only /usr/libexec/platform-python has them. The product installs python3.12 (a stand-in
    # from the lab's RPM tree: a venv of Debian's 3.11); before that, ad-hoc calls use the base's venv of the same kind.
    Flavour("el8", "Rocky", "RedHat", "8", "dnf", python=EL8_PYTHON, python_in_inventory=False,
            stands_for=("rocky", "8"), python_version=(3, 11)),
    # bookworm dressed as Ubuntu (build-base.sh shape_ubuntu): Debian's Python 3.11 (Ubuntu's 3.10 and 3.12 are in
    # no archive this machine reaches), Ubuntu's identity and apt layout.
    Flavour("ubuntu2204", "Ubuntu", "Debian", "22", "apt", stands_for=("ubuntu", "22.04"), python_version=(3, 11)),
    Flavour("ubuntu2404", "Ubuntu", "Debian", "24", "apt", stands_for=("ubuntu", "24.04"), python_version=(3, 11)),
)}


# The node's Python records each module of the product it runs, with its own version, in MODULES_LOG: an audit hook
# (PEP 578) sees the code of every module Ansible runs, whether AnsiballZ runs it or Mitogen imports it, and a
# script run by path (the etcd snapshot timer's). Only cb_* files: the product's modules and module_utils.
MODULES_LOG = "/var/log/cblab-python-modules.log"
MODULE_RECORDER = f"""# cluster-bootstrap lab (tests/lab/lab.py): record the product's modules this interpreter runs.
import sys as _sys


def _cblab_record(event, args):
    if event == "exec":
        path = getattr(args[0], "co_filename", "")
    elif event == "cpython.run_file":
        path = str(args[0])
    else:
        return
    name = path.rsplit("/", 1)[-1]
    if name.startswith("cb_") and name.endswith(".py"):
        try:
            with open("{MODULES_LOG}", "a") as log:
                log.write("%d.%d.%d %s\\n" % (tuple(_sys.version_info[:3]) + (name[:-3],)))
        except OSError:
            pass


_sys.addaudithook(_cblab_record)
"""


def modules_run(node: LabNode) -> dict[str, set[str]]:
    """The product's modules (and module_utils) the node's Python ran since the log was last cleared, each with the
    Python versions it ran under (flavours with a python_site only)."""
    found: dict[str, set[str]] = {}
    for line in node.ssh(f"cat {MODULES_LOG} 2>/dev/null || true").stdout.splitlines():
        version, _, name = line.partition(" ")
        found.setdefault(name, set()).add(version)
    return found


def flavour_named(name: str) -> Flavour:
    try:
        return FLAVOURS[name]
    except KeyError:
        raise LabError(f"unknown lab flavour {name!r}: use one of {', '.join(FLAVOURS)}") from None


class LabError(RuntimeError):
    """The lab could not be brought up or torn down; the message says what and where."""


class SshCommandError(subprocess.CalledProcessError):
    """A command run on a node over SSH failed; str() includes the end of its output."""

    def __init__(self, node: str, returncode: int, cmd: str, stdout: str, stderr: str) -> None:
        super().__init__(returncode, cmd, stdout, stderr)
        self.node = node

    def __str__(self) -> str:
        tail = (self.stderr or self.stdout or "").strip().splitlines()[-5:]
        return f"{self.node}: `{self.cmd}` exited {self.returncode}: " + " | ".join(tail)


def unavailable_reason() -> str | None:
    """Why this machine cannot run labs, or None when it can."""
    if os.geteuid() != 0:
        return "the lab needs root (network namespaces, mounts, systemd-nspawn)"
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        return f"the lab needs {', '.join(missing)} (apt-get install systemd-container debootstrap iproute2 " \
               "iptables openssh-client)"
    return None


def _run(args: list[str], *, timeout: float = 60, check: bool = True,
         input: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, input=input)
    if check and result.returncode != 0:
        raise LabError(f"`{shlex.join(args)}` exited {result.returncode}: {result.stderr.strip()[-500:]}")
    return result


@contextmanager
def _flock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _global_lock() -> AbstractContextManager[None]:
    # Serialises slot allocation, slot-lock removal and the host-wide sysctls between sessions.
    return _flock(LOCK_DIR / "global.lock")


# ---------------------------------------------------------------------------------------------- base rootfs

def base_path(flavour: str = "bookworm") -> Path:
    """Where the base for this build script, flavour and kernel is cached (the kernel release is baked in)."""
    digest = hashlib.sha256(b"\0".join([BUILD_SCRIPT.read_bytes(), flavour.encode(), os.uname().release.encode()]))
    return CACHE_DIR / f"base-{flavour}-{digest.hexdigest()[:12]}"


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path).rstrip("/") + "/"
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        target = line.split()[1].replace("\\040", " ")
        if target == str(path) or target.startswith(prefix):
            found.append(target)
    return sorted(found, key=len, reverse=True)


def _unmount_all_under(path: Path) -> None:
    for target in _mounts_under(path):
        if _run(["umount", target], check=False).returncode != 0:
            _run(["umount", "-l", target], check=False)


def ensure_base(flavour: str = "bookworm") -> Path:
    """The cached base rootfs of a flavour, built on first use; parallel sessions wait for one build."""
    base = base_path(flavour_named(flavour).name)
    if base.is_dir():
        return base
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with _flock(base.with_name(base.name + ".lock")):
        if base.is_dir():
            return base
        partial = base.with_name(base.name + ".partial")
        if partial.exists():  # a build that was killed half-way (debootstrap may have left /proc mounted)
            _unmount_all_under(partial)
            shutil.rmtree(partial)
        log = base.with_name(base.name + ".log")
        with log.open("w") as out:
            rc = subprocess.run([str(BUILD_SCRIPT), str(partial), os.uname().release, flavour], stdout=out,
                                stderr=subprocess.STDOUT, timeout=1800).returncode
        if rc != 0:
            _unmount_all_under(partial)
            raise LabError(f"building the lab's {flavour} base rootfs failed (exit {rc}); see {log}")
        partial.rename(base)
    return base


# ---------------------------------------------------------------------------------------------- host network

def mirror_addresses() -> list[str]:
    """The IPv4 addresses deb.debian.org resolves to now: the only place nodes may reach."""
    try:
        infos = socket.getaddrinfo(MIRROR_HOST, 80, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise LabError(f"cannot resolve {MIRROR_HOST} ({exc}): nodes need it for apt") from None
    return sorted({info[4][0] for info in infos})


def _route_device(address: str) -> str:
    words = _run(["ip", "route", "get", address]).stdout.split()
    return words[words.index("dev") + 1]


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["iptables", "-w", *args], check=check)


def _remove_tagged_rules(slot: int) -> None:
    tag = re.compile(rf"--comment \"?cblab-{slot}\"?(\s|$)")
    for table in ("filter", "nat"):
        listing = _iptables("-t", table, "-S", check=False).stdout
        for rule in listing.splitlines():
            if rule.startswith("-A ") and tag.search(rule):
                _iptables("-t", table, "-D", *shlex.split(rule)[1:], check=False)


def _raise_host_sysctls() -> None:
    """Called under the global lock: remember the host's values once, then set what labs need."""
    saved = LOCK_DIR / "sysctl-saved.json"
    current = {key: int(_read_sysctl(key)) for key in HOST_SYSCTLS}
    if not saved.exists():
        saved.write_text(json.dumps(current))
    for key, wanted in HOST_SYSCTLS.items():
        if current[key] < wanted:
            _run(["sysctl", "-qw", f"{key}={wanted}"])


def _read_sysctl(key: str) -> str:
    return Path("/proc/sys", *key.split(".")).read_text().strip()


def _restore_host_sysctls_if_last() -> None:
    """Called under the global lock after a slot was released."""
    saved = LOCK_DIR / "sysctl-saved.json"
    if not saved.exists() or _held_slots():
        return
    for key, value in json.loads(saved.read_text()).items():
        _run(["sysctl", "-qw", f"{key}={value}"], check=False)
    saved.unlink()


# ---------------------------------------------------------------------------------------------- slots

def _slot_lock_path(slot: int) -> Path:
    return LOCK_DIR / f"slot-{slot}.lock"


def slot_dir(slot: int) -> Path:
    return WORK_DIR / f"slot-{slot}"


def _try_lock(path: Path) -> int | None:
    """An fd holding an exclusive flock on path, or None when someone else holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _held_slots() -> list[int]:
    held = []
    for path in LOCK_DIR.glob("slot-*.lock"):
        fd = _try_lock(path)
        if fd is None:
            held.append(int(path.stem.split("-")[1]))
        else:
            os.close(fd)
    return sorted(held)


def _slots_with_traces() -> set[int]:
    """Slots that have anything on this machine: a lock file, a work dir, a netns, a link or a rule."""
    found: set[int] = set()
    found.update(int(p.stem.split("-")[1]) for p in LOCK_DIR.glob("slot-*.lock"))
    if WORK_DIR.is_dir():
        found.update(int(p.name.split("-")[1]) for p in WORK_DIR.glob("slot-*") if p.name[5:].isdigit())
    for line in _run(["ip", "netns", "list"], check=False).stdout.splitlines():
        match = re.match(r"^cb(\d+)(hub|n\d+)\b", line)
        if match:
            found.add(int(match.group(1)))
    for line in _run(["ip", "-o", "link", "show"], check=False).stdout.splitlines():
        match = re.match(r"^\d+: cb(\d+)(up|v\d+)[@:]", line)
        if match:
            found.add(int(match.group(1)))
    for table in ("filter", "nat"):
        found.update(int(s) for s in re.findall(r"--comment \"?cblab-(\d+)\b", _iptables("-t", table, "-S",
                                                                                         check=False).stdout))
    return {slot for slot in found if slot in SLOTS}


def cleanup_stale() -> list[int]:
    """Remove every trace of labs whose owner is gone (killed, crashed, or the machine rebooted)."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    cleaned = []
    with _global_lock():
        for slot in sorted(_slots_with_traces()):
            fd = _try_lock(_slot_lock_path(slot))
            if fd is None:
                continue  # a live lab
            try:
                _remove_slot_traces(slot)
                _slot_lock_path(slot).unlink(missing_ok=True)
            finally:
                os.close(fd)
            cleaned.append(slot)
        _restore_host_sysctls_if_last()
    return cleaned


def _start_reaper(slot: int) -> subprocess.Popen[bytes]:
    """The process that ends the slot's lab when its owner ends (reap): in a session of its own, so that the signal
    that stops the owner's process group (Ctrl-C, a time limit's SIGTERM) does not reach it, holding a lock request
    of its own on the slot's lock file (a second open file, so the owner's lock does not cover it)."""
    fd = os.open(_slot_lock_path(slot), os.O_RDWR)
    try:
        with (WORK_DIR / f"reaper-{slot}.log").open("wb") as log:
            return subprocess.Popen([sys.executable, "-m", "tests.lab.lab", "reap", str(slot), "--lock-fd", str(fd)],
                                    cwd=REPO_ROOT, pass_fds=(fd,), start_new_session=True, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT)
    finally:
        os.close(fd)


def reap(slot: int, lock_fd: int) -> bool:
    """Wait for the owner of the slot to end, then remove what its lab left; True when there was a lab to end.

    The slot's lock is granted here only once every other holder has closed it: the owner (on down(), or by dying:
    the kernel closes a killed process's files) and a detached lab's holder. down() unlinks the lock file before
    it lets go, so a lock file that is no longer the one this process opened means the lab was ended already (and
    the slot may be another lab's by now): nothing is touched then."""
    fcntl.flock(lock_fd, fcntl.LOCK_EX)
    try:
        with _global_lock():
            try:
                ours = os.stat(_slot_lock_path(slot)).st_ino == os.fstat(lock_fd).st_ino
            except FileNotFoundError:
                ours = False
            if ours:
                _remove_slot_traces(slot)
                _slot_lock_path(slot).unlink(missing_ok=True)
                _restore_host_sysctls_if_last()
            return ours
    finally:
        os.close(lock_fd)


def _owner_record(slot: int) -> dict[str, object]:
    try:
        return json.loads(_slot_lock_path(slot).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def _process_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _process_mentions(pid: int, text: str) -> bool:
    try:
        return text in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False


def _cgroup_pids(cgroups: Iterable[Path]) -> set[int]:
    pids: set[int] = set()
    for top in cgroups:
        if not top.is_dir():
            continue
        for directory, _subdirs, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    pids.update(int(p) for p in (Path(directory) / "cgroup.procs").read_text().split())
                except OSError:
                    continue
    return pids


def _kill_cgroup_members(cgroups: list[Path], deadline_s: float = 10) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        pids = _cgroup_pids(cgroups)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    raise LabError(f"processes {sorted(_cgroup_pids(cgroups))} in {cgroups[0]} survive SIGKILL")


def _remove_cgroups(cgroups: Iterable[Path]) -> None:
    for top in cgroups:
        if not top.is_dir():
            continue
        for directory, _subdirs, _files in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
            for _ in range(20):
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)  # the kernel frees a cgroup a moment after its last process exits


def _recorded_cgroups(directory: Path) -> list[Path]:
    record = directory / "cgroups"
    return [Path(p) for p in record.read_text().split()] if record.is_file() else []


def _stop_node_processes(node_dir: Path, supervisor: subprocess.Popen[bytes] | None = None,
                         grace_s: float = 10) -> None:
    """Power the container off (SIGTERM to nspawn), then kill whatever is left in its cgroups."""
    if not node_dir.is_dir():
        return
    (node_dir / "stop").touch()
    pid_file, nspawn_pid_file = node_dir / "pid", node_dir / "nspawn.pid"
    supervisor_pid = int(pid_file.read_text()) if pid_file.is_file() else None

    def supervisor_alive() -> bool:
        if supervisor is not None:
            return supervisor.poll() is None
        return supervisor_pid is not None and _process_alive(supervisor_pid) and \
            _process_mentions(supervisor_pid, str(node_dir))

    if supervisor_alive() and nspawn_pid_file.is_file():
        nspawn_pid = int(nspawn_pid_file.read_text())
        if _process_mentions(nspawn_pid, str(node_dir)):
            try:
                os.kill(nspawn_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while supervisor_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
    if supervisor_alive() and supervisor_pid is not None:
        try:
            os.kill(supervisor_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _kill_cgroup_members(_recorded_cgroups(node_dir))
    if supervisor is not None:
        supervisor.wait(timeout=10)


def _remove_slot_traces(slot: int) -> None:
    """Everything a lab in this slot may have left: processes, mounts, cgroups, namespaces, links, rules, files."""
    root = slot_dir(slot)
    nodes_dir = root / "nodes"
    node_dirs = [d for d in nodes_dir.iterdir() if d.is_dir()] if nodes_dir.is_dir() else []
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(node_dirs)))) as pool:
        list(pool.map(lambda d: _stop_node_processes(d, grace_s=5), node_dirs))
    lab_cgroups = _recorded_cgroups(root)
    _kill_cgroup_members(lab_cgroups)
    _unmount_all_under(root)
    _remove_cgroups([c for d in node_dirs for c in _recorded_cgroups(d)] + lab_cgroups)
    for line in _run(["ip", "netns", "list"], check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if re.fullmatch(rf"cb{slot}(hub|n\d+)", name):
            _run(["ip", "netns", "del", name], check=False)
    for line in _run(["ip", "-o", "link", "show"], check=False).stdout.splitlines():
        match = re.match(rf"^\d+: (cb{slot}(up|v\d+))[@:]", line)
        if match:
            _run(["ip", "link", "del", match.group(1)], check=False)
    _remove_tagged_rules(slot)
    if _mounts_under(root):
        raise LabError(f"{root}: still mounted after umount -l; remove it by hand once the mounts are gone")
    shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- nodes

class LabNode:
    """One node: a booted container with its own network namespace and IP."""

    def __init__(self, lab: Lab, name: str, index: int) -> None:
        self.lab = lab
        self.name = name
        self.index = index
        self.ip = f"{lab.prefix}.{FIRST_HOST_OCTET - 1 + index}"
        self.netns = f"cb{lab.slot}n{index}"
        self.dir = lab.dir / "nodes" / name
        self.root = self.dir / "root"
        self.machine_id = uuid.uuid4().hex
        self.product_uuid = str(uuid.uuid4())
        self._supervisor: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"LabNode({self.name}@{self.ip})"

    def ssh_command(self, user: str = "root") -> list[str]:
        """The ssh argv (without the remote command) that logs in to this node, host key checked."""
        return ["ssh", "-i", str(self.lab.key_path), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                "-o", f"UserKnownHostsFile={self.lab.known_hosts_path}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR",
                f"{user}@{self.ip}"]

    def ssh(self, cmd: str, user: str = "root", check: bool = True, timeout: float = 300,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([*self.ssh_command(user), cmd], capture_output=True, text=True,
                                timeout=timeout, input=input)
        if check and result.returncode != 0:
            raise SshCommandError(self.name, result.returncode, cmd, result.stdout, result.stderr)
        return result

    # -- lifecycle (called by Lab) --

    def _create_network(self) -> None:
        lab, veth = self.lab, f"cb{self.lab.slot}v{self.index}"
        for args in (
            ["ip", "netns", "add", self.netns],
            ["ip", "-n", self.netns, "link", "set", "lo", "up"],
            ["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns],
            ["ip", "link", "set", veth, "netns", lab.hub],
            ["ip", "-n", lab.hub, "link", "set", veth, "master", lab.bridge, "up"],
            ["ip", "-n", self.netns, "addr", "add", f"{self.ip}/25", "dev", "eth0"],
            ["ip", "-n", self.netns, "link", "set", "eth0", "up"],
            ["ip", "-n", self.netns, "route", "add", "default", "via", lab.hub_ip],
        ):
            _run(args)

    def _create_cgroups(self) -> None:
        cgroups = [parent / self.name for parent in self.lab.cgroups]
        for cgroup in cgroups:
            cgroup.mkdir(exist_ok=True)
            if (cgroup / "cpuset.cpus").exists():
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (cgroup / knob).write_text((cgroup.parent / knob).read_text())
        (self.dir / "cgroups").write_text("\n".join(map(str, cgroups)) + "\n")

    def _prepare_rootfs(self) -> None:
        for sub in ("upper", "work", "root", "var-lib-containerd", "var-lib-docker", "dmi/class/dmi/id"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        uuid_file = self.dir / "dmi/class/dmi/id/product_uuid"
        uuid_file.write_text(self.product_uuid + "\n")
        uuid_file.chmod(0o400)  # as on real hardware: only root reads it
        _run(["mount", "-t", "overlay", "overlay", "-o",
              f"lowerdir={self.lab.base},upperdir={self.dir / 'upper'},workdir={self.dir / 'work'}", str(self.root)])
        etc = self.root / "etc"
        (etc / "hostname").write_text(self.name + "\n")
        (etc / "machine-id").write_text(self.machine_id + "\n")
        (etc / "hosts").write_text(
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            f"{self.ip}\t{self.name}\n{self.lab.mirror_ips[0]}\t{MIRROR_HOST}\n"
            + (f"{self.lab.hub_ip}\t{REPO_HOST}\n" if self.lab.rpm_tree else ""))
        if self.lab.rpm_tree:
            for path, text in self.lab.rpm_tree.node_files(self.lab.repo_url, self.lab.flavour.major_version).items():
                (self.root / path.lstrip("/")).write_text(text)
        if self.lab.flavour.python_site:
            site = self.root / self.lab.flavour.python_site.lstrip("/")
            site.parent.mkdir(parents=True, exist_ok=True)
            site.unlink(missing_ok=True)
            site.write_text(MODULE_RECORDER)
        (etc / "resolv.conf").unlink(missing_ok=True)
        # Nothing answers DNS at the hub, so a lookup fails at once instead of hanging.
        (etc / "resolv.conf").write_text(f"nameserver {self.lab.hub_ip}\noptions timeout:1 attempts:1\n")
        _run(["ssh-keygen", "-A", "-f", str(self.root)])
        public_key = self.lab.key_path.with_suffix(".pub").read_text()
        for home, uid in ((self.root / "root", 0), (self.root / "home/tester", TESTER_UID)):
            ssh_dir = home / ".ssh"
            ssh_dir.mkdir(mode=0o700, exist_ok=True)
            (ssh_dir / "authorized_keys").write_text(public_key)
            (ssh_dir / "authorized_keys").chmod(0o600)
            for path in (ssh_dir, ssh_dir / "authorized_keys"):
                os.chown(path, uid, uid)

    def _launch(self) -> None:
        (self.dir / "stop").unlink(missing_ok=True)
        lab = self.lab
        nspawn = [
            "systemd-nspawn", "--boot", "--register=no", "--keep-unit", f"--directory={self.root}",
            f"--machine=cb{lab.slot}-{self.name}", f"--hostname={self.name}",
            f"--uuid={uuid.UUID(self.machine_id)}", f"--network-namespace-path=/run/netns/{self.netns}",
            "--console=passive", "--resolv-conf=off", "--timezone=off", "--link-journal=no",
            "--capability=all", "--system-call-filter=@keyring",
            f"--bind={self.dir / 'var-lib-containerd'}:/var/lib/containerd",
            f"--bind={self.dir / 'var-lib-docker'}:/var/lib/docker",
            f"--bind-ro={self.dir / 'dmi'}:/run/cblab-dmi",
        ]
        # Writable /proc/sys: the kubelet and kube-proxy set sysctls (vm.* and kernel.* are host-wide here).
        env = dict(os.environ, SYSTEMD_NSPAWN_API_VFS_WRITABLE="1")
        if lab.flavour.unified_cgroup:
            env["SYSTEMD_NSPAWN_UNIFIED_HIERARCHY"] = "1"
        with (self.dir / "nspawn.log").open("ab") as log:
            self._supervisor = subprocess.Popen([str(SUPERVISOR), str(self.dir), *nspawn], stdin=subprocess.DEVNULL,
                                                stdout=log, stderr=subprocess.STDOUT, env=env,
                                                start_new_session=True)
        (self.dir / "pid").write_text(f"{self._supervisor.pid}\n")

    def _wait_for_sshd(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._supervisor is not None and self._supervisor.poll() is not None:
                raise LabError(f"{self.name}: systemd-nspawn exited: {self._log_tail()}")
            try:
                with socket.create_connection((self.ip, 22), timeout=1) as conn:
                    conn.settimeout(2)
                    if conn.recv(4) == b"SSH-":
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise LabError(f"{self.name}: sshd on {self.ip} did not answer within {timeout_s:.0f} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        log = self.dir / "nspawn.log"
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:]) if log.is_file() else ""

    def _scan_host_keys(self) -> list[str]:
        """ssh-keyscan's answer, checked against the keys written into the node: a mismatch is a lab bug."""
        written = {line.split()[1] for path in (self.root / "etc/ssh").glob("ssh_host_*_key.pub")
                   for line in path.read_text().splitlines() if line.strip()}
        for _ in range(50):
            scanned = [line for line in _run(["ssh-keyscan", "-T", "5", self.ip], check=False).stdout.splitlines()
                       if line and not line.startswith("#")]
            if scanned:
                break
            time.sleep(0.2)
        else:
            raise LabError(f"{self.name}: ssh-keyscan {self.ip} returned no host keys")
        if not {line.split()[2] for line in scanned} <= written:
            raise LabError(f"{self.name}: host keys served at {self.ip} differ from the ones written into the node")
        return scanned

    @property
    def veth(self) -> str:
        """The hub's end of the node's link (on the lab's bridge)."""
        return f"cb{self.lab.slot}v{self.index}"

    def cut_link(self) -> None:
        """Take the node's link down at the hub: it keeps running, but nothing reaches it (nor it anything)."""
        _run(["ip", "-n", self.lab.hub, "link", "set", self.veth, "down"])

    def restore_link(self) -> None:
        _run(["ip", "-n", self.lab.hub, "link", "set", self.veth, "up"])

    def start(self, timeout_s: float = 90) -> None:
        """Boot the node again after stop() (its disk state is kept)."""
        self._launch()
        self._wait_for_sshd(timeout_s)

    def stop(self) -> None:
        """Power the node off; its overlay, network and host keys stay for start()."""
        _stop_node_processes(self.dir, self._supervisor)
        self._supervisor = None


# ---------------------------------------------------------------------------------------------- the lab

@dataclass(frozen=True)
class MirrorStandIn:
    """A mirror stand-in a lab serves from its hub (Lab.serve_mirror): its URL, its faults, the requests it saw."""

    url: str
    faults_file: Path
    log_file: Path

    def fail(self, *rules: dict[str, object]) -> None:
        """Replace the faults (tests/lab/mirror.py: id, path suffix, status | reset | stall_s, times)."""
        write_faults(self.faults_file, [dict(rule) for rule in rules])

    def requests(self, path_suffix: str = "") -> list[dict[str, object]]:
        return read_requests(self.log_file, path_suffix)


class Lab:
    """N nodes in one slot. Use Lab.up(...); always down() (the pytest fixtures do)."""

    def __init__(self, slot: int, lock_fd: int, base: Path, mirror_ips: list[str],
                 flavour: Flavour = FLAVOURS["bookworm"]) -> None:
        self.slot = slot
        self._lock_fd: int | None = lock_fd
        self.flavour = flavour
        self.base = base
        self.mirror_ips = mirror_ips
        self.prefix = f"10.88.{slot}"
        self.subnet = ipaddress.ip_network(f"{self.prefix}.0/25")
        self.hub = f"cb{slot}hub"
        self.bridge = f"cb{slot}br"
        self.uplink = f"cb{slot}up"
        self.hub_ip = f"{self.prefix}.1"
        self.dir = slot_dir(slot)
        self.key_path = self.dir / "ssh" / "id_ed25519"
        self.known_hosts_path = self.dir / "known_hosts"
        self.inventory_path = self.dir / "inventory.ini"
        self.config_path = self.dir / "cluster.yaml"
        self.nodes: list[LabNode] = []
        self.inventory_names: list[str] = []
        self.cgroups: list[Path] = []
        self._known_hosts_lock = threading.Lock()
        self._down = False
        self.rpm_tree: RpmTree | None = None
        self._repo_server: subprocess.Popen[bytes] | None = None
        self._mirrors: list[subprocess.Popen[bytes]] = []
        self._reaper: subprocess.Popen[bytes] | None = None

    # -- public API --

    @classmethod
    def up(cls, n: int = 3, names: list[str] | None = None, boot_timeout_s: float = 90,
           flavour: str = "bookworm", rpm_tree: RpmTree | None = None) -> Lab:
        """Bring up n nodes (named n1..nN unless names are given), all in the inventory, first = control plane.
        flavour: a name in FLAVOURS (every node of a lab is of one flavour). RHEL-shaped flavours use rpm_tree
        (tests.lab.repos.build_rpm_tree; share one per session) as their repositories, served by the hub at
        repo_url; without one the lab builds its own (about 20 s)."""
        reason = unavailable_reason()
        if reason:
            raise LabError(reason)
        chosen = flavour_named(flavour)
        names = list(names) if names else [f"n{i}" for i in range(1, n + 1)]
        if len(names) > MAX_NODES or len(set(names)) != len(names):
            raise LabError(f"node names must be distinct and at most {MAX_NODES}: {names}")
        base = ensure_base(chosen.name)
        mirror_ips = mirror_addresses()
        cleanup_stale()
        slot, fd = cls._take_slot()
        lab = cls(slot, fd, base, mirror_ips, chosen)
        try:
            lab._reaper = _start_reaper(slot)
            lab._create_host_side()
            if chosen.rhel_shaped:
                lab._serve_rpm_tree(rpm_tree)
            lab._boot([lab._new_node(name) for name in names], boot_timeout_s)
            lab.write_inventory(names)
            lab.config_path.write_text(lab.base_settings())
        except BaseException:
            lab.down()
            raise
        return lab

    def node(self, name: str) -> LabNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"lab slot {self.slot} has no node {name!r}; nodes: {[n.name for n in self.nodes]}")

    def base_settings(self) -> str:
        """cluster.yaml for this lab: its known_hosts file, and on cgroup v1 nodes (every flavour but the
        cgroup2-only ones: this host's kernel is cgroup v1) kubelet.allow_cgroup_v1, without which preflight
        refuses them from Kubernetes 1.35 on. Tests of that refusal write settings without it."""
        text = f"ssh:\n  known_hosts_file: {self.known_hosts_path}\n"
        return text if self.flavour.unified_cgroup else text + "kubelet:\n  allow_cgroup_v1: true\n"

    @property
    def inventory_nodes(self) -> list[LabNode]:
        return [self.node(name) for name in self.inventory_names]

    def add_node(self, name: str | None = None, *, in_inventory: bool = False, trust_host_key: bool = True,
                 boot_timeout_s: float = 90) -> LabNode:
        """Boot one more node (for "a node added later joins"); kept out of the inventory unless asked."""
        name = name or f"n{len(self.nodes) + 1}"
        if any(node.name == name for node in self.nodes):
            raise LabError(f"lab slot {self.slot} already has a node {name!r}")
        node = self._new_node(name)
        self._boot([node], boot_timeout_s, trust_host_keys=trust_host_key)
        if in_inventory:
            self.write_inventory([*self.inventory_names, name])
        return node

    def unused_ip(self) -> str:
        """An address inside the lab's node subnet that no node has: connecting to it fails."""
        return f"{self.prefix}.{UNUSED_HOST_OCTET}"

    def write_inventory(self, names: list[str] | None = None, *, path: Path | None = None,
                        extra_hosts: dict[str, str] | None = None) -> Path:
        """An INI inventory: the first name is [control_plane], the rest and extra_hosts (name -> address)
        are [workers]. Written to the lab's inventory_path (which then lists these names) unless path is given."""
        names = list(self.inventory_names if names is None else names)
        hosts = [(name, self.node(name).ip) for name in names] + list((extra_hosts or {}).items())
        if not hosts:
            raise LabError("an inventory needs at least one host")
        lines = ["[control_plane]", f"{hosts[0][0]} ansible_host={hosts[0][1]}", "", "[workers]"]
        lines += [f"{name} ansible_host={address}" for name, address in hosts[1:]]
        lines += ["", "[all:vars]", "ansible_user=tester", "ansible_become=true",
                  f"ansible_ssh_private_key_file={self.key_path}"]
        if self.flavour.python_in_inventory:
            lines.append(f"ansible_python_interpreter={self.flavour.python}")
        lines.append("")
        target = path or self.inventory_path
        target.write_text("\n".join(lines))
        if path is None:
            self.inventory_names = names
        return target

    @property
    def repo_url(self) -> str:
        """Where the nodes of a RHEL-shaped lab find the RPM tree: use it as `offline.source`."""
        return f"http://{REPO_HOST}:{REPO_PORT}"

    def forget_host_key(self, node: LabNode) -> None:
        """Drop a node's keys from the lab's known_hosts (to test that an unknown host key is refused)."""
        with self._known_hosts_lock:
            _run(["ssh-keygen", "-R", node.ip, "-f", str(self.known_hosts_path)])
            self.known_hosts_path.with_name(self.known_hosts_path.name + ".old").unlink(missing_ok=True)

    def trust_host_key(self, node: LabNode) -> None:
        lines = node._scan_host_keys()
        with self._known_hosts_lock, self.known_hosts_path.open("a") as known_hosts:
            known_hosts.write("\n".join(lines) + "\n")

    def down(self) -> None:
        """Remove every trace of this lab (not the cached base). Safe to call twice."""
        if self._down:
            return
        self._down = True
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(self.nodes)))) as pool:
            list(pool.map(lambda node: _stop_node_processes(node.dir, node._supervisor), self.nodes))
        for server in [*self._mirrors, *([self._repo_server] if self._repo_server is not None else [])]:
            server.kill()
            server.wait(timeout=10)
        _remove_slot_traces(self.slot)
        with _global_lock():
            _slot_lock_path(self.slot).unlink(missing_ok=True)
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
            _restore_host_sysctls_if_last()
        if self._reaper is not None:  # it finds the slot ended and exits
            self._reaper.wait(timeout=60)
            self._reaper = None

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.down()

    def __repr__(self) -> str:
        return f"Lab(slot={self.slot}, flavour={self.flavour.name}, nodes={[n.name for n in self.nodes]})"

    # -- internals --

    @staticmethod
    def _take_slot() -> tuple[int, int]:
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        with _global_lock():
            for slot in SLOTS:
                if slot_dir(slot).exists():
                    continue  # a live lab's, or one cleanup_stale could not remove
                fd = _try_lock(_slot_lock_path(slot))
                if fd is None:
                    continue
                os.ftruncate(fd, 0)
                os.write(fd, json.dumps({"pid": os.getpid(), "dir": str(slot_dir(slot)),
                                         "started": time.time()}).encode())
                slot_dir(slot).mkdir(parents=True)
                _raise_host_sysctls()
                return slot, fd
        raise LabError(f"all {len(SLOTS)} lab slots are taken; see `python -m tests.lab.lab status`")

    def _create_host_side(self) -> None:
        (self.dir / "nodes").mkdir()
        (self.dir / "ssh").mkdir(mode=0o700)
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"cblab-{self.slot}", "-f", str(self.key_path)])
        self.known_hosts_path.touch()
        self._create_lab_cgroups()
        self._create_hub()
        self._create_host_rules()

    def _create_lab_cgroups(self) -> None:
        # Below the caller's own cgroup in every hierarchy: nodes must not share one cgroup (they would
        # trample each other's systemd), and staying below the caller keeps its limits in force.
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            hierarchy = controllers.removeprefix("name=") or "unified"
            mount = Path("/sys/fs/cgroup") / hierarchy
            if not mount.is_dir():
                continue
            cgroup = mount / path.strip("/") / f"cblab-{self.slot}"
            cgroup.mkdir(exist_ok=True)
            if (cgroup / "cpuset.cpus").exists():
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (cgroup / knob).write_text((cgroup.parent / knob).read_text())
            self.cgroups.append(cgroup)
        (self.dir / "cgroups").write_text("\n".join(map(str, self.cgroups)) + "\n")

    def _create_hub(self) -> None:
        hub, bridge, uplink, prefix = self.hub, self.bridge, self.uplink, self.prefix
        hub_iptables = ["ip", "netns", "exec", hub, "iptables", "-w"]
        commands = [
            ["ip", "netns", "add", hub],
            ["ip", "-n", hub, "link", "set", "lo", "up"],
            ["ip", "-n", hub, "link", "add", bridge, "type", "bridge"],
            ["ip", "-n", hub, "addr", "add", f"{self.hub_ip}/25", "dev", bridge],
            ["ip", "-n", hub, "link", "set", bridge, "up"],
            ["ip", "link", "add", uplink, "type", "veth", "peer", "name", "uplink", "netns", hub],
            ["ip", "addr", "add", f"{prefix}.254/30", "dev", uplink],
            ["ip", "link", "set", uplink, "up"],
            ["ip", "-n", hub, "addr", "add", f"{prefix}.253/30", "dev", "uplink"],
            ["ip", "-n", hub, "link", "set", "uplink", "up"],
            ["ip", "-n", hub, "route", "add", "default", "via", f"{prefix}.254"],
            ["ip", "route", "add", str(self.subnet), "via", f"{prefix}.253", "dev", uplink],
            ["ip", "netns", "exec", hub, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
            # Nodes' DNS queries go to the hub, where nothing listens: every one must get its "port
            # unreachable" at once, not only the first few (otherwise sudo waits 5 s to resolve a renamed host).
            ["ip", "netns", "exec", hub, "sysctl", "-qw", "net.ipv4.icmp_ratelimit=0"],
            # The hub forwards node <-> node, host -> node, and node -> mirror (80/443) only.
            [*hub_iptables, "-P", "FORWARD", "DROP"],
            [*hub_iptables, "-A", "FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"],
            [*hub_iptables, "-A", "FORWARD", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
            [*hub_iptables, "-A", "FORWARD", "-i", "uplink", "-o", bridge, "-s", f"{prefix}.254", "-j", "ACCEPT"],
        ]
        commands += [[*hub_iptables, "-A", "FORWARD", "-i", bridge, "-o", "uplink", "-d", mirror, "-p", "tcp",
                      "-m", "multiport", "--dports", MIRROR_PORTS, "-j", "ACCEPT"] for mirror in self.mirror_ips]
        for args in commands:
            _run(args)

    def _create_host_rules(self) -> None:
        tag = ["-m", "comment", "--comment", f"cblab-{self.slot}"]
        # Inserted at the top so a host whose FORWARD policy is DROP (Docker hosts) still passes them;
        # each rule names this lab's uplink, so labs never match each other's traffic.
        _iptables("-I", "FORWARD", "1", "-i", self.uplink, *tag, "-j", "DROP")
        for mirror in self.mirror_ips:
            _iptables("-I", "FORWARD", "1", "-i", self.uplink, "-d", mirror, "-p", "tcp", "-m", "multiport",
                      "--dports", MIRROR_PORTS, *tag, "-j", "ACCEPT")
            _iptables("-t", "nat", "-A", "POSTROUTING", "-s", str(self.subnet), "-d", mirror,
                      "-o", _route_device(mirror), *tag, "-j", "MASQUERADE")
        _iptables("-I", "FORWARD", "1", "-o", self.uplink, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED",
                  *tag, "-j", "ACCEPT")

    def serve_mirror(self, root: Path, port: int = MIRROR_PORT) -> MirrorStandIn:
        """Serve `root` from the hub to the nodes as a mirror that fails when told to (tests/lab/mirror.py)."""
        name = f"mirror-{port}"
        faults, log = self.dir / f"{name}-faults.json", self.dir / f"{name}-requests.log"
        server = self._start_in_hub([sys.executable, str(HERE / "mirror.py"), self.hub_ip, str(port), str(root),
                                     str(faults), str(log)], port, self.dir / f"{name}.log")
        self._mirrors.append(server)
        return MirrorStandIn(f"http://{self.hub_ip}:{port}", faults, log)

    def serve_in_hub(self, argv: list[str], port: int, name: str) -> str:
        """Run a server (`argv`, listening on hub_ip:port) in the hub, where only the nodes and this host reach it,
        until the lab is torn down; returns its log's path."""
        log = self.dir / f"{name}.log"
        self._mirrors.append(self._start_in_hub(argv, port, log))
        return str(log)

    def seal(self) -> None:
        """No packet leaves the lab from now on: the hub forwards node <-> node and this host -> node (and their
        replies) only. Every other packet the nodes send through the hub, and every connection the hub itself opens
        outwards, is dropped by a rule that counts it (`egress_dropped`)."""
        hub_iptables = ["ip", "netns", "exec", self.hub, "iptables", "-w"]
        for mirror in self.mirror_ips:
            _run([*hub_iptables, "-D", "FORWARD", "-i", self.bridge, "-o", "uplink", "-d", mirror, "-p", "tcp",
                  "-m", "multiport", "--dports", MIRROR_PORTS, "-j", "ACCEPT"])
        tag = ["-m", "comment", "--comment", EGRESS_TAG]
        _run([*hub_iptables, "-A", "FORWARD", *tag, "-j", "DROP"])
        _run([*hub_iptables, "-A", "OUTPUT", "-o", "uplink", "-m", "conntrack", "--ctstate", "NEW", *tag, "-j", "DROP"])

    def egress_dropped(self) -> int:
        """Packets the sealed hub has dropped on their way out (both counting rules, read from iptables)."""
        total = 0
        for chain in ("FORWARD", "OUTPUT"):
            listing = _run(["ip", "netns", "exec", self.hub, "iptables", "-w", "-L", chain, "-v", "-x", "-n"]).stdout
            total += sum(int(line.split()[0]) for line in listing.splitlines() if EGRESS_TAG in line)
        return total

    def _start_in_hub(self, argv: list[str], port: int, log_path: Path) -> subprocess.Popen[bytes]:
        """A server in the hub's network namespace (so only the nodes and this host reach it), in the lab's cgroups
        (so that the clean-up of a killed owner's slot ends it too), answering on hub_ip:port before this returns."""
        procs = [cgroup / "cgroup.procs" for cgroup in self.cgroups]

        def join_lab_cgroups() -> None:
            for path in procs:
                path.write_text(str(os.getpid()))

        with log_path.open("ab") as log:
            server = subprocess.Popen(["ip", "netns", "exec", self.hub, *argv], stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT, preexec_fn=join_lab_cgroups, start_new_session=True)
        deadline = time.monotonic() + 20
        while server.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection((self.hub_ip, port), timeout=1).close()
                return server
            except OSError:
                time.sleep(0.1)
        server.kill()
        raise LabError(f"a server in the lab's hub did not start on port {port}; see {log_path}")

    def _serve_rpm_tree(self, tree: RpmTree | None) -> None:
        """HTTP from the hub to the nodes only: the server runs in the hub's namespace, in the lab's cgroups
        (so that the clean-up of a killed owner's slot ends it too)."""
        if tree is None:
            from tests.lab.repos import build_rpm_tree  # repos imports this module: imported here, not above
            tree = build_rpm_tree(self.dir / "rpm")
        self.rpm_tree = tree
        self._repo_server = self._start_in_hub([sys.executable, "-c", REPO_SERVER, self.hub_ip, str(tree.root)],
                                               REPO_PORT, self.dir / "repo-http.log")

    def _new_node(self, name: str) -> LabNode:
        index = max((node.index for node in self.nodes), default=0) + 1
        if index > MAX_NODES:
            raise LabError(f"a lab holds at most {MAX_NODES} nodes")
        node = LabNode(self, name, index)
        if node.ip == self.unused_ip():
            index += 1
            node = LabNode(self, name, index)
        self.nodes.append(node)
        return node

    def _boot(self, nodes: list[LabNode], timeout_s: float, trust_host_keys: bool = True) -> None:
        def bring_up(node: LabNode) -> None:
            node.dir.mkdir(parents=True)
            node._create_network()
            node._create_cgroups()
            node._prepare_rootfs()
            node.start(timeout_s)
            if trust_host_keys:
                self.trust_host_key(node)

        with ThreadPoolExecutor(max_workers=max(1, min(8, len(nodes)))) as pool:
            for future in [pool.submit(bring_up, node) for node in nodes]:
                future.result()


# ---------------------------------------------------------------------------------------------- CLI

def _slot_status() -> list[tuple[int, str, dict[str, object]]]:
    rows = []
    held = set(_held_slots())
    for slot in sorted(_slots_with_traces()):
        rows.append((slot, "live" if slot in held else "stale", _owner_record(slot)))
    return rows


def down_slot(slot: int, force: bool = False) -> None:
    """Tear down one slot: stale ones always, a live one (its owner still running) only with force."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    record = _owner_record(slot)
    holder = record.get("holder_pid")
    if isinstance(holder, int) and _process_alive(holder) and _process_mentions(holder, f"cblab-holder {slot}"):
        os.kill(holder, signal.SIGTERM)  # a detached lab's holder: ending it frees the slot
        for _ in range(50):
            if not _process_alive(holder):
                break
            time.sleep(0.1)
    # The slot's reaper (reap) ends the lab once its owner or holder is gone; give it the time it takes.
    deadline = time.monotonic() + (120 if isinstance(holder, int) else 0)
    while True:
        with _global_lock():
            if not _slot_lock_path(slot).exists() and slot not in _slots_with_traces():
                return
            fd = _try_lock(_slot_lock_path(slot))
            if fd is not None or force or time.monotonic() >= deadline:
                break
        time.sleep(0.5)
    with _global_lock():
        if fd is None and not force:
            raise LabError(f"slot {slot} belongs to a running process (pid {record.get('pid')}); "
                           "stop it, or pass --force")
        try:
            _remove_slot_traces(slot)
            _slot_lock_path(slot).unlink(missing_ok=True)
        finally:
            if fd is not None:
                os.close(fd)
        _restore_host_sysctls_if_last()


def _detach(lab: Lab) -> int:
    """Hand the slot lock to a small holder process so the lab outlives this command."""
    assert lab._lock_fd is not None
    holder = subprocess.Popen([sys.executable, "-c", f"import signal; signal.pause()  # cblab-holder {lab.slot}"],
                              pass_fds=(lab._lock_fd,), start_new_session=True, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record = _owner_record(lab.slot) | {"holder_pid": holder.pid}
    _slot_lock_path(lab.slot).write_text(json.dumps(record))
    os.close(lab._lock_fd)
    lab._lock_fd = None
    return holder.pid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lab.lab", description="Lab nodes for the test suite.")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="bring up N nodes; stays in the foreground until Enter or Ctrl-C")
    up.add_argument("n", type=int, nargs="?", default=3)
    up.add_argument("--detach", action="store_true", help="leave the lab running; end it with `down SLOT`")
    up.add_argument("--flavour", choices=FLAVOURS, default="bookworm")
    commands.add_parser("status", help="list slots that have anything on this machine")
    down = commands.add_parser("down", help="tear down one slot")
    down.add_argument("slot", type=int)
    down.add_argument("--force", action="store_true", help="also when its owner is still running")
    down_all = commands.add_parser("down-all", help="tear down every stale slot (all slots with --force)")
    down_all.add_argument("--force", action="store_true")
    reaper = commands.add_parser("reap", help="(started by every lab) end the slot's lab when its owner ends")
    reaper.add_argument("slot", type=int)
    reaper.add_argument("--lock-fd", type=int, required=True)
    build = commands.add_parser("build-base", help="build (or find) a flavour's cached base rootfs and print its path")
    build.add_argument("--flavour", choices=FLAVOURS, default="bookworm")
    args = parser.parse_args(argv)

    if args.command == "reap":
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the owner's to act on, not this one's
        reap(args.slot, args.lock_fd)
    elif args.command == "build-base":
        print(ensure_base(args.flavour))
    elif args.command == "status":
        for slot, state, record in _slot_status():
            print(f"slot {slot}: {state} (pid {record.get('pid')}, holder {record.get('holder_pid')}) {slot_dir(slot)}")
    elif args.command == "down":
        down_slot(args.slot, force=args.force)
    elif args.command == "down-all":
        for slot, state, _record in _slot_status():
            if state == "stale" or args.force:
                down_slot(slot, force=args.force)
                print(f"slot {slot}: removed")
    elif args.command == "up":
        started = time.monotonic()
        lab = Lab.up(args.n, flavour=args.flavour)
        print(f"slot {lab.slot}: {len(lab.nodes)} {lab.flavour.name} nodes up in {time.monotonic() - started:.1f} s")
        for node in lab.nodes:
            print(f"  {node.name} {node.ip}   {shlex.join(node.ssh_command('tester'))}")
        print(f"inventory: {lab.inventory_path}\nconfig:    {lab.config_path}")
        if args.detach:
            print(f"detached (holder pid {_detach(lab)}); end it with: python -m tests.lab.lab down {lab.slot}")
            return 0
        try:
            input("press Enter to tear the lab down\n")
        except (EOFError, KeyboardInterrupt):
            pass
        lab.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
