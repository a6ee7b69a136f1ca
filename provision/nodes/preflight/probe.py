"""The probe: one POSIX sh script that reads a node's facts in one SSH round trip, and its output read into
NodeFacts. Every fact about the node that preflight judges comes from here, among them the NVIDIA GPUs on
its PCI bus, which later phases take from preflight instead of looking again."""
from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

from provision.inputs import versions
from provision.inputs.platforms import PythonFound, probed_interpreters
from provision.nodes.nic import PROBE_SECTION as NIC_PROBE_SECTION
from provision.nodes.nic import Links, parse_links
from provision.nodes.probe import Clock, ended, parse_node_time, read_sections, sectioned
from provision.render.node_paths import ADMIN_CONF, KUBELET_CONF

# PCI vendor id of NVIDIA; a GPU is a device of that vendor in the display class (0x03xxxx).
NVIDIA_VENDOR = "10de"
PCI_DEVICES = "/sys/bus/pci/devices"


@dataclass(frozen=True)
class Listener:
    port: int
    process: str | None = None
    pid: int | None = None


@dataclass(frozen=True)
class VipFacts:
    """What a control plane sees of the control-plane VIP (probed only when there is one)."""

    # The interface that holds the VIP on this node (kube-vip's leader), else None.
    held_on: str | None
    # The route to the VIP: its interface, and its gateway when it is not on a directly attached network.
    route_dev: str | None
    route_via: str | None
    # The MAC that answered ARP for the VIP (after one ping), when another machine holds it.
    answered_by: str | None

    @property
    def interface(self) -> str | None:
        """Where kube-vip announces the VIP from this node: where it is held, else the route's interface."""
        return self.held_on or self.route_dev


@dataclass(frozen=True)
class NodeFacts:
    os_release: dict[str, str]
    hostname: str
    product_uuid: str | None
    # Interface -> MAC, for the interfaces whose MAC must be unique (physical ones and the default route's).
    macs: dict[str, str]
    cpus: int
    memory_mb: int
    listeners: tuple[Listener, ...]
    swaps_active: tuple[str, ...]
    fstab_swaps: tuple[str, ...]
    selinux: str | None  # "enforcing", "permissive", "disabled" or None when absent
    gpus: tuple[str, ...]  # PCI addresses (and names, when lspci is there) of NVIDIA display controllers
    nvidia_driver: str | None
    kube_configs: tuple[str, ...]
    # The node's clock (epoch seconds) when the probe read it; None when `date` printed nothing usable.
    node_time_s: float | None = None
    # Node clock minus the operator's, and how precisely that is known (half the probe's round trip).
    clock_offset_s: float = 0.0
    clock_uncertainty_s: float = 0.0
    vip: VipFacts | None = None
    # What the compatibility rules read: the kernel release, the cgroup version (2: the unified hierarchy;
    # 1: v1 or hybrid), the PCI device ids of the NVIDIA GPUs, the containerd installed (`containerd
    # --version`), the runtime packages installed (name -> version), and the containerd the distribution offers.
    kernel: str | None = None
    cgroup_version: int | None = None
    gpu_device_ids: tuple[int, ...] = ()
    containerd_version: tuple[int, ...] | None = None
    runtime_packages: dict[str, str] = field(default_factory=dict)
    containerd_candidate: str | None = None
    arch: str = ""  # uname -m
    cpu_flags: frozenset[str] = frozenset()  # /proc/cpuinfo's, of the first CPU
    # The interpreters of the platform table found on the node (version, whether they import dnf and selinux).
    pythons: tuple[PythonFound, ...] = ()
    # NIC speeds and RDMA devices (nodes/nic.py).
    links: Links = field(default_factory=Links)
    # Every IPv4 address on the node, with its interface and prefix (`ip -o -4 address show`).
    addresses: tuple[tuple[str, ipaddress.IPv4Interface], ...] = ()

    def python(self, path: str) -> PythonFound | None:
        return next((found for found in self.pythons if found.path == path), None)


# Prints "MAJOR.MINOR MODULE..." for the interpreter that runs it (Python 2.7 and 3.6 alike), the modules being
# those of dnf and selinux it can import.
PYTHON_PROBE = """import sys
found = []
for name in ("dnf", "selinux"):
    try:
        __import__(name)
        found.append(name)
    except Exception:
        pass
print("%d.%d %s" % (sys.version_info[0], sys.version_info[1], " ".join(found)))"""

# The NVIDIA display controllers on PCI (the doctor's probe lists them too): `nvidia_gpus address` prints each one's
# PCI address, `nvidia_gpus device` its device id. Read with the shell's own `read`, not a process per file: a node
# has dozens of PCI functions.
NVIDIA_GPUS = r"""nvidia_gpus() {
  for d in "$pci_devices"/*; do
    read -r vendor 2>/dev/null < "$d/vendor" || continue
    read -r class 2>/dev/null < "$d/class" || continue
    [ "$vendor" = "0x$nvidia_vendor" ] || continue
    case "$class" in
      0x03*) if [ "$1" = device ]; then read -r id < "$d/device" && echo "$id"; else echo "${d##*/}"; fi ;;
    esac
  done
}
"""

# Sections the doctor's probe reads too, and reads the same way (parse_swaps, parse_selinux): its swap (active, and
# set up in fstab) and SELinux's mode. (The node's clock is in every probe: nodes/probe.py's SECTION_HEAD.)
SHARED_SECTIONS = r"""section swaps; tail -n +2 /proc/swaps 2>/dev/null
section fstab; grep -v '^[[:space:]]*#' /etc/fstab 2>/dev/null
section selinux
if command -v getenforce >/dev/null 2>&1; then getenforce
elif [ -r /sys/fs/selinux/enforce ]; then cat /sys/fs/selinux/enforce; fi
"""

# Runs as root through sudo; POSIX sh; every section is optional so a missing tool only empties its section.
PROBE_SCRIPT = sectioned(
    f"nvidia_vendor={NVIDIA_VENDOR}\npci_devices={PCI_DEVICES}\n"
    f"interpreters={shlex.quote(' '.join(probed_interpreters()))}\n"
    f"kube_configs={shlex.quote(f'{ADMIN_CONF} {KUBELET_CONF}')}\n"
    f"python_probe={shlex.quote(PYTHON_PROBE)}\n" + NVIDIA_GPUS + r"""
section os-release; cat /etc/os-release 2>/dev/null
section hostname; hostname
section product_uuid; cat /sys/class/dmi/id/product_uuid 2>/dev/null
section default_iface; ip -4 route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") print $(i + 1)}'
section interfaces
for d in /sys/class/net/*; do
  [ -e "$d/address" ] || continue
  physical=0; [ -e "$d/device" ] && physical=1
  echo "${d##*/} $(cat "$d/address") $physical"
done
section cpus; nproc 2>/dev/null || grep -c '^processor' /proc/cpuinfo
section meminfo; grep '^MemTotal:' /proc/meminfo
if command -v ss >/dev/null 2>&1; then section listen; ss -ltnp 2>/dev/null | tail -n +2
else section proc_net_tcp; cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; fi
""" + SHARED_SECTIONS + r"""section nvidia_pci; nvidia_gpus address
section lspci; command -v lspci >/dev/null 2>&1 && lspci -mm -d "$nvidia_vendor:" 2>/dev/null
section nvidia_driver; head -n 1 /proc/driver/nvidia/version 2>/dev/null
section arch; uname -m
section cpu_flags; grep -m 1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2
section python
for py in $interpreters; do
  [ -x "$py" ] || continue
  out=$("$py" -c "$python_probe" 2>/dev/null) && echo "$py $out"
done
section kube; for f in $kube_configs; do [ -f "$f" ] && echo "$f"; done
if [ -n "$vip" ]; then
  section vip_held; ip -o -4 addr show to "$vip/32" 2>/dev/null
  section vip_route; ip -o -4 route get "$vip" 2>/dev/null
  section vip_neighbour
  # One ping makes the kernel ask by ARP; a machine that drops pings still answers that. An entry left by an
  # earlier probe that found the address free (failed, or still asking) is forgotten first: while it stands the
  # kernel asks again only on its own timer, after this ping gave up, and a machine that took the address since
  # would go unseen.
  if [ -z "$(ip -o -4 addr show to "$vip/32" 2>/dev/null)" ]; then
    ip -4 neigh show to "$vip" 2>/dev/null | grep -qE 'FAILED|INCOMPLETE' && ip -4 neigh flush to "$vip" 2>/dev/null
    command -v ping >/dev/null 2>&1 && ping -c 1 -W 1 "$vip" >/dev/null 2>&1
    ip -4 neigh show to "$vip" 2>/dev/null
  fi
fi
section kernel; uname -r
section cgroup_fs; stat -fc %T /sys/fs/cgroup 2>/dev/null
section nvidia_pci_ids; nvidia_gpus device
section containerd_version; containerd --version 2>/dev/null
section runtime_packages
if command -v dpkg-query >/dev/null 2>&1; then
  dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\n' containerd containerd.io docker.io docker-ce \
    2>/dev/null | awk '$3 ~ /^.i/ {print $1, $2}'
elif command -v rpm >/dev/null 2>&1; then
  rpm -q --qf '%{NAME} %{VERSION}\n' containerd.io docker-ce 2>/dev/null | grep -v 'not installed'
fi
section containerd_candidate; apt-cache policy containerd 2>/dev/null | awk '$1 == "Candidate:" {print $2}'
section addresses; ip -o -4 address show 2>/dev/null
""" + NIC_PROBE_SECTION)


def probe_script(vip: str | None = None) -> str:
    """The probe; with the control-plane VIP (an IPv4 address, validated by the settings) it also reads what the
    node sees of it."""
    return f"vip={vip or ''}\n" + PROBE_SCRIPT


def parse_os_release(lines: Iterable[str]) -> dict[str, str]:
    values = {}
    for line in lines:
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            try:
                values[key.strip()] = " ".join(shlex.split(value)) if value.strip() else ""
            except ValueError:
                values[key.strip()] = value.strip().strip("\"'")
    return values


_SS_PROCESS = re.compile(r'users:\(\("([^"]+)",pid=(\d+)')


def parse_listeners(lines: Iterable[str]) -> tuple[Listener, ...]:
    """`ss -ltnp` rows (no header) -> listening TCP ports with the process that holds each, when shown."""
    found = []
    for line in lines:
        columns = line.split()
        if len(columns) < 4:
            continue
        local = columns[3]
        port_text = local.rsplit(":", 1)[-1]
        if not port_text.isdigit():
            continue
        match = _SS_PROCESS.search(line)
        found.append(Listener(int(port_text), match.group(1) if match else None,
                              int(match.group(2)) if match else None))
    return tuple(found)


def parse_proc_net_tcp(lines: Iterable[str]) -> tuple[Listener, ...]:
    """/proc/net/tcp{,6} rows in state 0A (LISTEN) -> ports, for nodes without `ss` (no process names)."""
    ports = set()
    for line in lines:
        columns = line.split()
        if len(columns) > 3 and columns[3] == "0A" and ":" in columns[1]:
            ports.add(int(columns[1].rsplit(":", 1)[1], 16))
    return tuple(Listener(port) for port in sorted(ports))


def _word_after(words: list[str], key: str) -> str | None:
    return words[words.index(key) + 1] if key in words[:-1] else None


def parse_vip(sections: dict[str, list[str]]) -> VipFacts | None:
    """The VIP sections (`ip -o addr show to`, `ip -o route get`, `ip neigh show to`) -> VipFacts; None when the
    probe had no VIP to look at."""
    if "vip_route" not in sections:
        return None
    held = next((line.split()[1] for line in sections.get("vip_held", []) if len(line.split()) > 1), None)
    route = next((line.split() for line in sections["vip_route"] if line.strip()), [])
    answered = None
    for line in sections.get("vip_neighbour", []):
        words = line.split()
        if "lladdr" in words and not {"FAILED", "INCOMPLETE"} & set(words):
            answered = _word_after(words, "lladdr")
    return VipFacts(held_on=held.split("@")[0] if held else None, route_dev=_word_after(route, "dev"),
                    route_via=_word_after(route, "via"), answered_by=answered)


def parse_pythons(lines: Iterable[str]) -> tuple[PythonFound, ...]:
    """`PATH MAJOR.MINOR [dnf] [selinux]` lines -> the interpreters found."""
    found = []
    for line in lines:
        parts = line.split()
        if len(parts) < 2 or "." not in parts[1]:
            continue
        major, _, minor = parts[1].partition(".")
        if major.isdigit() and minor.isdigit():
            found.append(PythonFound(parts[0], (int(major), int(minor)), frozenset(parts[2:])))
    return tuple(found)


def parse_swaps(sections: dict[str, list[str]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the active swap areas, fstab's swap lines with their spaces collapsed)."""
    active = tuple(line.split()[0] for line in sections.get("swaps", []) if line.strip())
    fstab = tuple(" ".join(line.split()) for line in sections.get("fstab", [])
                  if len(line.split()) >= 3 and line.split()[2] == "swap")
    return active, fstab


def parse_selinux(sections: dict[str, list[str]]) -> str | None:
    """"enforcing", "permissive", "disabled" (getenforce's words, or /sys/fs/selinux/enforce's 1 and 0), or None
    where the node has no SELinux."""
    lines = [line.strip().lower() for line in sections.get("selinux", []) if line.strip()]
    return {"1": "enforcing", "0": "permissive"}.get(lines[0], lines[0]) if lines else None


def parse_facts(text: str, clock: Clock | None = None) -> NodeFacts:
    """The probe's output -> facts, with the node's clock against this machine's where the runner timed it. Raises
    ValueError when the output is cut short."""
    sections = ended(read_sections(text))
    default_iface = next(iter(sections.get("default_iface", [])), "")
    macs = {}
    for line in sections.get("interfaces", []):
        parts = line.split()
        if len(parts) == 3 and (parts[2] == "1" or parts[0] == default_iface):
            macs[parts[0]] = parts[1].lower()
    memory_kb = next((int(line.split()[1]) for line in sections.get("meminfo", []) if line.split()[1:2]), 0)
    swaps_active, fstab_swaps = parse_swaps(sections)
    names = {}
    for line in sections.get("lspci", []):
        parts = shlex.split(line) if line.strip() else []
        if len(parts) >= 4:
            names[parts[0]] = parts[3]
    gpus = []
    for address in (line.strip() for line in sections.get("nvidia_pci", []) if line.strip()):
        short = address.split(":", 1)[1] if address.count(":") == 2 else address
        gpus.append(f"{address} {names[short]}" if short in names else address)
    uuid_lines = [line.strip() for line in sections.get("product_uuid", []) if line.strip()]
    cpu_lines = [line.strip() for line in sections.get("cpus", []) if line.strip().isdigit()]
    return NodeFacts(
        os_release=parse_os_release(sections.get("os-release", [])),
        hostname=next((line.strip() for line in sections.get("hostname", []) if line.strip()), ""),
        product_uuid=uuid_lines[0].lower() if uuid_lines else None,
        macs=macs,
        cpus=int(cpu_lines[0]) if cpu_lines else 0,
        memory_mb=memory_kb // 1024,
        listeners=parse_listeners(sections["listen"]) if "listen" in sections
        else parse_proc_net_tcp(sections.get("proc_net_tcp", [])),
        swaps_active=swaps_active,
        fstab_swaps=fstab_swaps,
        selinux=parse_selinux(sections),
        gpus=tuple(gpus),
        nvidia_driver=next((line.strip() for line in sections.get("nvidia_driver", []) if line.strip()), None),
        kube_configs=tuple(line.strip() for line in sections.get("kube", []) if line.strip()),
        links=parse_links(sections, default_iface),
        node_time_s=parse_node_time(sections),
        clock_offset_s=clock.offset_s if clock else 0.0,
        clock_uncertainty_s=clock.uncertainty_s if clock else 0.0,
        vip=parse_vip(sections),
        kernel=_first(sections.get("kernel")),
        cgroup_version={"cgroup2fs": 2, "tmpfs": 1}.get(_first(sections.get("cgroup_fs")) or ""),
        gpu_device_ids=tuple(int(line.strip(), 16) for line in sections.get("nvidia_pci_ids", [])
                             if re.fullmatch(r"0x[0-9a-fA-F]{4}", line.strip())),
        containerd_version=parse_containerd_version(sections.get("containerd_version", [])),
        runtime_packages={parts[0]: parts[1] for parts in (line.split() for line in sections.get("runtime_packages", []))
                          if len(parts) == 2},
        containerd_candidate=next((c for c in [_first(sections.get("containerd_candidate"))] if c and c != "(none)"),
                                  None),
        arch=next((line.strip() for line in sections.get("arch", []) if line.strip()), ""),
        cpu_flags=frozenset(" ".join(sections.get("cpu_flags", [])).split()),
        pythons=parse_pythons(sections.get("python", [])),
        addresses=parse_addresses(sections.get("addresses", [])),
    )


def parse_addresses(lines: Iterable[str]) -> tuple[tuple[str, ipaddress.IPv4Interface], ...]:
    """`ip -o -4 address show` ("2: eth0    inet 10.88.0.2/24 brd 10.88.0.255 scope global eth0 ...") -> each
    interface (without its @peer suffix) and address with its prefix."""
    found = []
    for line in lines:
        words = line.split()
        if len(words) >= 4 and words[2] == "inet":
            try:
                found.append((words[1].split("@")[0], ipaddress.IPv4Interface(words[3])))
            except ValueError:
                continue
    return tuple(found)


def _first(lines: list[str] | None) -> str | None:
    return next((line.strip() for line in lines or [] if line.strip()), None)


def parse_containerd_version(lines: Iterable[str]) -> tuple[int, ...] | None:
    """`containerd --version` (`containerd containerd.io v2.1.5 <commit>`, or Debian's `containerd
    github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1`) -> (2, 1, 5); None when not installed."""
    for line in lines:
        for word in line.split()[1:]:
            version = versions.parse_version(word)
            if len(version) >= 2 and "/" not in word:
                return version
    return None
