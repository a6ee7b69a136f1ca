"""The doctor's judges of a node, fed the probe's output recorded on a prepared Debian 12 lab node
(tests/data/doctor/) with one thing wrong at a time: each fault is named, with its severity and a fix, and the
healthy node passes every check. The firewall judge is also fed what kube-proxy, Calico, Docker, ufw and
firewalld leave in a healthy cluster, and must not cry wolf."""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from provision.findings import Finding
from provision.inputs.inventory import Cluster, Node
from provision.inputs.settings import Settings
from provision.nodes.doctor.checks import (
    DISK_LIMITS,
    INODE_LIMITS,
    check_certs,
    check_clocks,
    check_containerd,
    check_disk,
    check_dns,
    check_gpu,
    check_hostname,
    check_hosts,
    check_kubelet,
    check_package_source,
    check_selinux,
    check_swap,
)
from provision.nodes.doctor.firewall import check_firewall, required_ports
from provision.nodes.doctor.probe import DISK_ROWS, parse_health, probe_script
from provision.nodes.doctor.run import judge_node, kubernetes_index_urls
from provision.nodes.probe import Reading
from provision.nodes.ssh import CommandResult
from tests.support.doctor_probe import health, healthy_output
from tests.support.paths import REPO_ROOT

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
# The lab's settings the recording was made with: Kubernetes 1.35 (pause 3.10.1), Debian's containerd 1.6.
SETTINGS = Settings.model_validate({"kubernetes": {"version": "1.35"}})
EXPECTED_HOSTS = {"n1": "10.88.2.11", "n2": "10.88.2.12", "n3": "10.88.2.13"}
CLUSTER = Cluster(inventory_path=__import__("pathlib").Path("hosts.ini"), nodes=tuple(
    Node(name, address, "control_plane" if name == "n1" else "worker", "tester")
    for name, address in EXPECTED_HOSTS.items()))
CONTROL_PLANE_PORTS = required_ports(control_plane=True)


def problems(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.status != "ok"]


def test_the_recorded_healthy_node_passes_every_check() -> None:
    found = judge_node(CLUSTER.nodes[1], health(), CLUSTER, SETTINGS, gpus=0, now=NOW)
    assert problems(found) == []
    assert [f.check for f in found] == ["swap", "hostname", "hosts", "firewall", "selinux", "containerd", "kubelet",
                                        "disk", "dns", "certs", "gpu", "package_source"]
    assert {f.subject for f in found} == {"n2"}


def test_swap_on_fails_and_a_swap_line_in_fstab_warns() -> None:
    on = check_swap("n2", health(swaps="/swapfile file 1048572 0 -2"))
    assert (on.status, on.detail.split(":")[0]) == ("fail", "swap is on")
    assert "swapoff -a" in on.fix and "`bootstrap prepare`" in on.fix
    later = check_swap("n2", health(fstab="/swapfile none swap sw 0 0"))
    assert later.status == "warn" and "/swapfile none swap sw 0 0" in later.detail


def test_selinux_enforcing_again_fails_and_enforcing_at_the_next_boot_warns() -> None:
    assert check_selinux("n2", health(selinux="Enforcing")).status == "fail"
    boot = check_selinux("n2", health(selinux="Permissive", selinux_config="SELINUX=enforcing"))
    assert boot.status == "warn" and "next boot" in boot.detail and "setenforce 0" in boot.fix
    assert check_selinux("n2", health(selinux="Permissive", selinux_config="SELINUX=permissive")).status == "ok"


def test_both_probes_read_selinux_swap_and_the_clock_alike() -> None:
    """The sections preflight's probe and the doctor's share (SHARED_SECTIONS) read the same way by both: SELinux's
    mode from getenforce's word or from /sys/fs/selinux/enforce's 1 and 0, swap areas and fstab's swap lines, the
    clock."""
    from provision.nodes.preflight.probe import PROBE_SCRIPT, SHARED_SECTIONS, parse_facts
    from provision.nodes.probe import SECTION_HEAD

    recorded = (REPO_ROOT / "tests" / "data" / "doctor" / "bookworm-healthy-probe.txt").read_text()
    assert all(f"@@{name}\n" in recorded for name in ("time", "swaps", "fstab", "selinux"))
    assert all(f"section {name}" in SHARED_SECTIONS for name in ("swaps", "fstab", "selinux"))
    # The clock is the probe runner's, first in every probe (nodes/probe.py).
    assert "section time" in SECTION_HEAD and PROBE_SCRIPT.startswith(SECTION_HEAD)
    assert probe_script({}).startswith(SECTION_HEAD)
    for word, mode in (("Enforcing", "enforcing"), ("1", "enforcing"), ("0", "permissive"),
                       ("Permissive", "permissive"), ("Disabled", "disabled"), (None, None)):
        output = healthy_output(selinux=word, time="1767225600.250", swaps="/dev/sdb2 partition 8388604 0 -2",
                                fstab="UUID=ab12  none  swap  sw  0  0\n/dev/sda1 / ext4 defaults 0 1")
        doctor = parse_health(output)
        preflight = parse_facts(output)
        for read in (doctor, preflight):
            assert read.selinux == mode, (word, read.selinux)
            assert read.swaps_active == ("/dev/sdb2",)
            assert read.fstab_swaps == ("UUID=ab12 none swap sw 0 0",)
            assert read.node_time_s == 1767225600.25


def test_a_changed_hostname_names_both_names_and_the_command_to_put_it_back() -> None:
    found = check_hostname("n2", health(hostname="gpu-box-7"))
    assert found.status == "fail" and "'gpu-box-7', not its node name 'n2'" in found.detail
    assert "`hostnamectl set-hostname n2`" in found.fix


def hosts_with(*lines: str, block: tuple[str, ...] = ("10.88.2.11 n1", "10.88.2.12 n2", "10.88.2.13 n3")) -> str:
    return "\n".join(["127.0.0.1\tlocalhost", *lines, "# BEGIN cluster-bootstrap nodes", *block,
                      "# END cluster-bootstrap nodes"])


def test_hosts_drift_in_the_block_or_before_it_is_named_line_by_line() -> None:
    assert check_hosts("n2", health(hosts=hosts_with("127.0.1.1 n2")), EXPECTED_HOSTS).status == "ok"
    moved = check_hosts("n3", health(hosts=hosts_with(block=("10.88.2.99 n1", "10.88.2.12 n2", "10.88.2.13 n3"))),
                        EXPECTED_HOSTS)
    assert moved.status == "fail" and "n1 is 10.88.2.99 in the block, the inventory says 10.88.2.11" in moved.detail
    shadowed = check_hosts("n2", health(hosts=hosts_with("192.168.7.7 n3")), EXPECTED_HOSTS)
    assert "an earlier line sends n3 to 192.168.7.7" in shadowed.detail
    missing = check_hosts("n2", health(hosts=hosts_with(block=("10.88.2.11 n1", "10.88.2.12 n2"))), EXPECTED_HOSTS)
    assert "does not name n3" in missing.detail
    gone = check_hosts("n2", health(hosts="127.0.0.1 localhost"), EXPECTED_HOSTS)
    assert gone.status == "fail" and "no cluster-bootstrap block" in gone.detail and "`bootstrap prepare`" in gone.fix


def iptables(*rules: str, policy: str = "ACCEPT") -> str:
    return "\n".join(["*filter", f":INPUT {policy} [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]", *rules,
                      "COMMIT"])


# What a healthy node of a formed cluster has in INPUT: kube-proxy's and Calico's jumps, the kubelet's firewall.
KUBE_INPUT = ("-A INPUT -m comment --comment \"cali:Cz_u1IQiXIMmKD4c\" -j cali-INPUT",
              "-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" "
              "-j KUBE-PROXY-FIREWALL",
              "-A INPUT -m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS",
              "-A INPUT -m conntrack --ctstate INVALID -j DROP", "-A INPUT -j KUBE-FIREWALL",
              "-A INPUT -i lo -j ACCEPT")


def test_a_port_kubeadm_needs_dropped_by_iptables_is_named_with_the_rule() -> None:
    dropped = check_firewall("n1", health(iptables=iptables(*KUBE_INPUT, "-A INPUT -p tcp -m tcp --dport 6443 -j DROP")),
                             CONTROL_PLANE_PORTS)
    assert dropped.status == "fail"
    assert dropped.detail == ("blocks what kubeadm and Calico need: 6443/tcp (iptables: -A INPUT -p tcp -m tcp "
                              "--dport 6443 -j DROP)")
    assert "iptables -D INPUT" in dropped.fix
    multiport = check_firewall("n1", health(iptables=iptables(
        "-A INPUT -p tcp -m multiport --dports 179,2379:2380 -j REJECT --reject-with icmp-port-unreachable")),
        CONTROL_PLANE_PORTS)
    assert "179/tcp" in multiport.detail and "2379-2380/tcp" in multiport.detail
    assert check_firewall("n1", health(iptables=iptables(*KUBE_INPUT)), CONTROL_PLANE_PORTS).status == "ok"


def test_a_dropping_policy_blocks_what_no_rule_accepts() -> None:
    accepted = [f"-A INPUT -p {p.protocol} -m {p.protocol} --dport {p.low}:{p.high} -j ACCEPT"
                for p in CONTROL_PLANE_PORTS]
    assert check_firewall("n1", health(iptables=iptables(*accepted, policy="DROP")), CONTROL_PLANE_PORTS).status == "ok"
    closed = check_firewall("n1", health(iptables=iptables(*accepted[1:], policy="DROP")), CONTROL_PLANE_PORTS)
    assert closed.detail == ("blocks what kubeadm and Calico need: 6443/tcp (the input chain's policy drops it)")


def test_ufw_and_firewalld_are_read_from_their_own_lists() -> None:
    ufw_rules = ["Status: active", "", "To                         Action      From",
                 "--                         ------      ----"]
    ufw_rules += [f"{str(p).replace('-', ':')}{' ' * 10}ALLOW       Anywhere" for p in CONTROL_PLANE_PORTS]
    # ufw keeps its rules in chains of its own behind a dropping INPUT policy.
    behind = iptables("-A INPUT -j ufw-before-input", "-A INPUT -j ufw-user-input", policy="DROP")
    assert check_firewall("n1", health(ufw="\n".join(ufw_rules), iptables=behind), CONTROL_PLANE_PORTS).status == "ok"
    missing = check_firewall("n1", health(ufw="\n".join(r for r in ufw_rules if not r.startswith("10250")),
                                          iptables=behind), CONTROL_PLANE_PORTS)
    assert missing.detail == "blocks what kubeadm and Calico need: 10250/tcp (ufw does not allow it)"
    ports = " ".join(str(p) for p in CONTROL_PLANE_PORTS if p.low != 2379)
    closed = check_firewall("n1", health(firewalld=f"ports {ports}\nservices ssh dhcpv6-client"), CONTROL_PLANE_PORTS)
    assert closed.detail == "blocks what kubeadm and Calico need: 2379-2380/tcp (firewalld does not open it)"


def nft(*rules: list[dict[str, object]], policy: str = "accept") -> str:
    items: list[dict[str, object]] = [
        {"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
        {"table": {"family": "inet", "name": "filter", "handle": 1}},
        {"chain": {"family": "inet", "table": "filter", "name": "input", "handle": 1, "type": "filter",
                   "hook": "input", "prio": 0, "policy": policy}}]
    items += [{"rule": {"family": "inet", "table": "filter", "chain": "input", "handle": 2 + i, "expr": expr}}
              for i, expr in enumerate(rules)]
    return json.dumps({"nftables": items})


def dport(protocol: str, right: object) -> dict[str, object]:
    return {"match": {"op": "==", "left": {"payload": {"protocol": protocol, "field": "dport"}}, "right": right}}


def test_native_nftables_rules_are_read_as_well() -> None:
    established = {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}}
    dropped = nft([established, {"accept": None}], [dport("udp", 4789), {"counter": None}, {"drop": None}])
    found = check_firewall("n1", health(nft=dropped), CONTROL_PLANE_PORTS)
    assert found.detail == "blocks what kubeadm and Calico need: 4789/udp (nftables: table inet filter, chain input)"
    accepts = [[dport(p.protocol, {"range": [p.low, p.high]} if p.high != p.low else p.low), {"accept": None}]
               for p in CONTROL_PLANE_PORTS]
    assert check_firewall("n1", health(nft=nft(*accepts, policy="drop")), CONTROL_PLANE_PORTS).status == "ok"
    assert "5473/tcp" in check_firewall("n1", health(nft=nft(*accepts[:-1], policy="drop")), CONTROL_PLANE_PORTS).detail


SANDBOX = "registry.k8s.io/pause:3.10.1"


def test_containerd_drifted_or_stopped_is_named() -> None:
    recorded = health()
    assert check_containerd("n2", recorded, sandbox_image=SANDBOX, nvidia=False, nvidia_default=True).status == "ok"
    flipped = replace(recorded, containerd_dump=recorded.containerd_dump.replace("SystemdCgroup = true",
                                                                                "SystemdCgroup = false"))
    found = check_containerd("n2", flipped, sandbox_image=SANDBOX, nvidia=False, nvidia_default=True)
    assert found.status == "fail" and "SystemdCgroup = False, expected true" in found.detail
    assert "`bootstrap prepare`" in found.fix
    stopped = check_containerd("n2", health(containerd_active="failed"), sandbox_image=SANDBOX, nvidia=False,
                               nvidia_default=True)
    assert stopped.detail == "containerd is not running (failed)" and "journalctl -u containerd" in stopped.fix


def test_a_stopped_or_crash_looping_kubelet_shows_its_last_lines() -> None:
    stopped = check_kubelet("n2", health(
        kubelet="LoadState=loaded\nActiveState=inactive\nSubState=dead\nNRestarts=0\nResult=success",
        kubelet_journal="Stopping kubelet.service\nkubelet.service: Deactivated successfully.\nStopped kubelet.service"))
    assert stopped.status == "fail" and stopped.detail.startswith("the kubelet is not running (inactive, dead)")
    assert "Stopped kubelet.service" in stopped.detail and "`systemctl start kubelet`" in stopped.fix
    looping = check_kubelet("n2", health(
        kubelet="LoadState=loaded\nActiveState=activating\nSubState=auto-restart\nNRestarts=41\nResult=exit-code",
        kubelet_journal='E1125 run.go:72] "command failed" err="failed to load kubelet config file"'))
    assert looping.detail.startswith("the kubelet is crash-looping (41 restarts)") and "failed to load" in looping.detail
    # Before kubeadm has run there (no kubelet.conf), a kubelet that does not run is expected.
    assert check_kubelet("n2", health(kubelet="ActiveState=activating\nSubState=auto-restart",
                                      kubelet_joined="")).status == "ok"


def test_disks_filling_past_the_kubelets_eviction_point_fail_and_before_it_warn() -> None:
    full = check_disk("n3", health(disk="/var/lib/kubelet tmpfs 16384 15600 784 96% /var/lib/kubelet"))
    assert full.status == "fail"
    assert full.detail == ("/var/lib/kubelet (/var/lib/kubelet) is 96% full of space (warn at 85%, the kubelet "
                           "evicts pods from 90%)")
    assert "crictl rmi --prune" in full.fix
    assert check_disk("n3", health(disk="/var/lib/etcd /dev/sdb 100 82 18 82% /var/lib/etcd")).status == "warn"
    inodes = check_disk("n3", health(inodes="/var/lib/containerd /dev/vda 1000 960 40 96% /"))
    assert inodes.status == "fail" and "96% full of inodes" in inodes.detail


@pytest.mark.parametrize("path", list(DISK_LIMITS))
def test_a_disk_exactly_at_a_mark_is_judged_at_that_mark(path: str) -> None:
    """The marks are inclusive: at exactly the warning mark it warns, at exactly the eviction mark it fails, one
    below each it does not; the same for inodes."""
    warn, fail = DISK_LIMITS[path]

    def disk(percent: int, section: str = "disk") -> str:
        return check_disk("n3", health(**{section: f"{path} /dev/sdb 1000 {percent * 10} {1000 - percent * 10} "
                                                     f"{percent}% {path}"})).status

    assert [disk(p) for p in (warn - 1, warn, fail - 1, fail)] == ["ok", "warn", "warn", "fail"]
    inode_warn, inode_fail = INODE_LIMITS
    assert [disk(p, "inodes") for p in (inode_warn - 1, inode_warn, inode_fail - 1, inode_fail)] == \
        ["ok", "warn", "warn", "fail"]
    at_mark = check_disk("n3", health(disk=f"{path} /dev/sdb 1000 {fail * 10} 0 {fail}% {path}"))
    assert f"is {fail}% full of space (warn at {warn}%, the kubelet evicts pods from {fail}%)" in at_mark.detail


def test_a_node_without_a_working_resolver_fails_its_dns_check() -> None:
    assert check_dns("n2", health(resolv=None)).detail.startswith("/etc/resolv.conf is missing")
    assert "names no nameserver" in check_dns("n2", health(resolv="present\noptions timeout:1")).detail
    stub = "present\nnameserver 127.0.0.53\noptions edns0 trust-ad"
    dead = check_dns("n2", health(resolv=stub))
    assert dead.detail == "/etc/resolv.conf points at 127.0.0.53, where nothing listens on port 53"
    assert "systemd-resolved" in dead.fix
    assert check_dns("n2", health(resolv=stub, dns_listeners="udp 127.0.0.53%lo:53\ntcp 127.0.0.53%lo:53")).status == "ok"


def test_certificates_expired_fail_and_expiring_within_a_month_warn() -> None:
    certs = ("/etc/kubernetes/pki/apiserver.crt|Dec  5 12:00:00 2026 GMT\n"
             "/etc/kubernetes/pki/ca.crt|Nov 20 09:00:00 2035 GMT\n"
             "/etc/kubernetes/admin.conf|Nov 20 12:00:00 2026 GMT")
    found = check_certs("n1", health(certs=certs), NOW, 30)
    assert found.status == "fail"
    assert found.detail == ("expired: /etc/kubernetes/admin.conf (expired 2026-11-20); expiring: "
                            "/etc/kubernetes/pki/apiserver.crt (10 days, 2026-12-05)")
    assert found.fix.startswith("renew them with `bootstrap certs renew`: `kubeadm certs renew all` on each")
    soon = check_certs("n1", health(certs=certs.rsplit("\n", 1)[0]), NOW, 30)
    assert soon.status == "warn" and soon.detail.startswith("expiring within 30 days: ")
    assert check_certs("n1", health(certs="/etc/kubernetes/pki/ca.crt|Nov 20 09:00:00 2035 GMT"), NOW, 30).status == "ok"


def test_the_doctor_warns_at_the_threshold_certs_check_and_the_renewal_timer_use() -> None:
    """certificates.renew_before_days is the one threshold: the doctor's certs check judges with it (through
    nodes/certs.py's judge, as `bootstrap certs check` does), from the settings the doctor runs with."""
    from provision.nodes.certs import judge

    in_ten_days = "/etc/kubernetes/pki/apiserver.crt|Dec  5 12:00:00 2026 GMT"
    assert check_certs("n1", health(certs=in_ten_days), NOW, 10).status == "ok"
    assert check_certs("n1", health(certs=in_ten_days), NOW, 11).status == "warn"
    node = CLUSTER.nodes[1]
    for days, status in ((5, "ok"), (60, "warn")):
        settings = Settings.model_validate({"certificates": {"renew_before_days": days}})
        found = next(f for f in judge_node(node, health(certs=in_ten_days), CLUSTER, settings, gpus=0, now=NOW)
                     if f.check == "certs")
        assert found.status == status, found
        after = datetime(2026, 12, 5, 12, tzinfo=UTC)
        assert judge("n1", "apiserver", "certificate", "p", after, None, NOW, days).status == status


GPU_SECTIONS = {"nvidia_pci": "0000:3b:00.0\n0000:86:00.0",
                "nvidia_driver": "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build",
                "nvidia_smi": "rc 0\nGPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)",
                "xid": ""}


def test_gpus_the_driver_nvidia_smi_and_xid_errors() -> None:
    assert [f.status for f in check_gpu("w1", health(**GPU_SECTIONS), 2)] == ["ok"]
    unloaded = check_gpu("w1", health(**GPU_SECTIONS | {"nvidia_driver": ""}), 2)
    assert unloaded[0].detail.startswith("the NVIDIA driver is not loaded") and "dkms" in unloaded[0].fix
    mismatch = check_gpu("w1", health(**GPU_SECTIONS | {
        "nvidia_smi": "rc 18\nFailed to initialize NVML: Driver/library version mismatch"}), 2)
    assert mismatch[0].detail == "nvidia-smi fails: Failed to initialize NVML: Driver/library version mismatch"
    fallen = "[ 812.4] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    xid = check_gpu("w1", health(**GPU_SECTIONS | {"xid": fallen}), 2)
    assert [f.status for f in xid] == ["ok", "warn"] and "Xid (PCI:0000:3b:00): 79" in xid[1].detail
    lost = check_gpu("w1", health(**GPU_SECTIONS | {"nvidia_pci": "0000:3b:00.0"}), 2)
    assert lost[0].detail == "1 NVIDIA GPUs on PCI, preflight counted 2"


URLS = kubernetes_index_urls(SETTINGS)


def test_a_package_source_the_node_cannot_reach_is_named_with_the_setting() -> None:
    assert check_package_source("n2", health(), URLS, "mirrors.kubernetes_repo").status == "ok"
    refused = check_package_source("n2", health(sources="deb 7 curl: (7) Failed to connect to 10.88.2.1 port 8081 "
                                                        "after 0 ms: Couldn't connect to server000\nrpm 7 000"),
                                   URLS, "mirrors.kubernetes_repo")
    assert refused.status == "fail"
    assert refused.detail == (f"cannot fetch {URLS['deb']}: the connection is refused: curl: (7) Failed to connect "
                              "to 10.88.2.1 port 8081 after 0 ms: Couldn't connect to server")
    assert "mirrors.kubernetes_repo" in refused.fix
    unavailable = check_package_source("n2", health(sources="deb 0 503\nrpm 0 503"), URLS, "mirrors.kubernetes_repo")
    assert unavailable.detail == f"cannot fetch {URLS['deb']}: it answers with an HTTP error (HTTP 503)"
    assert check_package_source("n2", health(sources="no-curl"), URLS, "x").status == "skip"


def test_the_clock_of_the_node_that_is_off_is_named_and_only_that_one() -> None:
    nodes = {name: replace(health(), clock_offset_s=offset, clock_uncertainty_s=0.2)
             for name, offset in (("n1", 3600.4), ("n2", 0.3), ("n3", -0.6))}
    found = check_clocks(nodes)
    assert [found[n].status for n in ("n1", "n2", "n3")] == ["fail", "ok", "ok"]
    assert found["n1"].detail.startswith("the clock is 3600 s ahead of the other nodes'")
    assert "timedatectl set-ntp true" in found["n1"].fix


def test_one_df_reads_every_watched_path_that_exists_each_on_its_own_row(tmp_path) -> None:
    """The probe asks df once for all the paths it watches; each row is named by its path, in order, and a path
    that does not exist is left out (its neighbours keep their own rows)."""
    first, second = tmp_path / "containerd", tmp_path / "etcd"
    first.mkdir()
    second.mkdir()
    script = f"disk_paths='{first} {tmp_path}/kubelet {second}'\n{DISK_ROWS}disk_rows -P; disk_rows -Pi\n"
    lines = subprocess.run(["sh"], input=script, capture_output=True, text=True, timeout=60).stdout.splitlines()
    assert [line.split()[0] for line in lines] == [str(first), str(second)] * 2
    usage = [u.path for u in parse_health(healthy_output(disk="\n".join(lines[:2]), inodes="\n".join(lines[2:]))).disk]
    assert usage == [str(first), str(second)]


def test_a_clock_far_behind_is_named_as_behind_from_the_probes_own_timing() -> None:
    """A node whose clock is an hour behind: the probe runner reads its time at the midpoint of the round trip
    (nodes/probe.py), and the doctor names that node, and only it, behind the others."""
    started = 1_767_225_600.0
    readings = {name: Reading(CLUSTER.node(name), CommandResult(name, "probe", 0, healthy_output(
        time=f"{started + 1.0 + skew:.3f}"), ""), started, started + 2.0)
                for name, skew in (("n1", -3600.0), ("n2", 0.4), ("n3", -0.2))}
    behind = readings["n1"].clock
    assert behind is not None and behind.offset_s == pytest.approx(-3600.0) and behind.uncertainty_s == 1.0
    healths = {name: parse_health(reading.stdout, reading.clock) for name, reading in readings.items()}
    found = check_clocks(healths)
    assert [found[n].status for n in ("n1", "n2", "n3")] == ["fail", "ok", "ok"]
    assert found["n1"].detail.startswith("the clock is 3600 s behind the other nodes'")
    assert "timedatectl set-ntp true" in found["n1"].fix
    # Within the limit once the round trip's uncertainty is allowed for: 6 s off with 1.5 s of doubt is not wrong.
    near = {**healths, "n1": replace(healths["n1"], clock_offset_s=-6.0, clock_uncertainty_s=1.5)}
    assert check_clocks(near)["n1"].status == "ok"


@pytest.mark.skipif(subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() != "0",
                    reason="reads what root reads")
def test_the_probe_runs_under_posix_sh_and_reads_this_machine() -> None:
    """The script as nodes get it (no package source: this machine must not reach out), here, read-only."""
    script = probe_script({})
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    output = subprocess.run(["sh"], input=script, capture_output=True, text=True, timeout=120).stdout
    found = parse_health(output)
    assert found.hostname and found.node_time_s is not None and found.os_release
    assert found.sources == ()


def test_docs_doctor_md_lists_every_check_the_judges_name_and_no_other() -> None:
    """docs/doctor.md's tables and the judges hold the same checks (node side, then the API's)."""
    # The probe runner's own (ssh, sudo, and the probe's check the doctor names) are the doctor's too.
    doctor = REPO_ROOT / "provision" / "nodes" / "doctor"
    sources = [doctor / "checks.py", doctor / "firewall.py", doctor / "run.py", doctor / "etcd.py",
               REPO_ROOT / "provision" / "kube" / "health.py", REPO_ROOT / "provision" / "diagnose" / "doctor.py",
               REPO_ROOT / "provision" / "nodes" / "probe.py"]
    named = {name for path in sources
             for name in re.findall(r"(?:_finding|Finding|NodeProbe)\(\s*\"(\w+)\"", path.read_text())}
    documented = set(re.findall(r"^\| `(\w+)` \|", (REPO_ROOT / "docs" / "doctor.md").read_text(), re.MULTILINE))
    assert named == documented
