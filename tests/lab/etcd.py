"""A real etcd cluster on lab nodes, laid out as kubeadm lays out its stacked etcd but run by systemd.

The lab cannot run a kubelet, so it cannot run kubeadm's etcd static pod; what it can run is Debian's etcd: the
`etcd-server` and `etcd-client` packages of ETCD_SUITE (trixie's 3.5, whose binaries run on bookworm's glibc;
bookworm's own 3.4 has no etcdutl), installed on the nodes from .debs downloaded here once. Everything else is
kubeadm's: the CA and certificates under /etc/kubernetes/pki/etcd with kubeadm's names, subjects, SANs and key
usages, the data in /var/lib/etcd, each member named after its node, TLS with client certificates on the client
and peer URLs (https://<ip>:2379, https://<ip>:2380, and https://127.0.0.1:2379), the same flags in the same
values, given as Debian's unit reads them (ETCD_* variables in /etc/default/etcd). The unit runs etcd as the
`etcd` user (Debian's), so the keys are readable by its group.

`LabEtcd.up(lab)` makes the CA, installs and starts etcd on every node and waits for a healthy quorum; the tests
then write and read keys with `etcdctl` on the nodes (`put`, `keys`), break members, and check what the product
did. `provision(node)` makes a fresh machine ready to join (packages, certificates from the same CA, the unit
stopped and its data directory empty), as `kubeadm join --control-plane` would find one prepared.
"""
from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import shlex
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.lab.lab import DEBIAN_TOOLS, Lab, LabNode
from tests.lab.repos import debian_debs

ETCD_SUITE = "trixie"
ETCD_PACKAGES = ["etcd-server", "etcd-client"]
PKI_DIR = "/etc/kubernetes/pki"
DATA_DIR = "/var/lib/etcd"
ENV_FILE = "/etc/default/etcd"
CLIENT_PORT = 2379
PEER_PORT = 2380
# What the tests' etcdctl uses: the member's own server certificate (kubeadm's carries client auth too).
ETCDCTL = ("ETCDCTL_API=3 etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt "
           "--cert=/etc/kubernetes/pki/etcd/server.crt --key=/etc/kubernetes/pki/etcd/server.key")


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class EtcdCa:
    """kubeadm's etcd CA (CN etcd-ca, ten years) and the certificates it signs for each member."""

    key: rsa.RSAPrivateKey
    cert: x509.Certificate

    @classmethod
    def new(cls) -> EtcdCa:
        key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "etcd-ca")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=3650))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, key_cert_sign=True,
                                             content_commitment=False, data_encipherment=False, key_agreement=False,
                                             crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        return cls(key, cert)

    def sign(self, common_name: str, usages: list[x509.ObjectIdentifier], dns: Iterable[str] = (),
             ips: Iterable[str] = ()) -> tuple[bytes, bytes]:
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
                   .issuer_name(self.cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=365))
                   .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, key_cert_sign=False,
                                                content_commitment=False, data_encipherment=False,
                                                key_agreement=False, crl_sign=False, encipher_only=False,
                                                decipher_only=False), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                                  critical=False))
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return _pem_cert(builder.sign(self.key, hashes.SHA256())), _pem_key(key)

    def member_files(self, name: str, ip: str) -> dict[str, tuple[bytes, str]]:
        """Path -> (content, mode) of what kubeadm writes for an etcd member: the CA, the server and peer pairs
        (CN the node's name; SANs its name, localhost, its address, 127.0.0.1, ::1; server and client auth),
        the health-check client and the API server's etcd client."""
        both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        sans = {"dns": [name, "localhost"], "ips": [ip, "127.0.0.1", "::1"]}
        files: dict[str, tuple[bytes, str]] = {
            f"{PKI_DIR}/etcd/ca.crt": (_pem_cert(self.cert), "0644"),
            f"{PKI_DIR}/etcd/ca.key": (_pem_key(self.key), "0600"),
        }
        pairs = {
            "etcd/server": self.sign(name, both, **sans),
            "etcd/peer": self.sign(name, both, **sans),
            "etcd/healthcheck-client": self.sign("kube-etcd-healthcheck-client", [ExtendedKeyUsageOID.CLIENT_AUTH]),
            "apiserver-etcd-client": self.sign("kube-apiserver-etcd-client", [ExtendedKeyUsageOID.CLIENT_AUTH]),
        }
        for stem, (cert, key) in pairs.items():
            files[f"{PKI_DIR}/{stem}.crt"] = (cert, "0644")
            # Debian's unit runs etcd as `etcd`: its group reads the keys (kubeadm's etcd runs as root, 0600).
            files[f"{PKI_DIR}/{stem}.key"] = (key, "0640")
        return files


def etcd_environment(name: str, ip: str, initial_cluster: dict[str, str], state: str = "new") -> str:
    """/etc/default/etcd: kubeadm's etcd flags for this member, as the ETCD_* variables Debian's unit reads."""
    values = {
        "ETCD_NAME": name,
        "ETCD_DATA_DIR": DATA_DIR,
        "ETCD_ADVERTISE_CLIENT_URLS": f"https://{ip}:{CLIENT_PORT}",
        "ETCD_LISTEN_CLIENT_URLS": f"https://127.0.0.1:{CLIENT_PORT},https://{ip}:{CLIENT_PORT}",
        "ETCD_LISTEN_PEER_URLS": f"https://{ip}:{PEER_PORT}",
        "ETCD_INITIAL_ADVERTISE_PEER_URLS": f"https://{ip}:{PEER_PORT}",
        "ETCD_INITIAL_CLUSTER": ",".join(f"{n}=https://{a}:{PEER_PORT}" for n, a in initial_cluster.items()),
        "ETCD_INITIAL_CLUSTER_STATE": state,
        "ETCD_LISTEN_METRICS_URLS": "http://127.0.0.1:2381",
        "ETCD_CERT_FILE": f"{PKI_DIR}/etcd/server.crt",
        "ETCD_KEY_FILE": f"{PKI_DIR}/etcd/server.key",
        "ETCD_CLIENT_CERT_AUTH": "true",
        "ETCD_TRUSTED_CA_FILE": f"{PKI_DIR}/etcd/ca.crt",
        "ETCD_PEER_CERT_FILE": f"{PKI_DIR}/etcd/peer.crt",
        "ETCD_PEER_KEY_FILE": f"{PKI_DIR}/etcd/peer.key",
        "ETCD_PEER_CLIENT_CERT_AUTH": "true",
        "ETCD_PEER_TRUSTED_CA_FILE": f"{PKI_DIR}/etcd/ca.crt",
        "ETCD_SNAPSHOT_COUNT": "10000",
        "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK": "true",
        "ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL": "5s",
    }
    return "".join(f"{key}={value}\n" for key, value in values.items())


def write_file(node: LabNode, path: str, content: bytes, mode: str = "0644", group: str = "root") -> None:
    command = (f"mkdir -p {shlex.quote(str(Path(path).parent))} && cat > {shlex.quote(path)}.tmp && "
               f"chmod {mode} {shlex.quote(path)}.tmp && chgrp {group} {shlex.quote(path)}.tmp && "
               f"mv {shlex.quote(path)}.tmp {shlex.quote(path)}")
    subprocess.run([*node.ssh_command("root"), command], input=content, check=True, capture_output=True,
                   timeout=120)


@dataclass
class LabEtcd:
    """A lab's etcd cluster: its CA, its members (node name -> address) and etcdctl on the nodes for the tests."""

    lab: Lab
    ca: EtcdCa
    members: dict[str, str] = field(default_factory=dict)

    @classmethod
    def up(cls, lab: Lab, names: list[str] | None = None, timeout_s: float = 120) -> LabEtcd:
        etcd = cls(lab, EtcdCa.new())
        nodes = [lab.node(name) for name in names] if names else list(lab.nodes)
        etcd.members = {node.name: node.ip for node in nodes}
        for node in nodes:
            etcd.provision(node)
            write_file(node, ENV_FILE, etcd_environment(node.name, node.ip, etcd.members).encode())
        for node in nodes:
            # --no-block: a member is ready (Type=notify) only once a majority runs.
            node.ssh("systemctl enable --quiet etcd && systemctl start --no-block etcd")
        etcd.wait_healthy(nodes, timeout_s)
        return etcd

    def provision(self, node: LabNode) -> None:
        """Packages, certificates and an empty data directory, the unit stopped: a machine ready to become a
        member (the product configures and starts it)."""
        debs = debian_debs(ETCD_SUITE, ETCD_PACKAGES)
        for deb in debs.values():
            write_file(node, f"/root/{deb.name}", deb.read_bytes())
        names = " ".join(f"/root/{deb.name}" for deb in debs.values())
        # The package would start etcd with its own defaults at once: the policy says no (101) while it installs.
        # RHEL-shaped nodes keep dpkg out of PATH (tests/lab/README.md): Debian's etcd is installed with it all the same.
        node.ssh(f"export PATH={DEBIAN_TOOLS}:$PATH; "
                 "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && "
                 f"(dpkg -s etcd-server >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive dpkg -i {names} "
                 ">/dev/null) && rm -f /usr/sbin/policy-rc.d && systemctl stop etcd && "
                 f"rm -rf {DATA_DIR}/default {DATA_DIR}/member && install -d -o etcd -g etcd -m 0700 {DATA_DIR}",
                 timeout=300)
        for path, (content, mode) in self.ca.member_files(node.name, node.ip).items():
            write_file(node, path, content, mode, group="etcd" if mode == "0640" else "root")

    def etcdctl(self, node: LabNode, args: str, check: bool = True, timeout: float = 60) \
            -> subprocess.CompletedProcess[str]:
        return node.ssh(f"{ETCDCTL} {args}", check=check, timeout=timeout)

    def put(self, node: LabNode, items: dict[str, str]) -> None:
        """Write the keys through one member, a hundred to a transaction (etcd's default --max-txn-ops is 128)."""
        pairs = list(items.items())
        for start in range(0, len(pairs), 100):
            ops = "".join(f"put {json.dumps(k)} {json.dumps(v)}\n" for k, v in pairs[start:start + 100])
            node.ssh(f"{ETCDCTL} txn >/dev/null", input=f"\n{ops}\n\n")

    def bulk(self, node: LabNode, megabytes: int, prefix: str = "/bulk/") -> dict[str, str]:
        """About this many MB of incompressible values (10 KB each), to make a snapshot that takes a while."""
        import secrets

        items = {f"{prefix}{i:05d}": base64.b64encode(secrets.token_bytes(7500)).decode()
                 for i in range(megabytes * 100)}
        self.put(node, items)
        return items

    def keys(self, node: LabNode, local: bool = True) -> dict[str, str]:
        """Every key and value as this member serves them (local: serializable, from its own store)."""
        consistency = "--consistency=s " if local else ""
        answer = json.loads(self.etcdctl(node, f"get '' --prefix {consistency}-w json").stdout)
        return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode()
                for kv in answer.get("kvs", [])}

    def member_names(self, node: LabNode) -> list[str]:
        answer = json.loads(self.etcdctl(node, "member list -w json").stdout)
        return sorted(m.get("name", "") for m in answer.get("members", []))

    def healthy(self, node: LabNode) -> bool:
        result = self.etcdctl(node, "endpoint health -w json", check=False, timeout=30)
        try:
            return result.returncode == 0 and all(e.get("health") for e in json.loads(result.stdout))
        except ValueError:
            return False

    def wait_healthy(self, nodes: Iterable[LabNode], timeout_s: float = 120) -> None:
        waiting = list(nodes)
        deadline = time.monotonic() + timeout_s
        while waiting:
            waiting = [node for node in waiting if not self.healthy(node)]
            if waiting and time.monotonic() > deadline:
                logs = {n.name: n.ssh("journalctl -u etcd -n 20 --no-pager", check=False).stdout for n in waiting}
                raise AssertionError(f"etcd not healthy on {[n.name for n in waiting]}: {logs}")
            if waiting:
                time.sleep(1)


def control_plane_inventory(lab: Lab, path: Path, names: list[str] | None = None) -> Path:
    """An inventory whose nodes are all control planes (kubeadm's stacked etcd: one member on each), the first
    one first; the lab's own inventory has one control plane and workers."""
    nodes = [lab.node(name) for name in names] if names else list(lab.nodes)
    lines = ["[control_plane]", *(f"{n.name} ansible_host={n.ip}" for n in nodes), "", "[all:vars]",
             "ansible_user=tester", "ansible_become=true", f"ansible_ssh_private_key_file={lab.key_path}"]
    if lab.flavour.python_in_inventory:
        lines.append(f"ansible_python_interpreter={lab.flavour.python}")
    path.write_text("\n".join(lines) + "\n")
    return path


def cluster_config(lab: Lab, path: Path, **etcd: object) -> Path:
    """The lab's cluster.yaml with these `etcd.*` settings."""
    text = lab.base_settings()
    if etcd:
        text += "etcd:\n" + "".join(f"  {key}: {json.dumps(value)}\n" for key, value in etcd.items())
    path.write_text(text)
    return path


def throttle(node: LabNode, rate: str | None) -> None:
    """Slow what the node sends to `rate` (tc's token bucket on its link), or lift the limit (None)."""
    node.ssh("tc qdisc del dev eth0 root 2>/dev/null; true")
    if rate:
        node.ssh(f"tc qdisc add dev eth0 root tbf rate {rate} burst 32kbit latency 400ms")


@dataclass
class EtcdCluster:
    """A lab whose every node is a control plane with a real etcd member, the inventory and settings that say so,
    and the state directory on this machine the tests share (its snapshots), as one operator's would be."""

    lab: Lab
    etcd: LabEtcd
    inventory: Path
    config: Path
    state: Path

    @property
    def snapshots_here(self) -> Path:
        return self.state / "clusters" / f"n1@{self.lab.node('n1').ip}" / "etcd-snapshots"

    def args(self, *command: str, config: Path | None = None) -> list[str]:
        return [*command, "--inventory", str(self.inventory), "--config", str(config or self.config)]

    def node_snapshots(self, name: str) -> list[str]:
        out = self.lab.node(name).ssh("ls /var/lib/etcd-snapshots 2>/dev/null; true").stdout
        return sorted(line for line in out.split() if line.endswith(".db"))

    def healthy(self) -> None:
        """Every member answers healthy, each listing all of them (what every test leaves behind)."""
        nodes = list(self.lab.nodes)
        self.etcd.wait_healthy(nodes)
        for node in nodes:
            assert self.etcd.member_names(node) == sorted(self.etcd.members), node.name
