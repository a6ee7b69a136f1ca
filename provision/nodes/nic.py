"""Network links, for preflight: each node's NIC speeds and RDMA devices, and whether multi-node training
would cross a link too slow for it (seed 004: 1 GbE throttles all-reduce so much that two nodes train slower
than one).

Self-contained: a probe section preflight's script runs (sysfs only, no tools), a parser for what it printed,
and a pure check. What a link is for: the one the default route leaves through (the kubelet's, and the pod
network's, unless NCCL_SOCKET_IFNAME says otherwise); RDMA devices (InfiniBand, RoCE) are listed because
NCCL prefers them when they are there.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# Appended to preflight's probe script: POSIX sh, every line optional.
PROBE_SECTION = r"""
section nics
for d in /sys/class/net/*; do
  [ -e "$d/device" ] || continue
  echo "${d##*/} $(cat "$d/speed" 2>/dev/null || echo -1) $(cat "$d/operstate" 2>/dev/null || echo unknown)"
done
section rdma
for d in /sys/class/infiniband/*; do
  [ -d "$d" ] || continue
  for p in "$d"/ports/*; do
    [ -d "$p" ] || continue
    echo "${d##*/} ${p##*/} $(cat "$p/link_layer" 2>/dev/null || echo unknown) $(cat "$p/rate" 2>/dev/null)"
  done
done
"""
_RATE = re.compile(r"^(\d+(?:\.\d+)?)\s*Gb/sec")


@dataclass(frozen=True)
class Nic:
    name: str
    # The kernel's speed in Mb/s; None when it does not say (-1: virtio, a link that is down).
    speed_mbps: int | None
    up: bool

    @property
    def gbps(self) -> float | None:
        return self.speed_mbps / 1000 if self.speed_mbps else None


@dataclass(frozen=True)
class RdmaPort:
    device: str
    port: str
    link_layer: str  # InfiniBand or Ethernet (RoCE)
    gbps: float | None


@dataclass(frozen=True)
class Links:
    nics: tuple[Nic, ...] = ()
    rdma: tuple[RdmaPort, ...] = ()
    # The interface of the default route (preflight's `default_iface` section).
    default_iface: str = ""

    @property
    def training_nic(self) -> Nic | None:
        """The NIC inter-node traffic leaves through: the default route's, else the fastest one that is up."""
        by_name = {nic.name: nic for nic in self.nics}
        if self.default_iface in by_name:
            return by_name[self.default_iface]
        up = [nic for nic in self.nics if nic.up]
        return max(up, key=lambda nic: nic.speed_mbps or 0) if up else None

    @property
    def link_gbps(self) -> float | None:
        """The speed training crosses at: the fastest RDMA port when there is one, else the training NIC's."""
        rdma = [port.gbps for port in self.rdma if port.gbps]
        if rdma:
            return max(rdma)
        nic = self.training_nic
        return nic.gbps if nic else None


def parse_links(sections: dict[str, list[str]], default_iface: str = "") -> Links:
    nics = []
    for line in sections.get("nics", []):
        parts = line.split()
        if len(parts) < 2:
            continue
        speed = int(parts[1]) if re.fullmatch(r"-?\d+", parts[1]) else -1
        nics.append(Nic(parts[0], speed if speed > 0 else None, len(parts) > 2 and parts[2] == "up"))
    ports = []
    for line in sections.get("rdma", []):
        parts = line.split(maxsplit=3)
        if len(parts) < 3:
            continue
        rate = _RATE.match(parts[3]) if len(parts) > 3 else None
        ports.append(RdmaPort(parts[0], parts[1], parts[2], float(rate.group(1)) if rate else None))
    return Links(tuple(nics), tuple(ports), default_iface)


def _gbps(value: float) -> str:
    return f"{value:g} Gb/s"


def describe(links: Links) -> str:
    nic = links.training_nic
    parts = [f"{nic.name} {_gbps(nic.gbps) if nic.gbps else 'speed unknown'}" if nic else "no physical NIC seen"]
    parts += [f"RDMA {p.device}/{p.port} {p.link_layer}{' ' + _gbps(p.gbps) if p.gbps else ''}" for p in links.rdma]
    return "; ".join(parts)


def check_links(links: Links, *, multi_node: bool, min_gbps: float) -> tuple[bool, str, str]:
    """(problem?, detail, fix): a problem only when training spans nodes over a link known to be slower than
    min_gbps and no RDMA device offers a faster path. An unknown speed (virtual NICs) is shown, not judged."""
    detail = describe(links)
    speed = links.link_gbps
    if not multi_node or speed is None or speed >= min_gbps:
        return False, detail, ""
    nic = links.training_nic
    return (True, f"{detail}: multi-node training over a {_gbps(speed)} link is throttled by its all-reduce "
            f"(under {_gbps(min_gbps)})",
            f"train on one node (smoke_test.nodes: 1), put the nodes on a faster network, or point NCCL at a faster "
            f"interface (smoke_test.env: {{NCCL_SOCKET_IFNAME: <iface>}}; {nic.name if nic else 'this one'} is the "
            "default route's)")


def slowest(links: Iterable[Links]) -> float | None:
    """The slowest known training link among nodes (what an all-reduce across all of them is held to)."""
    speeds = [link.link_gbps for link in links if link.link_gbps]
    return min(speeds) if speeds else None
