"""Preflight's judgement, without nodes: the probe's output is parsed into facts, facts into ok/warn/fail with
a fix, and one policy decides what blocks. The probe itself is run for real on this machine."""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from provision.errors import BootstrapError
from provision.inputs.inventory import Node
from provision.inputs.platforms import X86_64_LEVEL_FLAGS, NodePython, PythonFound
from provision.inputs.settings import SshSettings
from provision.nodes.preflight.checks import (
    PREFLIGHT_POLICY,
    check_clock,
    check_gpu,
    check_isa,
    check_networks,
    check_os,
    check_ports,
    check_python,
    check_selinux,
    check_support,
    check_swap,
    check_unique,
    evaluate,
)
from provision.nodes.preflight.probe import (
    NVIDIA_GPUS,
    NVIDIA_VENDOR,
    PROBE_SCRIPT,
    Listener,
    NodeFacts,
    parse_facts,
    parse_listeners,
    parse_proc_net_tcp,
)
from provision.nodes.ssh import LocalShell, SshShell

CORE = "2.21.5"  # the controller's ansible-core, where a check depends on it
CONTROL_PLANE = Node(name="cp1", address="10.0.0.1", role="control_plane", user="ops")
WORKER = Node(name="w1", address="10.0.0.2", role="worker", user="ops")

CENTOS7_GPU_PROBE = """\
@@os-release
NAME="CentOS Linux"
VERSION="7 (Core)"
ID="centos"
ID_LIKE="rhel fedora"
VERSION_ID="7"
PRETTY_NAME="CentOS Linux 7 (Core)"
@@hostname
gpu-node-1
@@product_uuid
4C4C4544-0042-3510-8052-B4C04F384E32
@@default_iface
ens3
@@interfaces
docker0 02:42:ac:11:00:01 0
ens3 52:54:00:12:34:56 1
ens4 52:54:00:12:34:57 1
lo 00:00:00:00:00:00 0
@@cpus
16
@@meminfo
MemTotal:       65690724 kB
@@listen
LISTEN 0      128          0.0.0.0:22        0.0.0.0:*    users:(("sshd",pid=1040,fd=3))
LISTEN 0      4096               *:10250           *:*    users:(("kubelet",pid=2211,fd=20))
@@time
1700000000.250000000
@@swaps
/dev/dm-1                               partition	8388604	0	-2
@@fstab
/dev/mapper/centos-root /                       xfs     defaults        0 0
/dev/mapper/centos-swap swap                    swap    defaults        0 0
@@selinux
Enforcing
@@nvidia_pci
0000:3b:00.0
0000:af:00.0
@@lspci
3b:00.0 "3D controller" "NVIDIA Corporation" "GA100 [A100 PCIe 40GB]" -ra1 "NVIDIA Corporation" "Device 145f"
af:00.0 "3D controller" "NVIDIA Corporation" "GA100 [A100 PCIe 40GB]" -ra1 "NVIDIA Corporation" "Device 145f"
@@nvidia_driver
NVRM version: NVIDIA UNIX x86_64 Kernel Module  565.57.01  Thu Oct 10 12:29:05 UTC 2024
@@arch
x86_64
@@cpu_flags
 fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht syscall nx lm
@@python
/usr/bin/python3 3.6
@@kube
/etc/kubernetes/kubelet.conf
@@addresses
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: ens3    inet 192.168.10.21/24 brd 192.168.10.255 scope global ens3\\       valid_lft forever preferred_lft forever
5: docker0    inet 172.17.0.1/16 brd 172.17.255.255 scope global docker0\\       valid_lft forever preferred_lft forever
6: tunl0@NONE    inet 10.244.17.0/32 scope global tunl0\\       valid_lft forever preferred_lft forever
@@end
"""
PLATFORM_PYTHON = PythonFound("/usr/libexec/platform-python", (3, 6), frozenset({"dnf", "selinux"}))
PYTHON312 = PythonFound("/usr/bin/python3.12", (3, 12))


def os_release(os_id: str, version: str, name: str = "") -> dict[str, str]:
    return {"ID": os_id, "VERSION_ID": version, "NAME": name or os_id}


def facts(**changes: object) -> NodeFacts:
    base = parse_facts(CENTOS7_GPU_PROBE)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_probe_output_is_parsed_into_facts() -> None:
    found = parse_facts(CENTOS7_GPU_PROBE)
    assert found.os_release["ID"] == "centos" and found.os_release["VERSION_ID"] == "7"
    assert found.hostname == "gpu-node-1"
    assert found.product_uuid == "4c4c4544-0042-3510-8052-b4c04f384e32"
    # physical NICs and the default route's interface; docker0 and lo are not identities
    assert found.macs == {"ens3": "52:54:00:12:34:56", "ens4": "52:54:00:12:34:57"}
    assert (found.cpus, found.memory_mb) == (16, 64151)
    assert Listener(10250, "kubelet", 2211) in found.listeners
    assert found.swaps_active == ("/dev/dm-1",)
    assert found.fstab_swaps == ("/dev/mapper/centos-swap swap swap defaults 0 0",)
    assert found.selinux == "enforcing"
    assert found.gpus == ("0000:3b:00.0 GA100 [A100 PCIe 40GB]", "0000:af:00.0 GA100 [A100 PCIe 40GB]")
    assert found.kube_configs == ("/etc/kubernetes/kubelet.conf",)
    assert found.node_time_s == 1700000000.25
    assert found.arch == "x86_64" and {"sse2", "lm"} <= found.cpu_flags and "avx2" not in found.cpu_flags
    assert found.pythons == (PythonFound("/usr/bin/python3", (3, 6)),)
    assert [(name, str(address)) for name, address in found.addresses] == [
        ("lo", "127.0.0.1/8"), ("ens3", "192.168.10.21/24"), ("docker0", "172.17.0.1/16"), ("tunl0", "10.244.17.0/32")]


def test_the_nvidia_gpus_on_pci_are_the_display_controllers_of_nvidia(tmp_path) -> None:
    """The probes' PCI walk (preflight's and the doctor's NVIDIA_GPUS): an NVIDIA VGA or 3D controller counts, its
    HDMI audio function and another vendor's display controller do not; a function without readable files is
    passed over."""
    devices = {"0000:3b:00.0": ("0x10de", "0x030200", "0x2330"), "0000:3b:00.1": ("0x10de", "0x040300", "0x22a3"),
               "0000:00:02.0": ("0x8086", "0x030000", "0x9a49"), "0000:af:00.0": ("0x10de", "0x030000", "0x1db4")}
    for address, (vendor, klass, device) in devices.items():
        folder = tmp_path / address
        folder.mkdir()
        for name, value in (("vendor", vendor), ("class", klass), ("device", device)):
            (folder / name).write_text(value + "\n")
    (tmp_path / "0000:ff:00.0").mkdir()
    script = (f"nvidia_vendor={NVIDIA_VENDOR}\npci_devices={tmp_path}\n{NVIDIA_GPUS}"
              "nvidia_gpus address; echo --; nvidia_gpus device\n")
    output = LocalShell().run(script).stdout.split()
    assert output == ["0000:3b:00.0", "0000:af:00.0", "--", "0x2330", "0x1db4"]


def test_cut_short_probe_output_is_refused() -> None:
    with pytest.raises(ValueError, match="ended early"):
        parse_facts(CENTOS7_GPU_PROBE.replace("@@end\n", ""))


def test_the_probe_runs_and_parses_on_this_machine() -> None:
    result = LocalShell().run(PROBE_SCRIPT)
    assert result.ok, result.stderr
    found = parse_facts(result.stdout)
    assert found.cpus >= 1 and found.memory_mb > 0 and found.hostname
    assert found.os_release.get("ID")
    # This machine's own python3 answers the probe's question: its version, and whether it has dnf's bindings
    # (which some machines have and some do not: asked of that interpreter here, independently of the probe).
    python3 = found.python("/usr/bin/python3")
    assert found.arch and python3 is not None and python3.version >= (3, 9)
    has_dnf = LocalShell().run("/usr/bin/python3 -c 'import dnf'").ok
    assert ("dnf" in python3.modules) is has_dnf


@pytest.mark.parametrize(("os_id", "version", "supported"), [
    ("centos", "9", True), ("centos", "10", True), ("centos", "8", False), ("rocky", "8.10", True),
    ("rocky", "9.4", True), ("rocky", "10.0", True), ("almalinux", "10.0", True), ("rhel", "8.10", True),
    ("ol", "9.5", True), ("anolis", "8.8", True), ("alinux", "3", True), ("openEuler", "22.03", True),
    ("openEuler", "24.03", True), ("openeuler", "24.03", True), ("ubuntu", "22.04", True), ("ubuntu", "24.04", True),
    ("ubuntu", "20.04", False), ("ubuntu", "22.10", False), ("debian", "12", True), ("debian", "13", True),
    ("debian", "11", False), ("fedora", "40", False), ("", "", False), ("centos", "7", False), ("rhel", "7.9", False),
])
def test_supported_systems(os_id: str, version: str, supported: bool) -> None:
    finding = check_os(facts(os_release=os_release(os_id, version)), CORE)
    assert finding.problem is not supported
    if not supported:
        # The fix names what to use instead: the whole list, or for an old release its successor.
        assert "Rocky Linux" in finding.fix or "Ubuntu 22.04" in finding.fix or "Debian 12" in finding.fix


def test_centos_7_is_refused_with_the_reasons_and_the_way_out() -> None:
    finding = check_os(facts(), CORE)
    assert finding.problem and finding.detail.startswith("CentOS 7: ")
    for reason in ("end of life since June 2024", "no Python 3.9 or newer for ansible-core", "kernel 3.10 runs cgroup "
                   "v1 only, which the kubelet refuses from Kubernetes 1.35", "no containerd 2 packages"):
        assert reason in finding.detail
    assert "Rocky Linux or AlmaLinux 9 or 10" in finding.fix
    assert "Alibaba Cloud Linux 3 / Anolis OS 8 with `mirrors.profile: cn`" in finding.fix
    assert PREFLIGHT_POLICY.status("os", WORKER.is_control_plane) == "fail"


@pytest.mark.parametrize(("os_id", "version"), [("rocky", "8.10"), ("almalinux", "8.9"), ("rhel", "8.10"),
                                                ("ol", "8.10"), ("anolis", "8.8"), ("alinux", "3")])
def test_el8_family_nodes_need_ansible_core_2_21_and_are_refused_with_the_way_out_under_2_19(
        os_id: str, version: str) -> None:
    node = facts(os_release=os_release(os_id, version))
    refused = check_os(node, "2.19.14")
    assert refused.problem
    assert "EL8-family nodes need ansible-core 2.21 (Python >= 3.12 on this machine)" in refused.detail
    assert "this machine runs ansible-core 2.19.14" in refused.detail
    assert refused.fix == "run bootstrap from .venv-modern / install with Python 3.12+"
    assert not check_os(node, "2.21.0").problem
    # Every other supported system is managed by 2.19 as well.
    assert not check_os(facts(os_release=os_release("rocky", "9.4")), "2.19.14").problem


def test_the_python_the_node_is_managed_with_comes_from_the_table_and_the_probe() -> None:
    el8 = facts(os_release=os_release("rocky", "8.10"))
    finding, chosen = check_python(replace(el8, pythons=(PLATFORM_PYTHON,)))
    # Missing: prepare installs it before anything needs it; dnf keeps running on platform-python.
    assert chosen == NodePython("/usr/bin/python3.12", "python3.12", "rocky", "8")
    assert not finding.problem and "prepare installs python3.12 first" in finding.detail
    finding, chosen = check_python(replace(el8, pythons=(PLATFORM_PYTHON, PYTHON312)))
    assert chosen == NodePython("/usr/bin/python3.12", None, "rocky", "8") and "3.12" in finding.detail
    # Without the dnf bindings anywhere, nothing could be installed.
    finding, chosen = check_python(replace(el8, pythons=(PYTHON312,)))
    assert chosen is None and finding.problem and "python3-dnf" in finding.fix
    el9 = replace(el8, os_release=os_release("rocky", "9.4"))
    _, chosen = check_python(replace(el9, pythons=(PythonFound("/usr/bin/python3", (3, 9), frozenset({"dnf"})),)))
    assert chosen == NodePython("/usr/bin/python3", None, "rocky", "9")
    finding, chosen = check_python(replace(el9, pythons=(PythonFound("/usr/bin/python3", (3, 9)),)))
    assert chosen is None and "/usr/bin/python3 cannot import dnf" in finding.detail
    debian = replace(el8, os_release=os_release("debian", "12"))
    finding, chosen = check_python(replace(debian, pythons=()))
    assert chosen is None and finding.problem and "apt-get install python3" in finding.fix
    finding, chosen = check_python(replace(debian, pythons=(PythonFound("/usr/bin/python3", (3, 8)),)))
    assert chosen is None and "older than ansible-core manages" in finding.detail
    # A refused system gets no interpreter, and no second problem.
    finding, chosen = check_python(facts())
    assert chosen is None and not finding.problem


def test_el10_needs_x86_64_v3_and_preflight_names_the_missing_cpu_features() -> None:
    v2, v3 = X86_64_LEVEL_FLAGS[2], X86_64_LEVEL_FLAGS[3]
    rocky10 = facts(os_release=os_release("rocky", "10.0", "Rocky Linux"), cpu_flags=v2 | {"sse2", "lm"})
    refused = check_isa(rocky10)
    assert refused.problem and "Rocky Linux 10 needs x86-64-v3" in refused.detail
    assert "avx2" in refused.detail and "host-passthrough" in refused.fix and "x86_64_v2" in refused.fix
    assert not check_isa(replace(rocky10, cpu_flags=v3)).problem
    # AlmaLinux 10 is also built for x86-64-v2; EL9 has no such baseline; other architectures are not judged.
    assert not check_isa(replace(rocky10, os_release=os_release("almalinux", "10.0"))).problem
    assert not check_isa(replace(rocky10, os_release=os_release("rocky", "9.4"))).problem
    assert not check_isa(replace(rocky10, arch="aarch64")).problem
    assert PREFLIGHT_POLICY.status("isa", WORKER.is_control_plane) == "fail"


def test_debian_testing_runs_with_a_warning_that_says_why() -> None:
    sid = facts(os_release={"ID": "debian", "PRETTY_NAME": "Debian GNU/Linux forky/sid", "NAME": "Debian GNU/Linux"})
    assert not check_os(sid, CORE).problem
    warned = check_support(sid)
    assert warned.problem and "changes every day" in warned.detail and "Debian 13" in warned.fix
    results = {c.check: c.status for c in evaluate([WORKER], {"w1": sid}, CORE)["w1"].checks}
    assert results["support"] == "warn" and results["os"] == "ok"


def test_cpu_and_memory_block_on_the_control_plane_and_warn_on_workers() -> None:
    small = facts(cpus=1, memory_mb=1024)
    cp = {c.check: c for c in evaluate([CONTROL_PLANE], {"cp1": small}, CORE)["cp1"].checks}
    worker = {c.check: c for c in evaluate([WORKER], {"w1": small}, CORE)["w1"].checks}
    assert (cp["cpu"].status, cp["memory"].status) == ("fail", "fail")
    assert (worker["cpu"].status, worker["memory"].status) == ("warn", "warn")
    assert "1700 MB" in cp["memory"].detail
    assert PREFLIGHT_POLICY.status("swap", CONTROL_PLANE.is_control_plane) == "warn"
    assert PREFLIGHT_POLICY.status("ports", WORKER.is_control_plane) == "fail"


def test_a_foreign_listener_on_a_kubernetes_port_blocks() -> None:
    taken = facts(listeners=(Listener(6443, "python3", 812),), kube_configs=())
    finding = check_ports(taken, CONTROL_PLANE)
    assert finding.problem and finding.detail == "in use: 6443 (python3 pid 812)"
    assert "sport = :6443" in finding.fix
    # a worker only needs 10250
    assert not check_ports(taken, WORKER).problem


def test_a_node_already_in_the_cluster_is_not_blocked_by_its_own_components() -> None:
    running = facts(listeners=(Listener(6443, "kube-apiserver", 1), Listener(2379, "etcd", 2),
                               Listener(10250, "kubelet", 3)), kube_configs=("/etc/kubernetes/admin.conf",))
    finding = check_ports(running, CONTROL_PLANE)
    assert not finding.problem and finding.detail == "already part of the cluster (etcd, kube-apiserver, kubelet)"
    # ...but a stranger among them still blocks
    mixed = replace(running, listeners=(*running.listeners, Listener(10259, "nginx", 9)))
    assert check_ports(mixed, CONTROL_PLANE).problem


def test_identities_must_differ_between_nodes() -> None:
    a = facts(hostname="node-a", product_uuid="u-1", macs={"eth0": "52:54:00:00:00:01"})
    b = facts(hostname="NODE-A", product_uuid="u-2", macs={"eth0": "52:54:00:00:00:02"})
    c = facts(hostname="node-c", product_uuid="u-1", macs={"eth0": "52:54:00:00:00:02"})
    findings = check_unique({"a": a, "b": b, "c": c})
    problems = {name: {f.check: f.detail for f in found if f.problem} for name, found in findings.items()}
    assert problems == {
        "a": {"hostname": "hostname node-a also on b", "product_uuid": "product_uuid u-1 also on c"},
        "b": {"hostname": "hostname node-a also on a", "mac": "mac 52:54:00:00:00:02 also on c"},
        "c": {"product_uuid": "product_uuid u-1 also on a", "mac": "mac 52:54:00:00:00:02 also on b"},
    }


def test_clock_skew_beyond_the_limit_blocks_allowing_for_the_round_trip() -> None:
    assert not check_clock(facts(clock_offset_s=29.0)).problem
    assert not check_clock(facts(clock_offset_s=-33.0, clock_uncertainty_s=4.0)).problem
    late = check_clock(facts(clock_offset_s=-95.0, clock_uncertainty_s=0.1))
    assert late.problem and late.detail.startswith("-95 s") and "timedatectl" in late.fix


def test_swap_and_selinux_warn_with_what_prepare_will_do() -> None:
    swap = check_swap(facts())
    assert swap.problem and "active: /dev/dm-1" in swap.detail and "prepare turns swap off" in swap.fix
    assert not check_swap(facts(swaps_active=(), fstab_swaps=())).problem
    assert check_selinux(facts()).problem
    assert not check_selinux(facts(selinux="permissive")).problem
    results = {c.check: c.status for c in evaluate([CONTROL_PLANE], {"cp1": facts()}, CORE)["cp1"].checks}
    assert results["swap"] == results["selinux"] == "warn"


def test_gpus_are_counted_unless_the_inventory_opts_out() -> None:
    finding, count = check_gpu(facts(), CONTROL_PLANE)
    assert count == 2 and finding.detail == "2 NVIDIA GPUs (driver 565.57.01)"
    _, count = check_gpu(facts(), replace(CONTROL_PLANE, gpu="false"))
    assert count == 0
    finding, _ = check_gpu(facts(gpus=(), nvidia_driver=None), replace(WORKER, gpu="true"))
    assert finding.problem and "no NVIDIA GPU" in finding.detail
    finding, count = check_gpu(facts(nvidia_driver=None), WORKER)
    assert count == 2 and not finding.problem and "no driver yet" in finding.detail


def test_ss_rows_without_process_names_still_count() -> None:
    rows = ["LISTEN 0 4096 [::]:6443 [::]:*", "LISTEN 0 128 127.0.0.1:2379 0.0.0.0:*", "garbage"]
    assert parse_listeners(rows) == (Listener(6443), Listener(2379))


def test_without_ss_listening_ports_come_from_proc_net_tcp() -> None:
    rows = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid",
            "   0: 00000000:192B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0",
            "   1: 0100007F:0016 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0",
            "   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 0"]
    assert parse_proc_net_tcp(rows) == (Listener(22), Listener(6443))
    output = CENTOS7_GPU_PROBE.replace("@@listen", "@@proc_net_tcp").replace(
        'LISTEN 0      128          0.0.0.0:22        0.0.0.0:*    users:(("sshd",pid=1040,fd=3))', rows[1])
    assert Listener(6443) in parse_facts(output).listeners


def test_an_address_nobody_answers_on_fails_in_bounded_time_naming_the_host() -> None:
    node = Node(name="nobody", address="127.0.0.1", port=1, role="worker", user="ops")
    started = time.monotonic()
    with pytest.raises(BootstrapError, match=r"^nobody \(ops@127\.0\.0\.1:1\): unreachable: .*port 1"):
        SshShell(node, SshSettings(connect_timeout_s=3)).open()
    assert time.monotonic() - started < 5


def test_a_port_that_accepts_but_never_speaks_ssh_fails_in_bounded_time_with_the_fix(tmp_path) -> None:
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        node = Node(name="mute", address="127.0.0.1", port=port, role="worker", user="ops")
        settings = SshSettings(connect_timeout_s=2, known_hosts_file=str(tmp_path / "known_hosts"))
        started = time.monotonic()
        with pytest.raises(BootstrapError) as raised:
            SshShell(node, settings).open()
    assert time.monotonic() - started < 5
    assert str(raised.value).startswith(f"mute (ops@127.0.0.1:{port}): ")
    assert f"no SSH server answered on port {port} within 2 s" in str(raised.value)
    assert "ansible_port" in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize(("settings", "finding"), [
    # The defaults: Calico's tunnel holds a pod address on a node already in the cluster, which is no collision.
    ({}, None),
    ({"kubernetes": {"pod_cidr": "192.168.0.0/16"}},
     "interface ens3 has 192.168.10.21/24, which overlaps kubernetes.pod_cidr 192.168.0.0/16"),
    ({"kubernetes": {"service_cidr": "172.16.0.0/12"}},
     "interface docker0 has 172.17.0.1/16, which overlaps kubernetes.service_cidr 172.16.0.0/12"),
])
def test_a_node_network_inside_the_pod_or_service_cidr_blocks_naming_the_interface_and_the_setting(
        settings: dict[str, object], finding: str | None) -> None:
    """The node's own networks against the CIDRs, judged by preflight before anything is installed (the settings
    alone, pod against service, are judged when they are read)."""
    from provision.inputs.settings import parse_settings

    result = check_networks(facts(), parse_settings(settings))
    if finding is None:
        assert not result.problem
        return
    assert result.problem and result.detail.startswith(finding)
    assert "set kubernetes." in result.fix and "cluster.yaml" in result.fix
    assert PREFLIGHT_POLICY.status("networks", WORKER.is_control_plane) == "fail"
