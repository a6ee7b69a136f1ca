"""The doctor's firewall judge: does a node's firewall let in the ports kubeadm and Calico need on its role (the
ports prepare opens, render/node_tables.py)? Pure, like the other judges (checks.py): the probe's output in
(NodeHealth: `iptables-save`, `nft -j list ruleset`, firewalld's and ufw's listings), a Finding out.

The input chains are read as rules that accept or drop new connections by port, in order; rules about loopback,
established or invalid packets, and jumps to other chains (kube-proxy's, Calico's), are left out. firewalld and ufw
keep their rules in chains of their own behind a dropping policy, so their own listings are read instead.
"""
from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from provision.findings import Finding
from provision.nodes.doctor.probe import NodeHealth
from provision.render.node_tables import open_ports


@dataclass(frozen=True)
class Port:
    low: int
    high: int
    protocol: str  # tcp or udp

    def __str__(self) -> str:
        span = str(self.low) if self.low == self.high else f"{self.low}-{self.high}"
        return f"{span}/{self.protocol}"

    def overlaps(self, low: int, high: int, protocol: str | None) -> bool:
        return (protocol in (None, self.protocol)) and low <= self.high and self.low <= high


def _port(text: str) -> Port:
    span, _, protocol = text.partition("/")
    low, _, high = span.partition("-")
    return Port(int(low), int(high or low), protocol)


def required_ports(control_plane: bool) -> tuple[Port, ...]:
    """The ports prepare opens on a node of this role (render/node_tables.py: the one table the role is given)."""
    return tuple(_port(rule.spec) for rule in open_ports(control_plane))


def _span(text: str) -> tuple[int, int] | None:
    low, _, high = text.replace(":", "-").partition("-")
    if not low.isdigit() or (high and not high.isdigit()):
        return None
    return int(low), int(high or low)


@dataclass(frozen=True)
class _Rule:
    verdict: str  # accept or drop
    protocol: str | None  # None: any
    spans: tuple[tuple[int, int], ...] | None  # None: every port
    where: str


def _iptables_rules(text: str) -> tuple[list[_Rule], bool]:
    """The filter table's INPUT chain (iptables-save): rules that accept or drop new connections by port, in order,
    and whether the chain's policy drops. Rules that only concern loopback, established or invalid packets, or
    that jump elsewhere (kube-proxy's, Calico's, ufw's chains) are left out."""
    rules, policy_drop = [], False
    for line in text.splitlines():
        if line.startswith(":INPUT "):
            policy_drop = line.split()[1] == "DROP"
            continue
        if not line.startswith("-A INPUT "):
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        target = words[words.index("-j") + 1] if "-j" in words[:-1] else ""
        if target not in ("ACCEPT", "DROP", "REJECT"):
            continue
        if {"--ctstate", "--state", "!"} & set(words) or ("-i" in words and words[words.index("-i") + 1] == "lo") \
                or any(w.startswith("127.") for w in words):
            continue
        protocol = words[words.index("-p") + 1] if "-p" in words[:-1] else None
        spans: list[tuple[int, int]] | None = None
        for flag in ("--dport", "--dports", "--destination-port", "--destination-ports"):
            if flag in words[:-1]:
                spans = [s for s in map(_span, words[words.index(flag) + 1].split(",")) if s]
        rules.append(_Rule("accept" if target == "ACCEPT" else "drop", protocol,
                           tuple(spans) if spans is not None else None, f"iptables: {line}"))
    return rules, policy_drop


def _nft_match(expr: dict[str, Any]) -> tuple[str | None, list[tuple[int, int]]] | None:
    """A `tcp dport ...` / `th dport ...` match -> (protocol, spans); None for other expressions."""
    match = expr.get("match")
    if not isinstance(match, dict) or match.get("op") not in ("==", "in"):
        return None
    left = match.get("left", {}).get("payload", {}) if isinstance(match.get("left"), dict) else {}
    if left.get("field") != "dport":
        return None
    protocol = left.get("protocol") if left.get("protocol") in ("tcp", "udp") else None
    right = match.get("right")
    values = right.get("set", []) if isinstance(right, dict) and "set" in right else [right]
    spans = []
    for value in values:
        if isinstance(value, int):
            spans.append((value, value))
        elif isinstance(value, dict) and isinstance(value.get("range"), list) and len(value["range"]) == 2:
            spans.append((int(value["range"][0]), int(value["range"][1])))
    return protocol, spans


def _about_state_or_loopback(expr: dict[str, Any]) -> bool:
    """A match on conntrack state (established, invalid) or on the input interface: not about new connections to
    a port from other machines."""
    match = expr.get("match")
    left = match.get("left") if isinstance(match, dict) else None
    return isinstance(left, dict) and ("ct" in left or left.get("meta", {}).get("key") == "iifname")


def _nft_rules(text: str, skip_tables: frozenset[str]) -> tuple[list[_Rule], bool]:
    """Native nftables (`nft -j list ruleset`): the rules of base chains on the input hook, read as the iptables
    ones are; whether any such chain's policy drops."""
    try:
        items = json.loads(text).get("nftables", []) if text.strip() else []
    except (ValueError, AttributeError):
        return [], False
    chains, policy_drop = set(), False
    for item in items:
        chain = item.get("chain") if isinstance(item, dict) else None
        if chain and chain.get("hook") == "input" and chain.get("table") not in skip_tables:
            chains.add((chain.get("family"), chain.get("table"), chain.get("name")))
            policy_drop |= chain.get("policy") == "drop"
    rules = []
    for item in items:
        rule = item.get("rule") if isinstance(item, dict) else None
        if not rule or (rule.get("family"), rule.get("table"), rule.get("chain")) not in chains:
            continue
        exprs = rule.get("expr", [])
        verdict = next(("accept" if "accept" in e else "drop" for e in exprs
                        if isinstance(e, dict) and ({"accept", "drop", "reject"} & set(e))), None)
        if verdict is None or any(_about_state_or_loopback(e) for e in exprs if isinstance(e, dict)):
            continue
        ports = [m for m in map(_nft_match, [e for e in exprs if isinstance(e, dict)]) if m is not None]
        protocol, spans = (ports[0][0], tuple(ports[0][1])) if ports else (None, None)
        rules.append(_Rule(verdict, protocol, spans, f"nftables: table {rule.get('family')} {rule.get('table')}, "
                                                     f"chain {rule.get('chain')}"))
    return rules, policy_drop


def _blocked_by_rules(port: Port, rules: list[_Rule], policy_drop: bool) -> str | None:
    """What drops new connections to `port`: the first rule that decides for it, else a dropping policy."""
    for rule in rules:
        if rule.spans is not None and not any(port.overlaps(low, high, rule.protocol) for low, high in rule.spans):
            continue
        if rule.spans is None and rule.protocol not in (None, port.protocol):
            continue
        return rule.where if rule.verdict == "drop" else None
    return "the input chain's policy drops it" if policy_drop else None


def _allowed_by(port: Port, allowed: Iterable[str]) -> bool:
    """firewalld's `6443/tcp 2379-2380/tcp` or ufw's `6443/tcp 2379:2380/tcp 22` port specs."""
    for spec in allowed:
        span, _, protocol = spec.partition("/")
        found = _span(span)
        if found and port.overlaps(found[0], found[1], protocol or None) \
                and found[0] <= port.low and port.high <= found[1]:
            return True
    return False


def check_firewall(node: str, health: NodeHealth, ports: tuple[Port, ...]) -> Finding:
    """Does the node's firewall let in the ports kubeadm and Calico need (its role's, as prepare opens them)?"""
    blocked: dict[str, str] = {}
    ufw_active = bool(health.ufw) and health.ufw[0].strip().lower() == "status: active"
    skip = frozenset({"firewalld"}) if health.firewalld is not None else frozenset()
    iptables, iptables_drop = _iptables_rules(health.iptables)
    nft, nft_drop = _nft_rules(health.nft, skip)
    for port in ports:
        # ufw and firewalld keep their rules in chains of their own, behind a dropping policy: read them instead.
        where = (_blocked_by_rules(port, iptables, iptables_drop and not ufw_active)
                 or _blocked_by_rules(port, nft, nft_drop and not ufw_active and health.firewalld is None))
        if where is None and health.firewalld is not None and not _allowed_by(port, health.firewalld.get("ports", ())):
            where = "firewalld does not open it"
        if where is None and ufw_active:
            allowed = [line.split()[0] for line in health.ufw[1:] if len(line.split()) > 1
                       and line.split()[1] == "ALLOW"]
            if not _allowed_by(port, allowed):
                where = "ufw does not allow it"
        if where:
            blocked[str(port)] = where
    if not blocked:
        return Finding("firewall", node, "ok", f"{len(ports)} ports open")
    shown = "; ".join(f"{port} ({where})" for port, where in blocked.items())
    return Finding("firewall", node, "fail", f"blocks what kubeadm and Calico need: {shown}",
                   "remove the rule (`iptables -D INPUT ...` with the rule as shown), or open the ports; "
                   "with firewall.mode: open-ports, `bootstrap prepare` opens them in firewalld or ufw")
