"""libvirtd in a network namespace of its own, so that a real Vagrant/libvirt machine stays off every network.

    root netns: veth cbvag0 10.89.255.1/30, a mirror server on 10.89.255.1:3142 (/debian and /debian-security
                relayed from deb.debian.org, and the test's own directories), iptables: from cbvag0 only that
                port, never forwarded
    netns cbvagrant: veth cbvag1 10.89.255.2/30 (default route), libvirtd + virtlogd + dnsmasq, the libvirt
                networks (Vagrant's management NAT, the lab's private network), the QEMU machine

The VM's only way out is that server, which the toolkit uses as its mirrors (`mirrors.os_repo`, and
`mirrors.kubernetes_repo` for a stand-in Kubernetes repository). The test's
own process enters the namespace (setns) so that vagrant, ssh and Ansible run inside it. `down()` removes
every trace: domains are Vagrant's to destroy, then networks, pool, daemons, rules, veth and namespace.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

NETNS = "cbvagrant"
HOST_VETH, NS_VETH = "cbvag0", "cbvag1"
HOST_IP, NS_IP, PREFIX = "10.89.255.1", "10.89.255.2", 30
PROXY_PORT = 3142
RULE_TAG = "cbvagrant"
MIRROR = "http://deb.debian.org"
MIRROR_PATHS = ("/debian/", "/debian-security/")
LIBVIRT_SOCKET = Path("/run/libvirt/libvirt-sock")
POOL = "cbvagrant"
CLONE_NEWNET = 0x40000000
REQUIRED_TOOLS = ("ip", "iptables", "libvirtd", "virtlogd", "virsh", "dnsmasq", "qemu-system-x86_64", "vagrant")


class NetnsError(RuntimeError):
    pass


def _run(*argv: str, check: bool = True, netns: bool = False) -> subprocess.CompletedProcess[str]:
    full = ["ip", "netns", "exec", NETNS, *argv] if netns else list(argv)
    result = subprocess.run(full, capture_output=True, text=True, timeout=120, check=False)
    if check and result.returncode != 0:
        raise NetnsError(f"`{' '.join(full)}` failed: {result.stderr.strip()}")
    return result


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise NetnsError(f"setns failed: {os.strerror(ctypes.get_errno())}")


class _MirrorHandler(BaseHTTPRequestHandler):
    """Debian's archive relayed (nothing else of the outside world), plus local directories served as they are
    (a stand-in repository): the VM's apt uses this server as its mirrors."""

    # URL prefix ("/kubernetes/") -> local directory; set per server in LibvirtNetns._proxy.
    local_dirs: ClassVar[dict[str, Path]] = {}

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, send_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if ".." in path:
            self.send_error(403)
        elif path.startswith(MIRROR_PATHS):
            self._relay(path, send_body)
        elif (prefix := next((p for p in self.local_dirs if path.startswith(p)), None)) is not None:
            self._local(self.local_dirs[prefix] / path.removeprefix(prefix), send_body)
        else:
            self.send_error(403, "only the Debian archive and the test's own directories are served")

    def _local(self, file: Path, send_body: bool) -> None:
        if not file.is_file():
            self.send_error(404)
            return
        data = file.read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if send_body:
            self.wfile.write(data)

    def _relay(self, path: str, send_body: bool) -> None:
        request = urllib.request.Request(MIRROR + path, method="GET" if send_body else "HEAD")
        try:
            with urllib.request.urlopen(request, timeout=60) as upstream:
                self.send_response(upstream.status)
                for header in ("Content-Type", "Content-Length", "Last-Modified", "ETag"):
                    if upstream.headers.get(header):
                        self.send_header(header, upstream.headers[header])
                self.end_headers()
                while send_body and (chunk := upstream.read(1 << 16)):
                    self.wfile.write(chunk)
        except urllib.error.HTTPError as exc:
            self.send_error(exc.code)
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            self.send_error(502, str(exc)[:200])

    def log_message(self, format: str, *args: object) -> None:
        return


class LibvirtNetns:
    def __init__(self, work_dir: Path, local_dirs: dict[str, Path] | None = None):
        self.work_dir = work_dir
        self.local_dirs = dict(local_dirs or {})
        self.daemons: list[subprocess.Popen[bytes]] = []
        self.proxy: ThreadingHTTPServer | None = None
        self.networks_before: set[str] = set()
        self.created_run_dir = False

    @property
    def mirror_url(self) -> str:
        """The OS mirror as the VM sees it (through libvirt's NAT to the namespace's uplink)."""
        return f"http://{HOST_IP}:{PROXY_PORT}"

    @staticmethod
    def missing_tools() -> list[str]:
        return [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]

    def up(self) -> None:
        if LIBVIRT_SOCKET.exists():
            raise NetnsError(f"{LIBVIRT_SOCKET} exists: a libvirtd is already running here; stop it first (the "
                             "test runs its own inside a network namespace)")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.created_run_dir = not LIBVIRT_SOCKET.parent.exists()
        try:
            self._network()
            self._proxy()
            self._libvirt()
        except BaseException:
            self.down()
            raise

    def _network(self) -> None:
        _run("ip", "netns", "add", NETNS)
        _run("ip", "link", "set", "lo", "up", netns=True)
        _run("ip", "link", "add", HOST_VETH, "type", "veth", "peer", "name", NS_VETH)
        _run("ip", "link", "set", NS_VETH, "netns", NETNS)
        _run("ip", "addr", "add", f"{HOST_IP}/{PREFIX}", "dev", HOST_VETH)
        _run("ip", "link", "set", HOST_VETH, "up")
        _run("ip", "addr", "add", f"{NS_IP}/{PREFIX}", "dev", NS_VETH, netns=True)
        _run("ip", "link", "set", NS_VETH, "up", netns=True)
        _run("ip", "route", "add", "default", "via", HOST_IP, netns=True)
        # From the namespace: the proxy port on the host, nothing else, and never forwarded anywhere.
        for rule in (["INPUT", "-i", HOST_VETH, "-j", "DROP"],
                     ["INPUT", "-i", HOST_VETH, "-p", "tcp", "--dport", str(PROXY_PORT), "-j", "ACCEPT"],
                     ["FORWARD", "-i", HOST_VETH, "-j", "DROP"],
                     ["FORWARD", "-o", HOST_VETH, "-j", "DROP"]):
            _run("iptables", "-I", *rule, "-m", "comment", "--comment", RULE_TAG)
        # dnsmasq (libvirt's DHCP/DNS) would forward names to the host's resolver: refuse at once instead.
        netns_etc = Path("/etc/netns") / NETNS
        netns_etc.mkdir(parents=True, exist_ok=True)
        (netns_etc / "resolv.conf").write_text("nameserver 127.0.0.1\n")

    def _proxy(self) -> None:
        handler = type("MirrorHandler", (_MirrorHandler,), {"local_dirs": {f"/{name.strip('/')}/": path for name, path
                                                                            in self.local_dirs.items()}})
        self.proxy = ThreadingHTTPServer((HOST_IP, PROXY_PORT), handler)
        self.proxy.daemon_threads = True
        threading.Thread(target=self.proxy.serve_forever, name="debian-mirror-proxy", daemon=True).start()

    def _libvirt(self) -> None:
        log = (self.work_dir / "libvirtd.log").open("ab")
        for daemon in (["virtlogd"], ["libvirtd"]):
            self.daemons.append(subprocess.Popen(["ip", "netns", "exec", NETNS, *daemon], stdout=log, stderr=log,
                                                 start_new_session=True))
        deadline = time.monotonic() + 30
        while not self._libvirt_answers():
            if time.monotonic() > deadline or any(d.poll() is not None for d in self.daemons):
                raise NetnsError(f"libvirtd did not start; see {self.work_dir / 'libvirtd.log'}")
            time.sleep(0.5)
        self.networks_before = set(self.virsh("net-list", "--all", "--name").split())
        pool_dir = self.work_dir / "pool"
        pool_dir.mkdir(exist_ok=True)
        # Transient: gone with libvirtd, nothing written under /etc/libvirt.
        self.virsh("pool-create-as", POOL, "dir", "--target", str(pool_dir))

    @staticmethod
    def _libvirt_answers() -> bool:
        if not LIBVIRT_SOCKET.exists():
            return False
        return _run("virsh", "-c", "qemu:///system", "version", check=False).returncode == 0

    @staticmethod
    def virsh(*args: str, check: bool = True) -> str:
        return _run("virsh", "-c", "qemu:///system", *args, check=check).stdout

    @contextmanager
    def entered(self) -> Iterator[None]:
        """Run the body with this thread (and every process and thread it starts) inside the namespace."""
        original = os.open("/proc/self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{NETNS}", os.O_RDONLY)
        try:
            _setns(target)
            yield
        finally:
            _setns(original)
            os.close(original)
            os.close(target)

    def down(self) -> None:
        """Idempotent: whatever `up` got to is undone."""
        if self._libvirt_answers():
            for domain in self.virsh("list", "--all", "--name", check=False).split():
                self.virsh("destroy", domain, check=False)
                self.virsh("undefine", domain, "--nvram", "--remove-all-storage", check=False)
            for network in self.virsh("net-list", "--all", "--name", check=False).split():
                self.virsh("net-destroy", network, check=False)
                if network not in self.networks_before:
                    self.virsh("net-undefine", network, check=False)
            self.virsh("pool-destroy", POOL, check=False)
        for daemon in reversed(self.daemons):
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGTERM)
                try:
                    daemon.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(daemon.pid, signal.SIGKILL)
                    daemon.wait()
        self.daemons.clear()
        if self.proxy is not None:
            self.proxy.shutdown()
            self.proxy.server_close()
            self.proxy = None
        if Path(f"/run/netns/{NETNS}").exists():
            # Anything still in the namespace was started by this harness (dnsmasq of a network, say).
            for pid in _run("ip", "netns", "pids", NETNS, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _run("ip", "netns", "del", NETNS, check=False)
        _run("ip", "link", "del", HOST_VETH, check=False)
        for table_rule in _run("iptables", "-S", check=False).stdout.splitlines():
            if table_rule.startswith("-A ") and f"--comment {RULE_TAG}" in table_rule:
                _run("iptables", "-D", *table_rule.split()[1:], check=False)
        shutil.rmtree(Path("/etc/netns") / NETNS, ignore_errors=True)
        with contextlib.suppress(OSError):
            Path("/etc/netns").rmdir()  # only when empty: another namespace's files stay
        if not self._libvirt_answers():
            for leftover in (Path("/run/libvirtd.pid"), Path("/run/virtlogd.pid")):
                leftover.unlink(missing_ok=True)
            if self.created_run_dir:
                shutil.rmtree(LIBVIRT_SOCKET.parent, ignore_errors=True)
            else:
                LIBVIRT_SOCKET.unlink(missing_ok=True)

