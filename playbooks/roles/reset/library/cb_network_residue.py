#!/usr/bin/python
"""Remove the network state a kubeadm cluster with Calico and kube-proxy leaves on a node.

iptables chains (KUBE-*, cali-*) and every rule that jumps to them or carries Calico's "cali:" comment, in
the legacy and the nft back end of iptables and ip6tables; kube-proxy's and Calico's nftables tables; IPVS
virtual services; Calico's and kube-proxy's interfaces; routes BIRD installed; CNI network namespaces; the
control-plane VIP where kube-vip left it on an interface.
Reports changed only when something was there, so a second run changes nothing. Check mode reports what
would be removed.
"""
from __future__ import annotations

import os
import re
import shutil

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: cb_network_residue
short_description: Remove the iptables, nftables, IPVS, interface and route residue of a Kubernetes node
options:
  chain_prefixes:
    description: Chains whose names start with one of these are removed, with every rule jumping to them.
    type: list
    elements: str
    default: [KUBE-, cali-]
  comment_prefixes:
    description: Rules whose comment starts with one of these are removed.
    type: list
    elements: str
    default: ["cali:"]
  interface_patterns:
    description: Regular expressions (full match) of interface names to delete.
    type: list
    elements: str
  nft_tables:
    description: nftables tables (family name) to delete.
    type: list
    elements: str
  route_protocols:
    description: Route protocols whose IPv4 routes are flushed (Calico's BIRD installs "bird").
    type: list
    elements: str
    default: [bird]
  addresses:
    description: IPv4 addresses to take off every interface that holds them (the VIP kube-vip announced).
    type: list
    elements: str
    default: []
"""

SAVE_TOOLS = (
    ("iptables-legacy-save", "iptables-legacy-restore"),
    ("iptables-nft-save", "iptables-nft-restore"),
    ("ip6tables-legacy-save", "ip6tables-legacy-restore"),
    ("ip6tables-nft-save", "ip6tables-nft-restore"),
)
# Distributions without the split binaries ship only these (one back end).
FALLBACK_TOOLS = (("iptables-save", "iptables-restore"), ("ip6tables-save", "ip6tables-restore"))
# Devices a kernel module creates for itself, which may not be deletable.
FALLBACK_DEVICES = ("tunl0",)
JUMP_RE = re.compile(r"\s-[jg]\s+(\S+)")
COMMENT_RE = re.compile(r'--comment\s+(?:"([^"]*)"|(\S+))')


def _tools() -> list[tuple[str, str]]:
    found = [(s, r) for s, r in SAVE_TOOLS if shutil.which(s) and shutil.which(r)]
    if found:
        return found
    return [(s, r) for s, r in FALLBACK_TOOLS if shutil.which(s) and shutil.which(r)]


def _is_ours(chain: str, prefixes: list[str]) -> bool:
    return chain.startswith(tuple(prefixes))


def filter_ruleset(text: str, chain_prefixes: list[str], comment_prefixes: list[str]) -> tuple[str, list[str], int]:
    """The iptables-save text without our chains and rules; the tables it touched are kept whole, the
    others dropped (so a restore rewrites only those). Returns (text, chains removed, rules removed)."""
    tables: list[tuple[str, list[str], bool]] = []
    chains: list[str] = []
    rules = 0
    current: list[str] | None = None
    touched = False
    name = ""
    for line in text.splitlines():
        if line.startswith("*"):
            name, current, touched = line[1:], [line], False
            continue
        if current is None:
            continue
        if line == "COMMIT":
            current.append(line)
            tables.append((name, current, touched))
            current = None
            continue
        if line.startswith(":"):
            chain = line[1:].split()[0]
            if _is_ours(chain, chain_prefixes):
                chains.append(f"{name}/{chain}")
                touched = True
                continue
        elif line.startswith("-A "):
            chain = line.split()[1]
            jump = JUMP_RE.search(line)
            comments = [a or b for a, b in COMMENT_RE.findall(line)]
            if (_is_ours(chain, chain_prefixes) or (jump and _is_ours(jump.group(1), chain_prefixes))
                    or any(c.startswith(tuple(comment_prefixes)) for c in comments)):
                rules += 1
                touched = True
                continue
        current.append(line)
    kept = [line for _, lines, was_touched in tables if was_touched for line in lines]
    return ("\n".join(kept) + "\n" if kept else ""), chains, rules


def _run(module: AnsibleModule, argv: list[str], data: str | None = None, check: bool = True) -> str:
    rc, out, err = module.run_command(argv, data=data, binary_data=True)
    if rc != 0 and check:
        module.fail_json(msg=f"{' '.join(argv)} failed (rc {rc}): {err.strip() or out.strip()}")
    return out if rc == 0 else ""


def clean_netfilter(module: AnsibleModule, result: dict) -> None:
    params = module.params
    for save, restore in _tools():
        text = _run(module, [save], check=False)
        if not text:
            continue
        filtered, chains, rules = filter_ruleset(text, params["chain_prefixes"], params["comment_prefixes"])
        if not chains and not rules:
            continue
        result["iptables"].append({"tool": save, "chains": chains, "rules": rules})
        if not module.check_mode:
            _run(module, [restore, "-w", "5"], data=filtered)
    if shutil.which("nft"):
        listed = _run(module, ["nft", "list", "tables"], check=False)
        present = {" ".join(line.split()[1:3]) for line in listed.splitlines() if line.startswith("table ")}
        for table in params["nft_tables"]:
            if table in present:
                result["nft_tables"].append(table)
                if not module.check_mode:
                    _run(module, ["nft", "delete", "table", *table.split()])


def clean_ipvs(module: AnsibleModule, result: dict) -> None:
    if not shutil.which("ipvsadm"):
        return
    listed = _run(module, ["ipvsadm", "-Ln"], check=False)
    services = [line for line in listed.splitlines() if line.split()[:1] in (["TCP"], ["UDP"], ["SCTP"])]
    if services:
        result["ipvs_services"] = len(services)
        if not module.check_mode:
            _run(module, ["ipvsadm", "--clear"])


def clean_links(module: AnsibleModule, result: dict) -> None:
    patterns = [re.compile(p) for p in module.params["interface_patterns"]]
    listed = _run(module, ["ip", "-o", "link", "show"])
    for line in listed.splitlines():
        parts = line.split(":", 2)
        if len(parts) < 3:
            continue
        name = parts[1].strip().split("@")[0]
        if not any(p.fullmatch(name) for p in patterns):
            continue
        flags = parts[2].split(">")[0]
        is_up = "UP" in flags.lstrip(" <").split(",")
        # The ipip module keeps a tunl0 of its own while it is loaded; down and without addresses it is not
        # the cluster's any more.
        if name in FALLBACK_DEVICES and not is_up and not _has_addresses(module, name):
            continue
        result["interfaces"].append(name)
        if module.check_mode:
            continue
        rc, _, _ = module.run_command(["ip", "link", "delete", name])
        # Deleting one end of a veth pair deletes the other, which may be listed too: gone is done.
        if rc != 0 and _link_exists(module, name):
            _run(module, ["ip", "link", "set", name, "down"])
            _run(module, ["ip", "address", "flush", "dev", name])
            result["interfaces_left_down"].append(name)


def _link_exists(module: AnsibleModule, name: str) -> bool:
    rc, _, _ = module.run_command(["ip", "link", "show", "dev", name])
    return rc == 0


def _has_addresses(module: AnsibleModule, name: str) -> bool:
    return bool(_run(module, ["ip", "-o", "address", "show", "dev", name], check=False).strip())


def clean_routes(module: AnsibleModule, result: dict) -> None:
    for proto in module.params["route_protocols"]:
        listed = _run(module, ["ip", "-4", "route", "show", "proto", proto], check=False)
        routes = [line for line in listed.splitlines() if line.strip()]
        if routes:
            result["routes"] += len(routes)
            if not module.check_mode:
                _run(module, ["ip", "-4", "route", "flush", "proto", proto])


def clean_addresses(module: AnsibleModule, result: dict) -> None:
    for address in module.params["addresses"]:
        listed = _run(module, ["ip", "-o", "-4", "address", "show", "to", f"{address}/32"], check=False)
        for line in listed.splitlines():
            words = line.split()
            if len(words) < 4:
                continue
            device, prefix = words[1].split("@")[0], words[3]
            result["addresses"].append(f"{prefix} on {device}")
            if not module.check_mode:
                _run(module, ["ip", "address", "delete", prefix, "dev", device])


def clean_netns(module: AnsibleModule, result: dict) -> None:
    # Network namespaces the CNI plugin created for pods (named cni-<uuid>).
    directory = "/run/netns"
    if not os.path.isdir(directory):
        return
    for name in sorted(os.listdir(directory)):
        if name.startswith("cni-"):
            result["netns"].append(name)
            if not module.check_mode:
                rc, _, err = module.run_command(["ip", "netns", "delete", name])
                # A namespace removed meanwhile (its pod's sandbox went away) is as good as deleted.
                if rc != 0 and os.path.exists(os.path.join(directory, name)):
                    module.fail_json(msg=f"ip netns delete {name} failed (rc {rc}): {err.strip()}")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "chain_prefixes": {"type": "list", "elements": "str", "default": ["KUBE-", "cali-"]},
            "comment_prefixes": {"type": "list", "elements": "str", "default": ["cali:"]},
            "interface_patterns": {"type": "list", "elements": "str",
                                   "default": ["cali[0-9a-f]{6,}.*", "tunl0", "vxlan\\.calico", "vxlan-v6\\.calico",
                                               "kube-ipvs0", "nodelocaldns"]},
            "nft_tables": {"type": "list", "elements": "str",
                           "default": ["ip kube-proxy", "ip6 kube-proxy", "ip calico", "ip6 calico"]},
            "route_protocols": {"type": "list", "elements": "str", "default": ["bird"]},
            "addresses": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    result = {"iptables": [], "nft_tables": [], "ipvs_services": 0, "interfaces": [], "interfaces_left_down": [],
              "routes": 0, "netns": [], "addresses": []}
    clean_netfilter(module, result)
    clean_ipvs(module, result)
    clean_netns(module, result)
    clean_links(module, result)
    clean_routes(module, result)
    clean_addresses(module, result)
    changed = bool(result["iptables"] or result["nft_tables"] or result["ipvs_services"] or result["interfaces"]
                   or result["routes"] or result["netns"] or result["addresses"])
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
