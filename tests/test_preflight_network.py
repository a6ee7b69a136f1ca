"""Preflight's network check: each node's NIC speed and RDMA devices, and a warning when a multi-node smoke test
would cross a link slower than smoke_test.min_link_gbps (seed 004: 1 GbE throttles multi-node training)."""
from __future__ import annotations

import subprocess

from provision.inputs.inventory import Node
from provision.nodes.nic import PROBE_SECTION, Links, Nic, RdmaPort, check_links, parse_links, slowest
from provision.nodes.preflight.checks import evaluate
from provision.nodes.preflight.probe import PROBE_SCRIPT, parse_facts, read_sections

# The controller's ansible-core, where a check depends on it (none of the network checks does).
CORE = "2.21.5"

WORKER = Node(name="w1", address="10.0.0.2", role="worker", user="ops")

# What the probe printed on a GPU server with a 1 GbE management port, a 25 GbE port and a ConnectX HCA.
PROBE_OUTPUT = """\
@@os-release
ID=ubuntu
VERSION_ID="22.04"
@@hostname
gpu-2
@@default_iface
eno1
@@cpus
64
@@meminfo
MemTotal:       527999836 kB
@@nics
eno1 1000 up
ens1f0 25000 up
ens1f1 -1 down
@@rdma
mlx5_0 1 InfiniBand 200 Gb/sec (4X HDR)
mlx5_1 1 Ethernet 25 Gb/sec (1X EDR)
@@end
"""
ONE_GBE = Links((Nic("eno1", 1000, True), Nic("ens1f0", 25000, True)), (), "eno1")


def test_the_probe_output_names_every_nic_and_rdma_port() -> None:
    links = parse_facts(PROBE_OUTPUT).links
    assert links.nics == (Nic("eno1", 1000, True), Nic("ens1f0", 25000, True), Nic("ens1f1", None, False))
    assert links.rdma == (RdmaPort("mlx5_0", "1", "InfiniBand", 200.0), RdmaPort("mlx5_1", "1", "Ethernet", 25.0))
    assert links.training_nic == Nic("eno1", 1000, True)
    # NCCL takes the RDMA device when there is one: the link training crosses is the fastest port.
    assert links.link_gbps == 200.0


def test_a_slow_default_link_warns_only_when_training_spans_nodes() -> None:
    problem, detail, fix = check_links(ONE_GBE, multi_node=True, min_gbps=10)
    assert problem
    assert detail == "eno1 1 Gb/s: multi-node training over a 1 Gb/s link is throttled by its all-reduce (under 10 Gb/s)"
    assert "smoke_test.nodes: 1" in fix and "NCCL_SOCKET_IFNAME" in fix and "eno1 is the default route's" in fix
    assert check_links(ONE_GBE, multi_node=False, min_gbps=10) == (False, "eno1 1 Gb/s", "")


def test_rdma_a_fast_nic_or_an_unknown_speed_is_not_a_problem() -> None:
    with_rdma = Links(ONE_GBE.nics, (RdmaPort("mlx5_0", "1", "InfiniBand", 100.0),), "eno1")
    assert check_links(with_rdma, multi_node=True, min_gbps=10) == (
        False, "eno1 1 Gb/s; RDMA mlx5_0/1 InfiniBand 100 Gb/s", "")
    fast = Links((Nic("ens1f0", 25000, True),), (), "ens1f0")
    assert not check_links(fast, multi_node=True, min_gbps=10)[0]
    virtual = Links((Nic("ens3", None, True),), (), "ens3")
    assert check_links(virtual, multi_node=True, min_gbps=10) == (False, "ens3 speed unknown", "")
    assert not check_links(Links(), multi_node=True, min_gbps=10)[0]


def test_without_a_default_route_the_fastest_nic_that_is_up_carries_training() -> None:
    links = Links((Nic("eno1", 1000, True), Nic("ens1f0", 25000, True), Nic("ens1f1", 100000, False)), (), "")
    assert links.training_nic == Nic("ens1f0", 25000, True)
    assert slowest([links, ONE_GBE, Links()]) == 1.0 and slowest([Links()]) is None


def test_preflight_warns_about_a_slow_link_and_never_blocks() -> None:
    facts = parse_facts(PROBE_OUTPUT.replace("@@rdma\nmlx5_0 1 InfiniBand 200 Gb/sec (4X HDR)\n"
                                             "mlx5_1 1 Ethernet 25 Gb/sec (1X EDR)\n", ""))
    checks = evaluate([WORKER], {"w1": facts}, CORE, multi_node=True, min_link_gbps=10)["w1"].checks
    network = next(c for c in checks if c.check == "network")
    assert network.status == "warn" and "1 Gb/s link is throttled" in network.detail
    checks = evaluate([WORKER], {"w1": facts}, CORE)["w1"].checks
    assert next(c for c in checks if c.check == "network").status == "ok"


def test_the_probe_section_is_part_of_the_script_and_runs_here() -> None:
    assert PROBE_SECTION in PROBE_SCRIPT and PROBE_SCRIPT.rstrip().endswith("section end")
    script = "section() { echo \"@@$1\"; }\n" + PROBE_SECTION + "section end\n"
    output = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=True, timeout=30).stdout
    links = parse_links(read_sections(output))
    # Whatever this machine has: every NIC line parsed, no RDMA invented.
    assert all(nic.name and (nic.speed_mbps is None or nic.speed_mbps > 0) for nic in links.nics)
    assert len(links.nics) == len(read_sections(output).get("nics", []))
