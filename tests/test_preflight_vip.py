"""Preflight and the control-plane endpoint: each control plane's view of the VIP (recorded `ip` output in, a named
finding out) decides whether it is on their own network and free, and where kube-vip announces it; without a VIP,
the local proxy's port must be free on every node."""
from __future__ import annotations

from dataclasses import replace

import pytest

from provision.findings import ok
from provision.nodes.preflight.checks import check_proxy_port, check_vip
from provision.nodes.preflight.probe import Listener, VipFacts, parse_facts, probe_script

VIP = "10.88.7.99"


def probe_output(held: str = "", route: str = "", neighbour: str = "") -> str:
    return (f"@@os-release\nID=debian\n@@vip_held\n{held}\n@@vip_route\n{route}\n@@vip_neighbour\n{neighbour}\n"
            "@@end\n")


FREE_ROUTE = f"{VIP} dev eth0 src 10.88.7.11 uid 0 \\    cache "


def test_the_probe_reads_the_vip_only_when_there_is_one() -> None:
    assert probe_script(VIP).startswith(f"vip={VIP}\n")
    assert probe_script().startswith("vip=\n")
    assert parse_facts("@@os-release\nID=debian\n@@end\n").vip is None


@pytest.mark.parametrize("output,expected", [
    (probe_output(route=FREE_ROUTE, neighbour=f"{VIP} dev eth0  FAILED"),
     VipFacts(held_on=None, route_dev="eth0", route_via=None, answered_by=None)),
    (probe_output(route=f"{VIP} via 10.0.0.1 dev ens3 src 10.0.0.5 uid 0 \\    cache "),
     VipFacts(held_on=None, route_dev="ens3", route_via="10.0.0.1", answered_by=None)),
    (probe_output(route=FREE_ROUTE, neighbour=f"{VIP} dev eth0 lladdr 52:54:00:aa:bb:cc REACHABLE"),
     VipFacts(held_on=None, route_dev="eth0", route_via=None, answered_by="52:54:00:aa:bb:cc")),
    (probe_output(held=f"2: eth1    inet {VIP}/32 scope global eth1\\       valid_lft forever preferred_lft forever",
                  route=f"local {VIP} dev lo table local src {VIP} uid 0 \\    cache <local> "),
     VipFacts(held_on="eth1", route_dev="lo", route_via=None, answered_by=None)),
    (probe_output(), VipFacts(held_on=None, route_dev=None, route_via=None, answered_by=None)),
], ids=["free", "behind-a-router", "taken", "held-here", "no-route"])
def test_ip_output_is_read_into_vip_facts(output: str, expected: VipFacts) -> None:
    assert parse_facts(output).vip == expected


def test_a_free_vip_on_the_control_planes_network_passes_and_names_the_interface() -> None:
    facts = VipFacts(held_on=None, route_dev="eth0", route_via=None, answered_by=None)
    finding = check_vip(VIP, facts, {})
    assert not finding.problem and finding.detail == f"{VIP} free, on eth0"
    assert facts.interface == "eth0"


def test_a_vip_behind_a_router_is_refused_because_arp_does_not_cross_it() -> None:
    finding = check_vip(VIP, VipFacts(None, "ens3", "10.0.0.1", None), {})
    assert finding.problem
    assert finding.detail == f"{VIP} is reached through the router 10.0.0.1 (on ens3), not on this node's own network"
    assert "control planes' own subnet" in finding.fix


def test_a_vip_another_machine_answers_for_is_refused() -> None:
    finding = check_vip(VIP, VipFacts(None, "eth0", None, "52:54:00:aa:bb:cc"), {})
    assert finding.problem and "taken: 52:54:00:aa:bb:cc answers for it on eth0" in finding.detail
    assert "pick a free address for control_plane.vip" in finding.fix


def test_on_a_formed_cluster_the_vip_held_by_one_of_our_control_planes_passes_everywhere() -> None:
    # cp2 sees cp1's MAC answer for the VIP: that is kube-vip on cp1, not a stranger.
    finding = check_vip(VIP, VipFacts(None, "eth0", None, "52:54:00:aa:bb:cc"), {"cp1": "eth0"})
    assert not finding.problem and finding.detail == f"{VIP} held by cp1 (eth0): kube-vip"


def test_no_route_at_all_is_refused() -> None:
    finding = check_vip(VIP, VipFacts(None, None, None, None), {})
    assert finding.problem and finding.detail == f"no route to the VIP {VIP}"


def test_the_local_proxys_port_must_be_free_or_the_proxys_own() -> None:
    base = parse_facts("@@os-release\nID=debian\n@@end\n")

    def with_listeners(*listeners: Listener) -> object:
        return check_proxy_port(replace(base, listeners=listeners), 6444)

    assert with_listeners(Listener(22, "sshd")) == ok("proxy_port", "6444 free")
    assert with_listeners(Listener(6444, "haproxy", 812)) == ok("proxy_port", "6444: the local API proxy")
    taken = with_listeners(Listener(6444, "nginx", 77))
    assert taken.problem and taken.detail == "6444, where the local API proxy listens, is held by nginx (pid 77)"
    assert "control_plane.vip" in taken.fix
