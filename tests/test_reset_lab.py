"""`bootstrap reset` for real, on lab nodes seeded with the residue a kubeadm cluster with Calico leaves: files,
a pod volume still mounted, iptables chains in both back ends, a kube-proxy nftables table, Calico's
interfaces (a veth pair among them whose two ends both match, so one vanishes while reset deletes the other), BIRD's
routes, a CNI network namespace. One reset removes all of it, what the operator had before is kept, and a second
reset changes nothing.

n1 is a half-built control plane with a kubeadm that can reset (a stand-in script: the real one cannot be
had here); n2 never had kubeadm at all.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provision.cli.app import app
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import CACHE_MARKER, Settings, load_settings
from provision.inputs.state import ClusterState
from provision.phases import RESET_PHASES, PhaseContext, run_phases, select_phases
from tests.lab.lab import Lab

POD_VOLUME = "/var/lib/kubelet/pods/0f1e2d3c-uid/volumes/kubernetes.io~empty-dir/cache"
CACHE = Settings().smoke_test.cache_path
CNI_NETNS = "cni-5c1f0c1e-8f0a-4d44-a2f8-5d1a6f0e1a11"
RESIDUE_PATHS = ["/etc/kubernetes", "/var/lib/kubelet", "/var/lib/etcd", "/var/lib/cni", "/var/lib/calico",
                 "/var/run/calico", "/var/log/calico", "/opt/cni/bin/calico", "/opt/cni/bin/calico-ipam",
                 "/root/.kube/config"]
# The operator's own state that reset must keep.
KEPT_PATHS = ["/opt/cni/bin/bridge", "/root/.kube/notes.txt", "/etc/cni/net.d"]

FAKE_KUBEADM = """#!/bin/sh
# Stand-in for kubeadm: records its arguments; `reset` removes what the real one removes first.
echo "$*" >> /root/kubeadm-calls
if [ "$1" = reset ]; then rm -rf /etc/kubernetes/manifests /etc/kubernetes/*.conf /etc/kubernetes/pki /var/lib/etcd/member; fi
"""

SEED = r"""
set -eu
export DEBIAN_FRONTEND=noninteractive
if ! command -v iptables-legacy >/dev/null || ! command -v nft >/dev/null; then
  apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends iptables nftables >/dev/null
fi

mkdir -p /etc/kubernetes/manifests /etc/kubernetes/pki /var/lib/etcd/member/snap /etc/cni/net.d \
  /var/lib/cni/networks/k8s-pod-network /var/lib/calico /var/run/calico /var/log/calico/cni /opt/cni/bin /root/.kube \
  POD_VOLUME
echo 'kind: Pod' > /etc/kubernetes/manifests/kube-apiserver.yaml
echo 'kind: Config' > /etc/kubernetes/admin.conf
echo 'kind: Config' > /etc/kubernetes/kubelet.conf
echo 'CERT' > /etc/kubernetes/pki/ca.crt
echo 'kind: KubeletConfiguration' > /var/lib/kubelet/config.yaml
echo 'db' > /var/lib/etcd/member/snap/db
echo '{"name": "k8s-pod-network"}' > /etc/cni/net.d/10-calico.conflist
echo 'kind: Config' > /etc/cni/net.d/calico-kubeconfig
echo 'pod-uid' > /var/lib/cni/networks/k8s-pod-network/10.244.0.5
echo NODE > /var/lib/calico/nodename
echo log > /var/log/calico/cni/cni.log
printf '#!/bin/sh\n' > /opt/cni/bin/calico; cp /opt/cni/bin/calico /opt/cni/bin/calico-ipam; cp /opt/cni/bin/calico /opt/cni/bin/bridge
echo 'kind: Config' > /root/.kube/config
echo 'mine' > /root/.kube/notes.txt
printf 'KUBELET_EXTRA_ARGS=--v=2\n# BEGIN cluster-bootstrap node-ip\nKUBELET_EXTRA_ARGS=--node-ip=10.1.1.1\n# END cluster-bootstrap node-ip\n' > /etc/default/kubelet
# A pod's memory-backed emptyDir, still mounted.
mount -t tmpfs tmpfs POD_VOLUME

# kube-proxy (iptables mode, nft back end) and the kubelet.
iptables -t nat -N KUBE-SERVICES; iptables -t nat -N KUBE-POSTROUTING; iptables -t nat -N KUBE-MARK-MASQ
iptables -t nat -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
iptables -t nat -A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
iptables -t nat -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp --dport 443 -j KUBE-MARK-MASQ
iptables -N KUBE-FIREWALL; iptables -A INPUT -j KUBE-FIREWALL
iptables -A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -j DROP
# Calico: its own chains, jumps into them, and a rule of its own in a built-in chain.
iptables -N cali-FORWARD; iptables -A FORWARD -m comment --comment "cali:wUHhoiAYhphO9Mso" -j cali-FORWARD
iptables -A FORWARD -m comment --comment "cali:S93hcgKJrXEqnTfs" -m mark --mark 0x10000/0x10000 -j ACCEPT
iptables -t mangle -N cali-PREROUTING
iptables -t mangle -A PREROUTING -m comment --comment "cali:6gwbT8clXdHdC1b1" -j cali-PREROUTING
ip6tables -N KUBE-FIREWALL; ip6tables -A INPUT -j KUBE-FIREWALL
# The legacy back end, as an older kube-proxy would have used it.
iptables-legacy -t nat -N KUBE-MARK-DROP; iptables-legacy -t nat -A OUTPUT -j KUBE-MARK-DROP
# The operator's own rules, in both back ends.
iptables -A INPUT -p tcp --dport 2222 -m comment --comment keep-me -j ACCEPT
iptables-legacy -A INPUT -p tcp --dport 2223 -m comment --comment keep-me-too -j ACCEPT
# kube-proxy in nftables mode.
nft add table ip kube-proxy; nft add chain ip kube-proxy services

# Calico's interfaces, BIRD's routes, a pod's network namespace.
ip link add cali1a2b3c4d5e6 type veth peer name cbpeer0; ip link set cali1a2b3c4d5e6 up
# A veth pair whose two ends both look like Calico's: deleting the first takes the second with it.
ip link add cali7f7f7f7f7f1 type veth peer name cali7f7f7f7f7f2
ip link add vxlan.calico type vxlan id 4096 dstport 4789; ip link set vxlan.calico up
ip link add tunl0 type bridge; ip addr add 10.244.9.1/32 dev tunl0; ip link set tunl0 up
ip link add kube-ipvs0 type bridge; ip addr add 10.96.0.1/32 dev kube-ipvs0
ip route add blackhole 10.244.7.0/26 proto bird
ip netns add CNI_NETNS
""".replace("POD_VOLUME", POD_VOLUME).replace("CNI_NETNS", CNI_NETNS)

STATE = r"""
for p in PATHS; do [ -e "$p" ] && echo "path $p"; done
ls -A /etc/cni/net.d | sed 's/^/cni-config /'
awk '$2 ~ "^/var/lib/kubelet" {print "mount " $2}' /proc/mounts
for save in iptables-nft-save iptables-legacy-save ip6tables-nft-save ip6tables-legacy-save; do
  $save 2>/dev/null | grep -v '^#' | grep -E 'KUBE-|cali' | sed "s/^/$save /"
done
nft list tables | grep kube-proxy | sed 's/^/nft /'
ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^(cali|vxlan.calico|tunl0|kube-ipvs0|cbpeer0)' | sed 's/^/link /'
ip route show proto bird | sed 's/^/route /'
ip netns list | grep '^cni-' | sed 's/^/netns /'
true
""".replace("PATHS", " ".join(RESIDUE_PATHS))


def residue(lab: Lab) -> dict[str, list[str]]:
    return {node.name: [line for line in node.ssh(STATE).stdout.splitlines() if line.strip()] for node in lab.nodes}


@pytest.fixture(scope="module")
def lab(lab_factory: Callable[..., Lab]) -> Lab:
    lab = lab_factory(2)
    n1 = lab.node("n1")
    n1.ssh(f"cat > /usr/local/bin/kubeadm <<'EOF'\n{FAKE_KUBEADM}EOF\nchmod 755 /usr/local/bin/kubeadm")
    for node in lab.nodes:
        node.ssh(SEED, timeout=600)
    # The smoke test's data cache: n1's carries the smoke test's mark; on n2 the same path is a folder of the
    # operator's own, which reset must keep.
    n1.ssh(f"mkdir -p {CACHE}/cifar10 && echo data > {CACHE}/cifar10/batch && echo smoke > {CACHE}/{CACHE_MARKER}")
    lab.node("n2").ssh(f"mkdir -p {CACHE} && echo mine > {CACHE}/notes.txt")
    return lab


@pytest.fixture
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def test_reset_removes_everything_a_cluster_left_and_a_second_reset_changes_nothing(
        lab: Lab, isolated_state: Path) -> None:
    seeded = residue(lab)
    for node in lab.nodes:
        # The seed took: every kind of residue is there before the reset.
        kinds = {line.split()[0] for line in seeded[node.name]}
        assert kinds >= {"path", "cni-config", "mount", "iptables-nft-save", "iptables-legacy-save",
                         "ip6tables-nft-save", "nft", "link", "route", "netns"}, seeded[node.name]

    outcome = CliRunner().invoke(app, ["reset", "--yes", "--inventory", str(lab.inventory_path),
                                       "--config", str(lab.config_path)], catch_exceptions=False)
    assert outcome.exit_code == 0, outcome.output
    assert "API not answering, nothing drained" in outcome.output
    assert f"n2: {CACHE} left alone" in " ".join(outcome.output.split())
    assert lab.node("n1").ssh(f"test -e {CACHE} || echo gone").stdout.strip() == "gone"
    assert lab.node("n2").ssh(f"cat {CACHE}/notes.txt").stdout == "mine\n"

    assert residue(lab) == {"n1": [], "n2": []}
    for node in lab.nodes:
        kept = node.ssh("; ".join(f"test -e {p} && echo {p}" for p in KEPT_PATHS) + "; true").stdout.split()
        assert kept == KEPT_PATHS
        assert node.ssh("cat /etc/default/kubelet").stdout == "KUBELET_EXTRA_ARGS=--v=2\n"
        rules = node.ssh("iptables-nft-save; iptables-legacy-save").stdout
        assert "keep-me" in rules and "keep-me-too" in rules
    n1_calls = lab.node("n1").ssh("cat /root/kubeadm-calls").stdout
    assert n1_calls == "reset --force --cri-socket unix:///run/containerd/containerd.sock\n"
    assert lab.node("n2").ssh("command -v kubeadm || echo none").stdout.strip() == "none"

    # Again: nothing to do, nothing changed, kubeadm not called a second time.
    cluster = load_inventory(lab.inventory_path)
    ctx = PhaseContext(cluster=cluster, settings=load_settings(lab.config_path), state=ClusterState.load(cluster))
    result = run_phases(select_phases(RESET_PHASES), ctx)
    assert result.ok, result.error
    assert ctx.playbook_results[-1].changed == {"n1": 0, "n2": 0}
    assert [o.detail for o in result.outcomes if o.name == "reset"] == ["2 nodes were already clean"]
    assert lab.node("n1").ssh("cat /root/kubeadm-calls").stdout == n1_calls
