"""The doctor's probe: one POSIX sh script, run once per node through sudo by the probe runner (nodes/probe.py),
that reads what the doctor judges on a node of a running cluster, and changes nothing. Its output, in the runner's
sections, is read into NodeHealth here; the judging is checks.py's.

The package source is fetched from the node itself (its index file, with curl, a few seconds at most): whether
this machine reaches it says nothing about whether the node does.
"""
from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

from provision.nodes.preflight.probe import (
    NVIDIA_GPUS,
    NVIDIA_VENDOR,
    PCI_DEVICES,
    SHARED_SECTIONS,
    parse_os_release,
    parse_selinux,
    parse_swaps,
)
from provision.nodes.probe import Clock, ended, parse_node_time, read_sections, sectioned
from provision.render.node_paths import ADMIN_CONF, KUBELET_CONF, KUBERNETES_DIR, SUPER_ADMIN_CONF

# What the doctor watches for space: containerd's images and snapshots, the kubelet's pods and volumes, etcd's data.
DISK_PATHS = ("/var/lib/containerd", "/var/lib/kubelet", "/var/lib/etcd")
# Certificates kubeadm keeps on disk, and the kubeconfigs it writes with an embedded client certificate.
CERT_GLOBS = ("/etc/kubernetes/pki/*.crt", "/etc/kubernetes/pki/etcd/*.crt",
              "/var/lib/kubelet/pki/kubelet-client-current.pem")
KUBECONFIG_CERTS = (ADMIN_CONF, SUPER_ADMIN_CONF, f"{KUBERNETES_DIR}/controller-manager.conf",
                    f"{KUBERNETES_DIR}/scheduler.conf")
# The kubelet's kubeconfig, written by kubeadm init and join: the node has joined the cluster.
KUBELET_KUBECONFIG = KUBELET_CONF
SOURCE_TIMEOUT_S = 8
JOURNAL_LINES = 5

# One df for every path that exists (not one df, tail and subshell each): `PATH <its df row>` lines, the paths in
# the order given, since df prints a row per argument in that order.
DISK_ROWS = r"""disk_rows() {
  flag=$1; set --
  for p in $disk_paths; do [ -d "$p" ] && set -- "$@" "$p"; done
  [ $# -gt 0 ] || return 0
  df "$flag" "$@" 2>/dev/null | { read -r _; for p in "$@"; do read -r row && echo "$p $row"; done; }
}
"""

SCRIPT = r"""section os-release; cat /etc/os-release 2>/dev/null
section hostname; hostname
""" + SHARED_SECTIONS + r"""section selinux_config; grep -E '^[[:space:]]*SELINUX=' /etc/selinux/config 2>/dev/null
section hosts; cat /etc/hosts 2>/dev/null
section resolv; [ -e /etc/resolv.conf ] && { echo present; cat /etc/resolv.conf 2>/dev/null; }
section dns_listeners; ss -Hlntu 2>/dev/null | awk '$5 ~ /:53$/ {print $1, $5}'
section iptables; command -v iptables-save >/dev/null 2>&1 && iptables-save -t filter 2>/dev/null
section nft; command -v nft >/dev/null 2>&1 && nft -j list ruleset 2>/dev/null
section firewalld
if command -v firewall-cmd >/dev/null 2>&1 && [ "$(firewall-cmd --state 2>/dev/null)" = running ]; then
  # The zone named: without it firewall-cmd prints a warning on stdout, before the list, when no interface is in
  # the default zone (Docker's docker0 in zone docker does that), as os_prep's firewalld tasks also name it.
  zone=$(firewall-cmd --get-default-zone 2>/dev/null)
  echo "ports $(firewall-cmd --zone="$zone" --list-ports 2>/dev/null)"
  echo "services $(firewall-cmd --zone="$zone" --list-services 2>/dev/null)"
fi
section ufw; command -v ufw >/dev/null 2>&1 && ufw status 2>/dev/null
# One systemctl for both units: their blocks, in the order asked, with an empty line between.
units=$(systemctl show containerd kubelet -p LoadState -p ActiveState -p SubState -p NRestarts -p Result 2>/dev/null)
nl='
'
section containerd_active
for kv in ${units%%"$nl$nl"*}; do case $kv in ActiveState=*) echo "${kv#ActiveState=}" ;; esac; done
section containerd_dump; command -v containerd >/dev/null 2>&1 && timeout 20 containerd config dump 2>/dev/null
section kubelet; [ -n "$units" ] && echo "${units#*"$nl$nl"}"
section kubelet_joined; [ -f "$kubelet_kubeconfig" ] && echo yes
section kubelet_journal; journalctl -u kubelet -n "$journal_lines" -o cat --no-pager 2>/dev/null
section disk; disk_rows -P
section inodes; disk_rows -Pi
section certs
for f in $cert_globs; do
  [ -f "$f" ] && echo "$f|$(openssl x509 -noout -enddate -in "$f" 2>/dev/null | cut -d= -f2)"
done
for f in $kubeconfig_certs; do
  [ -f "$f" ] || continue
  data=$(sed -n 's/^[[:space:]]*client-certificate-data:[[:space:]]*//p' "$f" | head -n 1)
  [ -n "$data" ] && echo "$f|$(echo "$data" | base64 -d 2>/dev/null | openssl x509 -noout -enddate 2>/dev/null | cut -d= -f2)"
done
section nvidia_pci
gpus=$(nvidia_gpus address)
[ -n "$gpus" ] && echo "$gpus"
section nvidia_driver; head -n 1 /proc/driver/nvidia/version 2>/dev/null
if [ -n "$gpus" ]; then
  section nvidia_smi
  if command -v nvidia-smi >/dev/null 2>&1; then
    out=$(timeout 15 nvidia-smi -L 2>&1); echo "rc $?"; printf '%s\n' "$out" | head -n 20
  fi
  section xid; dmesg 2>/dev/null | grep 'NVRM: Xid' | tail -n 5
fi
section sources
if command -v curl >/dev/null 2>&1; then
  for spec in $sources; do
    ( out=$(curl -sS -o /dev/null -w '%{http_code}' --max-time "$source_timeout" "${spec#*=}" 2>&1)
      echo "${spec%%=*} $? $(printf '%s' "$out" | tr '\n' ' ')" ) &
  done
  wait
else
  echo "no-curl"
fi
"""


def probe_script(sources: dict[str, str]) -> str:
    """The script, given the index files of the package sources to fetch (kind -> URL; the URLs are the
    settings', validated as URLs, and are quoted here all the same)."""
    words = " ".join(f"{kind}={url}" for kind, url in sources.items())
    head = {
        "nvidia_vendor": NVIDIA_VENDOR, "pci_devices": PCI_DEVICES, "disk_paths": " ".join(DISK_PATHS),
        "cert_globs": " ".join(CERT_GLOBS),
        "kubeconfig_certs": " ".join(KUBECONFIG_CERTS), "kubelet_kubeconfig": KUBELET_KUBECONFIG,
        "journal_lines": str(JOURNAL_LINES), "source_timeout": str(SOURCE_TIMEOUT_S), "sources": words,
    }
    # cert_globs is expanded by the loop (unquoted there): quoting it here keeps it from expanding early.
    return sectioned("".join(f"{name}={shlex.quote(value)}\n" for name, value in head.items()) + NVIDIA_GPUS + DISK_ROWS + SCRIPT)


@dataclass(frozen=True)
class Usage:
    """One path's filesystem: how full, in blocks and in inodes."""

    path: str
    mount: str
    used_percent: int


@dataclass(frozen=True)
class Unit:
    load: str = ""  # loaded, not-found
    active: str = ""  # active, inactive, failed, activating
    sub: str = ""  # running, dead, auto-restart
    restarts: int = 0
    result: str = ""


@dataclass(frozen=True)
class SourceFetch:
    kind: str
    exit_code: int  # curl's (0: fetched; 6: name not resolved; 7: refused; 22: HTTP error; 28: timed out)
    http_code: str  # "000" when no HTTP answer (and for file://)
    message: str  # curl's error line, if any


@dataclass(frozen=True)
class NodeHealth:
    """What the probe read on one node."""

    os_release: dict[str, str]
    hostname: str
    node_time_s: float | None
    swaps_active: tuple[str, ...]
    fstab_swaps: tuple[str, ...]
    selinux: str | None  # enforcing, permissive, disabled; None without SELinux
    selinux_config: str | None  # SELINUX= in /etc/selinux/config
    hosts: tuple[str, ...]  # /etc/hosts as lines
    resolv: tuple[str, ...] | None  # /etc/resolv.conf as lines; None when the file is missing
    dns_listeners: tuple[str, ...]  # local addresses listening on port 53
    iptables: str
    nft: str
    firewalld: dict[str, tuple[str, ...]] | None  # "ports", "services" when firewalld runs; else None
    ufw: tuple[str, ...]  # `ufw status` lines (empty without ufw)
    containerd_active: str
    containerd_dump: str
    kubelet: Unit
    kubelet_joined: bool
    kubelet_journal: tuple[str, ...]
    disk: tuple[Usage, ...]
    inodes: tuple[Usage, ...]
    certs: dict[str, str]  # path -> notAfter as openssl prints it ("" when unreadable)
    gpus: int  # NVIDIA display controllers on PCI
    nvidia_driver: str | None
    nvidia_smi: tuple[int, tuple[str, ...]] | None  # (exit code, lines); None when not installed or not asked
    xid: tuple[str, ...]
    sources: tuple[SourceFetch, ...] | None  # None when the node has no curl
    clock_offset_s: float = 0.0
    clock_uncertainty_s: float = 0.0
    sections: frozenset[str] = field(default_factory=frozenset)


def _first(lines: Iterable[str]) -> str | None:
    return next((line.strip() for line in lines if line.strip()), None)


def _usage(lines: Iterable[str]) -> tuple[Usage, ...]:
    """`PATH <df -P row>` lines: Filesystem, size, used, available, Use% (or IUse%), mounted on."""
    found = []
    for line in lines:
        words = line.split()
        if len(words) < 7 or not words[5].endswith("%"):
            continue
        percent = words[5].rstrip("%")
        found.append(Usage(words[0], words[6], int(percent) if percent.isdigit() else 0))
    return tuple(found)


def _unit(lines: Iterable[str]) -> Unit:
    values = dict(line.strip().split("=", 1) for line in lines if "=" in line)
    restarts = values.get("NRestarts", "0")
    return Unit(load=values.get("LoadState", ""), active=values.get("ActiveState", ""), sub=values.get("SubState", ""),
                restarts=int(restarts) if restarts.isdigit() else 0, result=values.get("Result", ""))


def _sources(lines: list[str]) -> tuple[SourceFetch, ...] | None:
    if any(line.strip() == "no-curl" for line in lines):
        return None
    found = []
    for line in lines:
        words = line.split(" ", 2)
        if len(words) < 2 or not words[1].isdigit():
            continue
        out = words[2].strip() if len(words) > 2 else ""
        code, message = (out[-3:], out[:-3].strip()) if out[-3:].isdigit() else ("000", out)
        found.append(SourceFetch(words[0], int(words[1]), code, message))
    return tuple(sorted(found, key=lambda f: f.kind))


def parse_health(text: str, clock: Clock | None = None) -> NodeHealth:
    """The probe's output -> NodeHealth, with the node's clock against this machine's where the runner timed it.
    Raises ValueError when the output is cut short."""
    sections = ended(read_sections(text))
    swaps_active, fstab_swaps = parse_swaps(sections)
    config = _first(sections.get("selinux_config", []))
    resolv = sections.get("resolv", [])
    firewalld = None
    if sections.get("firewalld"):
        firewalld = {words[0]: tuple(words[1:]) for words in (line.split() for line in sections["firewalld"]) if words}
    smi = sections.get("nvidia_smi")
    smi_result = None
    if smi and smi[0].startswith("rc "):
        code = smi[0][3:].strip()
        smi_result = (int(code) if code.isdigit() else 1, tuple(line for line in smi[1:] if line.strip()))
    certs = {}
    for line in sections.get("certs", []):
        path, _, after = line.partition("|")
        if path.strip():
            certs[path.strip()] = after.strip()
    return NodeHealth(
        os_release=parse_os_release(sections.get("os-release", [])),
        hostname=_first(sections.get("hostname", [])) or "",
        node_time_s=parse_node_time(sections),
        swaps_active=swaps_active,
        fstab_swaps=fstab_swaps,
        selinux=parse_selinux(sections),
        selinux_config=config.split("=", 1)[1].strip().strip("\"'").lower() if config else None,
        hosts=tuple(sections.get("hosts", [])),
        resolv=tuple(resolv[1:]) if resolv[:1] == ["present"] else None,
        dns_listeners=tuple(line.split()[-1] for line in sections.get("dns_listeners", []) if line.split()),
        iptables="\n".join(sections.get("iptables", [])),
        nft="\n".join(sections.get("nft", [])),
        firewalld=firewalld,
        ufw=tuple(line for line in sections.get("ufw", []) if line.strip()),
        containerd_active=_first(sections.get("containerd_active", [])) or "",
        containerd_dump="\n".join(sections.get("containerd_dump", [])),
        kubelet=_unit(sections.get("kubelet", [])),
        kubelet_joined=_first(sections.get("kubelet_joined", [])) == "yes",
        kubelet_journal=tuple(line for line in sections.get("kubelet_journal", []) if line.strip()),
        disk=_usage(sections.get("disk", [])),
        inodes=_usage(sections.get("inodes", [])),
        certs=certs,
        gpus=sum(1 for line in sections.get("nvidia_pci", []) if line.strip()),
        nvidia_driver=_first(sections.get("nvidia_driver", [])),
        nvidia_smi=smi_result,
        xid=tuple(line for line in sections.get("xid", []) if line.strip()),
        sources=_sources(sections.get("sources", [])),
        clock_offset_s=clock.offset_s if clock else 0.0,
        clock_uncertainty_s=clock.uncertainty_s if clock else 0.0,
        sections=frozenset(sections),
    )
