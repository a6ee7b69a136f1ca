"""The doctor's judges of a node: pure functions, what the probe read (NodeHealth) in, a Finding out (ok, or what
is wrong, how badly, and the fix). Nothing here connects anywhere; tests feed recorded probe output. The
firewall's judge, which reads the node's rules, is firewall.py.

Severity: fail is broken now (the kubelet stopped, a port the cluster needs dropped, swap on); warn is wrong but
not yet breaking anything (an /etc/fstab line that turns swap on at the next boot, a certificate that expires
within a month, a disk filling past the point where the kubelet will soon evict pods).
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from provision.findings import Finding, Status
from provision.inputs.platforms import Platform, platform_for
from provision.nodes.certs import judge
from provision.nodes.containerd_config import config_problems
from provision.nodes.doctor.probe import KUBELET_KUBECONFIG, NodeHealth, Usage
from provision.render.node_tables import HOSTS_MARKER

# Clocks further apart than this (from the median of the nodes' and this machine's) break etcd's leases and the
# certificates' validity windows in ways that are hard to tell from other faults.
CLOCK_SKEW_LIMIT_S = 5.0
# Per path: (warn, fail) at this percentage used. The kubelet's default hard eviction starts at nodefs.available
# < 10% (/var/lib/kubelet) and imagefs.available < 15% (/var/lib/containerd), and at nodefs.inodesFree < 5%.
DISK_LIMITS = {"/var/lib/containerd": (80, 85), "/var/lib/kubelet": (85, 90), "/var/lib/etcd": (80, 90)}
INODE_LIMITS = (90, 95)
KUBE_CERTS_FIX = ("renew them with `bootstrap certs renew`: `kubeadm certs renew all` on each control plane, one at "
                  "a time, its static pods restarted, the admin kubeconfig here refreshed (docs/upgrade.md)")
# What `kubeadm certs renew all` leaves alone, each with what does renew it: the CAs (kubeadm never renews a CA; it is
# rotated by hand, kubernetes.io tasks/tls/manual-rotation-of-ca-certificates) and the kubelet's client
# certificate (the kubelet rotates it itself while it is valid, its renewal request approved by the controller
# manager; once expired, kubeadm's troubleshooting guide, "Kubelet client certificate rotation fails", mints a new
# kubelet.conf with `kubeadm kubeconfig user`).
CA_NAMES = ("ca.crt", "front-proxy-ca.crt")
KUBELET_CLIENT = "/var/lib/kubelet/pki/kubelet-client-current.pem"
CA_FIX = ("a CA is not renewed by `kubeadm certs renew`: rotate it as kubernetes.io's \"Manual Rotation of CA "
          "Certificates\" (tasks/tls/manual-rotation-of-ca-certificates) says, on every node, then `bootstrap certs "
          "renew`")


def kubelet_client_fix(node: str) -> str:
    return (f"the kubelet renews its client certificate itself while it is valid: `systemctl restart kubelet` on "
            f"{node} and approve its request if it waits (`kubectl get csr`); once expired, make it a new kubelet.conf "
            f"on a control plane (`kubeadm kubeconfig user --org system:nodes --client-name system:node:{node}`, "
            "kubeadm's troubleshooting guide, \"Kubelet client certificate rotation fails\"), install it on "
            f"{node} and restart the kubelet")


def certs_fix(node: str, paths: Iterable[str]) -> str:
    """The fix that renews these certificates: kubeadm's renewal for what it renews, the CA rotation for a CA,
    the kubelet's own rotation for its client certificate."""
    fixes = []
    chosen = list(paths)
    if any(path.rsplit("/", 1)[-1] in CA_NAMES for path in chosen):
        fixes.append(CA_FIX)
    if any(path == KUBELET_CLIENT for path in chosen):
        fixes.append(kubelet_client_fix(node))
    if any(path.rsplit("/", 1)[-1] not in CA_NAMES and path != KUBELET_CLIENT for path in chosen):
        fixes.append(KUBE_CERTS_FIX)
    return "; ".join(fixes)
PREPARE = "`bootstrap prepare` puts prepare's settings back"


def _finding(check: str, node: str, status: Status, detail: str, fix: str = "") -> Finding:
    return Finding(check, node, status, detail, fix if status in ("warn", "fail") else "")


# --- swap, SELinux, hostname ---------------------------------------------------------------------------------

def check_swap(node: str, health: NodeHealth) -> Finding:
    fix = f"`swapoff -a` on the node and comment out the swap line of /etc/fstab ({PREPARE})"
    if health.swaps_active:
        return _finding("swap", node, "fail", f"swap is on: {', '.join(health.swaps_active)} (the kubelet refuses "
                        "to run with swap unless configured for it)", fix)
    if health.fstab_swaps:
        return _finding("swap", node, "warn", f"/etc/fstab turns swap on at the next boot: "
                        f"{'; '.join(health.fstab_swaps)}", fix)
    return _finding("swap", node, "ok", "off")


def check_selinux(node: str, health: NodeHealth) -> Finding:
    fix = f"`setenforce 0` and SELINUX=permissive in /etc/selinux/config ({PREPARE})"
    if health.selinux == "enforcing":
        return _finding("selinux", node, "fail", "SELinux is enforcing again: prepare set it permissive, which "
                        "kubeadm's static pods need", fix)
    if health.selinux_config == "enforcing":
        return _finding("selinux", node, "warn", f"SELinux is {health.selinux or 'off'} now, but /etc/selinux/config "
                        "says enforcing: it comes back at the next boot", fix)
    return _finding("selinux", node, "ok", health.selinux or "absent")


def check_hostname(node: str, health: NodeHealth) -> Finding:
    if health.hostname.lower() == node.lower():
        return _finding("hostname", node, "ok", health.hostname)
    return _finding("hostname", node, "fail", f"the hostname is '{health.hostname}', not its node name '{node}': the "
                    "kubelet registers under the hostname", f"`hostnamectl set-hostname {node}` on it ({PREPARE})")


# --- /etc/hosts ----------------------------------------------------------------------------------------------

def _hosts_entries(lines: Iterable[str]) -> tuple[list[tuple[str, str, bool]], bool]:
    """(address, name, inside prepare's block) for every name on every line, in file order; whether the block is
    there."""
    entries, inside, seen = [], False, False
    for line in lines:
        stripped = line.strip()
        if stripped == f"# BEGIN {HOSTS_MARKER}":
            inside, seen = True, True
            continue
        if stripped == f"# END {HOSTS_MARKER}":
            inside = False
            continue
        words = stripped.split("#", 1)[0].split()
        entries += [(words[0], name.lower(), inside) for name in words[1:]]
    return entries, seen


def check_hosts(node: str, health: NodeHealth, expected: Mapping[str, str | None]) -> Finding:
    """/etc/hosts against the inventory: prepare's block names every node (at its address where the inventory gives
    one), and no line before it sends another node's name elsewhere (the first line naming a host wins)."""
    entries, has_block = _hosts_entries(health.hosts)
    fix = "correct or remove those lines: `bootstrap prepare` rewrites its block (lines outside it are yours)"
    if not has_block:
        return _finding("hosts", node, "fail", "/etc/hosts has no cluster-bootstrap block: the nodes' names may not "
                        "resolve to the addresses they talk on", "`bootstrap prepare` writes it back")
    drift = []
    for name, address in expected.items():
        key = name.lower()
        block = [a for a, n, inside in entries if n == key and inside]
        first = next((a for a, n, _ in entries if n == key), None)
        if not block:
            drift.append(f"the block does not name {name}")
        elif address and block[0] != address:
            drift.append(f"{name} is {block[0]} in the block, the inventory says {address}")
        elif name != node and first is not None and first != block[0]:
            # A node's own name may resolve to a loopback address (127.0.1.1 on Debian): only others' matter.
            drift.append(f"an earlier line sends {name} to {first}, not {block[0]}")
    if drift:
        return _finding("hosts", node, "fail", f"/etc/hosts drifted from the inventory: {'; '.join(drift)}", fix)
    return _finding("hosts", node, "ok", f"{len(expected)} nodes as in the inventory")


# --- containerd and the kubelet --------------------------------------------------------------------------------

def check_containerd(node: str, health: NodeHealth, *, sandbox_image: str, nvidia: bool,
                     nvidia_default: bool) -> Finding:
    if health.containerd_active != "active":
        state = health.containerd_active or "not installed"
        return _finding("containerd", node, "fail", f"containerd is not running ({state})",
                        "`systemctl start containerd` on the node; `journalctl -u containerd` says why it stopped")
    if not health.containerd_dump.strip():
        return _finding("containerd", node, "fail", "`containerd config dump` printed nothing",
                        "run it on the node and read its error")
    departures = config_problems(health.containerd_dump, sandbox_image, nvidia=nvidia, nvidia_default=nvidia_default)
    if departures:
        return _finding("containerd", node, "fail", f"containerd's effective configuration drifted from prepare's: "
                        f"{'; '.join(departures)}", f"{PREPARE} (is another file under /etc/containerd overriding "
                        "it? `containerd config dump` shows the result); then `systemctl restart containerd`")
    return _finding("containerd", node, "ok", "running as prepare configured it")


def check_kubelet(node: str, health: NodeHealth) -> Finding:
    unit = health.kubelet
    if not health.kubelet_joined:
        return _finding("kubelet", node, "ok", f"not joined yet (no {KUBELET_KUBECONFIG})")
    tail = " | ".join(line[:200] for line in health.kubelet_journal[-3:])
    lines = f"; its last lines: {tail}" if tail else ""
    fix = "`journalctl -u kubelet` on the node says why; `systemctl restart kubelet` once fixed"
    if unit.load == "not-found":
        return _finding("kubelet", node, "fail", "the kubelet is not installed (no kubelet.service)",
                        "`bootstrap prepare` installs it")
    if unit.active == "active" and unit.sub == "running":
        return _finding("kubelet", node, "ok", "running")
    if unit.sub == "auto-restart" or (unit.active == "activating" and unit.restarts):
        return _finding("kubelet", node, "fail", f"the kubelet is crash-looping ({unit.restarts} restarts){lines}", fix)
    return _finding("kubelet", node, "fail", f"the kubelet is not running ({unit.active or 'unknown'}, "
                    f"{unit.sub or 'unknown'}){lines}", "`systemctl start kubelet` on the node (`systemctl enable "
                    "kubelet` keeps it at boot); `journalctl -u kubelet` says why it stopped")


# --- disks, DNS, certificates ------------------------------------------------------------------------------------

def _fullness(usages: Iterable[Usage], limits: Mapping[str, tuple[int, int]], what: str) -> list[tuple[Status, str]]:
    found = []
    for usage in usages:
        warn, fail = limits[usage.path]
        if usage.used_percent >= warn:
            status: Status = "fail" if usage.used_percent >= fail else "warn"
            found.append((status, f"{usage.path} ({usage.mount}) is {usage.used_percent}% full of {what} "
                                  f"(warn at {warn}%, the kubelet evicts pods from {fail}%)"))
    return found


def check_disk(node: str, health: NodeHealth) -> Finding:
    problems = _fullness(health.disk, DISK_LIMITS, "space") + _fullness(
        health.inodes, dict.fromkeys(DISK_LIMITS, INODE_LIMITS), "inodes")
    if not problems:
        return _finding("disk", node, "ok", ", ".join(f"{u.path} {u.used_percent}%" for u in health.disk) or "-")
    status: Status = "fail" if any(s == "fail" for s, _ in problems) else "warn"
    return _finding("disk", node, status, "; ".join(text for _, text in problems),
                    "free space there (`crictl rmi --prune` drops unused images, `journalctl --vacuum-size=500M` old "
                    "logs) or give it a bigger disk")


def _loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"


def _listening(address: str, listeners: Iterable[str]) -> bool:
    """Something listens on port 53 at `address` (ss's local addresses: 127.0.0.53%lo:53, 0.0.0.0:53, [::]:53)."""
    hosts = {listener.rsplit(":", 1)[0].split("%", 1)[0].strip("[]") for listener in listeners}
    return bool(hosts & {address, "0.0.0.0", "*", "::"})


def check_dns(node: str, health: NodeHealth) -> Finding:
    """The node's resolver: CoreDNS forwards what is not the cluster's to the nameservers of the node it runs on,
    and the kubelet gives pods with hostNetwork the node's /etc/resolv.conf."""
    fix = ("point /etc/resolv.conf at a nameserver the node reaches (or start the local resolver it names: "
           "`systemctl start systemd-resolved`)")
    if health.resolv is None:
        return _finding("dns", node, "fail", "/etc/resolv.conf is missing: the node resolves no name outside "
                        "/etc/hosts", fix)
    servers = [line.split()[1] for line in health.resolv if len(line.split()) > 1 and line.split()[0] == "nameserver"]
    if not servers:
        return _finding("dns", node, "fail", "/etc/resolv.conf names no nameserver: the node resolves no name outside "
                        "/etc/hosts", fix)
    dead = [s for s in servers if _loopback(s) and not _listening(s, health.dns_listeners)]
    if dead and len(dead) == len(servers):
        return _finding("dns", node, "fail", f"/etc/resolv.conf points at {', '.join(dead)}, where nothing listens on "
                        "port 53", fix)
    return _finding("dns", node, "ok", f"nameserver {', '.join(servers)}")


def _not_after(text: str) -> datetime | None:
    try:
        return datetime.strptime(" ".join(text.split()), "%b %d %H:%M:%S %Y %Z").replace(tzinfo=UTC)
    except ValueError:
        return None


def check_certs(node: str, health: NodeHealth, now: datetime, renew_before_days: int) -> Finding:
    """The node's kubeadm certificates judged as `bootstrap certs check` judges them (nodes/certs.py: expired, or
    within certificates.renew_before_days); one whose date the node could not print is left out."""
    if not health.certs:
        return _finding("certs", node, "ok", "none on this node")
    dated = {path: after for path, text in sorted(health.certs.items()) if (after := _not_after(text)) is not None}
    judged = [judge(node, path, "certificate", path, after, None, now, renew_before_days)
              for path, after in dated.items()]
    expired = [f"{r.path} (expired {r.not_after:%Y-%m-%d})" for r in judged if r.status == "expired"]
    soon = [f"{r.path} ({r.days_left} days, {r.not_after:%Y-%m-%d})" for r in judged if r.status == "warn"]
    due = [r.path for r in judged if r.status in ("expired", "warn")]
    if expired:
        return _finding("certs", node, "fail", f"expired: {', '.join(expired)}" +
                        (f"; expiring: {', '.join(soon)}" if soon else ""), certs_fix(node, due))
    if soon:
        return _finding("certs", node, "warn", f"expiring within {renew_before_days} days: {', '.join(soon)}",
                        certs_fix(node, due))
    return _finding("certs", node, "ok", f"{len(health.certs)} valid past {renew_before_days} days")


# --- GPUs --------------------------------------------------------------------------------------------------------

def check_gpu(node: str, health: NodeHealth, expected: int) -> list[Finding]:
    """On a node with GPUs (preflight's count, else the probe's): on PCI, the driver loaded, nvidia-smi answering,
    no Xid errors in the kernel log."""
    if expected <= 0:
        return [_finding("gpu", node, "ok", "no GPU expected")]
    driver_fix = ("`bootstrap prepare` installs the driver of gpu.driver_branch; after a kernel update, rebuild its "
                  "module (`dkms autoinstall`) and reboot")
    if health.gpus < expected:
        return [_finding("gpu", node, "fail", f"{health.gpus} NVIDIA GPUs on PCI, preflight counted {expected}",
                         "a GPU fell off the bus: `dmesg | grep -i nvrm` on the node, then reseat or power-cycle it")]
    if health.nvidia_driver is None:
        return [_finding("gpu", node, "fail", "the NVIDIA driver is not loaded (no /proc/driver/nvidia/version)",
                         driver_fix)]
    findings = []
    if health.nvidia_smi is None:
        findings.append(_finding("gpu", node, "fail", "nvidia-smi is not installed", driver_fix))
    elif health.nvidia_smi[0] != 0:
        last = health.nvidia_smi[1][-1] if health.nvidia_smi[1] else f"exit code {health.nvidia_smi[0]}"
        findings.append(_finding("gpu", node, "fail", f"nvidia-smi fails: {last}",
                                 "the driver and its user-space libraries must be the same version: reinstall "
                                 f"them ({driver_fix.split('; ')[0]}) and reboot"))
    else:
        findings.append(_finding("gpu", node, "ok", f"{health.gpus} GPUs, nvidia-smi answers"))
    if health.xid:
        findings.append(_finding("gpu_xid", node, "warn", f"Xid errors in the kernel log, the last: {health.xid[-1]}",
                                 "look the Xid up in NVIDIA's Xid table; most need the GPU reset (`nvidia-smi -r`) "
                                 "or the node drained and rebooted"))
    return findings


# --- the package source --------------------------------------------------------------------------------------------

def source_kind(health: NodeHealth) -> str | None:
    """deb or rpm: the layout of the Kubernetes repository this node's package manager reads."""
    row = platform_for(health.os_release)
    return ("deb" if row.package_manager == "apt" else "rpm") if isinstance(row, Platform) else None


CURL_REASONS = {6: "its name does not resolve", 7: "the connection is refused", 22: "it answers with an HTTP error",
                28: "it does not answer in time", 35: "the TLS handshake fails", 37: "the file is not there",
                60: "its certificate is not trusted"}


def check_package_source(node: str, health: NodeHealth, urls: Mapping[str, str], setting: str) -> Finding:
    """The node fetches the index of the Kubernetes repository it installs from (upgrades and `node add` need it)."""
    kind = source_kind(health)
    if health.sources is None:
        return _finding("package_source", node, "skip", "not checked: the node has no curl")
    fetched = next((f for f in health.sources if f.kind == kind), None)
    if kind is None or fetched is None:
        return _finding("package_source", node, "skip", "not checked: the node's system is not one prepare knows")
    url = urls[kind]
    answered = fetched.http_code[:1] in ("2", "3") or (fetched.http_code == "000" and url.startswith("file:"))
    if fetched.exit_code == 0 and answered:
        return _finding("package_source", node, "ok", url)
    # curl without --fail exits 0 on an HTTP error: the answer's code tells.
    code = 22 if fetched.exit_code == 0 else fetched.exit_code
    reason = CURL_REASONS.get(code, f"curl exit code {code}")
    said = f" (HTTP {fetched.http_code})" if fetched.http_code not in ("000", "") else ""
    message = f": {fetched.message}" if fetched.message else ""
    return _finding("package_source", node, "fail", f"cannot fetch {url}: {reason}{said}{message}",
                    f"the node installs and upgrades Kubernetes from {setting}: let it reach that (route, proxy, "
                    "DNS), or point the setting at a mirror it reaches")


# --- across nodes: the clocks ---------------------------------------------------------------------------------------

def check_clocks(healths: Mapping[str, NodeHealth]) -> dict[str, Finding]:
    """Each node's clock against the median of every node's and this machine's (a node read halfway through its
    probe's round trip, give or take half of it)."""
    offsets = [0.0, *(h.clock_offset_s for h in healths.values() if h.node_time_s is not None)]
    reference = statistics.median(offsets)
    found = {}
    for name, health in healths.items():
        if health.node_time_s is None:
            found[name] = _finding("clock", name, "skip", "not checked: `date` printed no time")
            continue
        off = health.clock_offset_s - reference
        if abs(off) - health.clock_uncertainty_s <= CLOCK_SKEW_LIMIT_S:
            found[name] = _finding("clock", name, "ok", f"{off:+.1f} s")
            continue
        way = "ahead of" if off > 0 else "behind"
        found[name] = _finding("clock", name, "fail", f"the clock is {abs(off):.0f} s {way} the other nodes' (and this "
                               f"machine's; the limit is {CLOCK_SKEW_LIMIT_S:.0f} s)",
                               "`timedatectl set-ntp true` on it (chrony or systemd-timesyncd), then `chronyc tracking` "
                               "or `timedatectl timesync-status` to see it sync")
    return found
