"""The certificates kubeadm manages, read on a control plane by playbooks/library/cb_certs.py (from their DER
encoding: no openssl needed on the node) and judged here: expired, expiring within certificates.renew_before_days,
or good; the operator's own admin kubeconfig beside them."""
from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from provision.nodes.certs import THIS_MACHINE, CertsDocument, certs_report
from tests.support.ansible_modules import load as library

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def certificate(common_name: str, not_after: datetime, *, version_one: bool = False) -> bytes:
    """A PEM certificate with this subject CN and expiry (self-signed: the dates are what is read)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(NOW - timedelta(days=365))
               .not_valid_after(not_after))
    if not version_one:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def kubeconfig(pem: bytes) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "k", "cluster": {
        "server": "https://cp1:6443", "certificate-authority-data": "Q0E="}}], "users": [{"name": "admin", "user": {
            "client-certificate-data": base64.b64encode(pem).decode(), "client-key-data": "S0VZ"}}]})


def test_a_certificates_expiry_and_name_are_read_from_its_der_in_either_time_encoding() -> None:
    module = library("cb_certs")
    soon = NOW + timedelta(days=12, hours=3)
    not_after, subject = module.read_certificate(module.pem_certificate(certificate("kube-apiserver", soon)))
    assert (not_after, subject) == (soon.replace(microsecond=0), "kube-apiserver")
    # After 2049 X.509 writes GeneralizedTime, not UTCTime.
    late = datetime(2061, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert module.read_certificate(module.pem_certificate(certificate("etcd-ca", late))) == (late, "etcd-ca")
    assert module.read_certificate(module.pem_certificate(certificate("v1", soon, version_one=True)))[1] == "v1"
    # A kubeconfig's embedded client certificate.
    embedded = kubeconfig(certificate("kubernetes-admin", soon))
    assert module.read_certificate(module.kubeconfig_certificate(embedded)) == (soon.replace(microsecond=0),
                                                                              "kubernetes-admin")
    for broken in (b"not a certificate", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"):
        with pytest.raises((ValueError, IndexError)):
            module.read_certificate(module.pem_certificate(broken))


def test_the_module_reports_every_file_kubeadm_manages_that_is_there(tmp_path: Path) -> None:
    module = library("cb_certs")
    pki, confs = tmp_path / "pki", tmp_path
    (pki / "etcd").mkdir(parents=True)
    (pki / "apiserver.crt").write_bytes(certificate("kube-apiserver", NOW + timedelta(days=300)))
    (pki / "etcd" / "ca.crt").write_bytes(certificate("etcd-ca", NOW + timedelta(days=3000)))
    (pki / "front-proxy-client.crt").write_text("garbage")
    (confs / "admin.conf").write_text(kubeconfig(certificate("kubernetes-admin", NOW + timedelta(days=5))))
    entries = [e for e in (module.entry(name, "certificate", str(pki / path))
                           for name, path in module.CERTIFICATES.items()) if e]
    entries += [e for e in (module.entry(n, "kubeconfig", str(confs / n)) for n in module.KUBECONFIGS) if e]
    entries += [e for e in (module.entry(n, "ca", str(pki / p)) for n, p in module.AUTHORITIES.items()) if e]
    document = CertsDocument.model_validate({"schema": module.SCHEMA, "certificates": entries})
    assert [(c.name, c.kind) for c in document.certificates] == [
        ("apiserver", "certificate"), ("front-proxy-client", "certificate"), ("admin.conf", "kubeconfig"),
        ("etcd-ca", "ca")]
    broken = document.certificates[1]
    assert broken.not_after is None and broken.problem == "unreadable: no PEM certificate in it"


def _document(*rows: tuple[str, str, datetime | None]) -> CertsDocument:
    return CertsDocument.model_validate({"schema": 1, "certificates": [
        {"name": name, "kind": kind, "path": f"/etc/kubernetes/{name}", "not_after": when.isoformat() if when else None,
         "subject": name, "problem": None if when else "unreadable: truncated DER"} for name, kind, when in rows]})


def test_certificates_are_judged_against_the_threshold_the_worst_first(tmp_path: Path) -> None:
    cp1 = _document(("apiserver", "certificate", NOW + timedelta(days=364)), ("ca", "ca", NOW + timedelta(days=3600)))
    cp2 = _document(("apiserver", "certificate", NOW + timedelta(days=9, hours=2)),
                    ("admin.conf", "kubeconfig", NOW - timedelta(days=2)), ("etcd-peer", "certificate", None))
    local = tmp_path / "admin.conf"
    local.write_text(kubeconfig(certificate("kubernetes-admin", NOW + timedelta(days=40))))
    report = certs_report({"cp1": cp1, "cp2": cp2}, renew_before_days=30, now=NOW, local_kubeconfig=local)
    assert [(r.node, r.name, r.status, r.days_left) for r in report.rows] == [
        ("cp1", "apiserver", "ok", 364), ("cp1", "ca", "ok", 3600), ("cp2", "apiserver", "warn", 9),
        ("cp2", "admin.conf", "expired", -2), ("cp2", "etcd-peer", "unreadable", None),
        (THIS_MACHINE, "admin kubeconfig", "ok", 40)]
    assert [f"{r.node}: {r.name}: {r.detail}" for r in report.attention] == [
        "cp2: admin.conf: expired 2026-11-23: run `bootstrap certs renew`",
        "cp2: etcd-peer: unreadable: truncated DER",
        "cp2: apiserver: expires 2026-12-04, in 9 days (below 30): run `bootstrap certs renew`"]
    soonest = report.soonest()
    assert soonest is not None and soonest.name == "admin.conf"
    document = report.as_dict()
    assert document["renew_before_days"] == 30 and len(document["certificates"]) == 6
    assert document["certificates"][2] == {"node": "cp2", "name": "apiserver", "kind": "certificate",
                                           "path": "/etc/kubernetes/apiserver", "not_after": "2026-12-04T14:00:00+00:00",
                                           "days_left": 9, "status": "warn",
                                           "detail": "expires 2026-12-04, in 9 days (below 30): run `bootstrap certs "
                                                     "renew`"}


def test_an_operator_kubeconfig_with_a_token_has_nothing_to_expire_here(tmp_path: Path) -> None:
    local = tmp_path / "admin.conf"
    local.write_text(yaml.safe_dump({"users": [{"name": "x", "user": {"token": "abc"}}]}))
    report = certs_report({}, renew_before_days=30, now=NOW, local_kubeconfig=local)
    assert report.rows == ()
    local.write_text("users: [{name: x, user: {client-certificate-data: bm90IGEgY2VydA==}}]")
    (row,) = certs_report({}, renew_before_days=30, now=NOW, local_kubeconfig=local).rows
    assert (row.node, row.status, row.detail) == (THIS_MACHINE, "unreadable", "unreadable (ValueError)")


# --- before any renewal: the cluster must be whole (kubeadm-certs.md restarts every component; etcd's quorum) ----

def test_a_renewal_asks_the_cluster_first_and_only_reads_there() -> None:
    from provision.phases import CERTS_RENEW_PHASES, PHASES

    assert CERTS_RENEW_PHASES[:2] == ("certs_health", "certs_renew")
    health = PHASES["certs_health"]
    assert health.read_only and health.playbook == "certs_health.yml"


def test_every_control_planes_api_server_is_asked_at_the_address_it_advertises() -> None:
    from provision.inputs.inventory import Cluster, Node
    from provision.render.playbook_vars import api_servers_vars

    cluster = Cluster(Path("hosts.ini"), (
        Node("cp1", "203.0.113.10", "control_plane", "root", ip="10.0.0.10"),
        Node("cp2", "2001:db8::11", "control_plane", "root"), Node("w1", "10.0.0.20", "worker", "root")))
    assert api_servers_vars(cluster) == {"cb_certs_api_servers": {
        "cp1": "https://10.0.0.10:6443", "cp2": "https://[2001:db8::11]:6443"}}


def test_a_degraded_cluster_is_refused_naming_what_does_not_answer(tmp_path: Path) -> None:
    from provision.errors import BootstrapError
    from provision.inputs.inventory import Cluster, Node
    from provision.inputs.settings import Settings
    from provision.inputs.state import ClusterState
    from provision.nodes.runner import PlaybookResult
    from provision.nodes.tally import HostTally, TaskFailure
    from provision.phases import certs_health
    from provision.phases.engine import PhaseContext

    cluster = Cluster(Path("hosts.ini"), tuple(Node(n, f"10.0.0.{i}", "control_plane", "root")
                                               for i, n in enumerate(("cp1", "cp2", "cp3"), start=1)))
    failures = [TaskFailure("cp3", "Gathering the node", "ssh: connect to host 10.0.0.3 port 22: No route to host",
                            unreachable=True),
                TaskFailure("cp1", "Report API servers that are not ready", "the API server of cp3 is not ready")]
    tally = {"cp1": HostTally(failed=1), "cp2": HostTally(), "cp3": HostTally(unreachable=True)}
    result = PlaybookResult("certs_health", "certs_health.yml", 2, "failed", tmp_path, tally, failures, 1.0)
    ctx = PhaseContext(cluster=cluster, settings=Settings(), state=ClusterState(), playbook_results=[result])
    with pytest.raises(BootstrapError) as refused:
        certs_health.check(ctx)
    text = str(refused.value)
    assert text.startswith("certs renew refused, the cluster is degraded: cp1: failed at 'Report API servers that "
                           "are not ready': the API server of cp3 is not ready; cp3: unreachable at ")
    assert text.endswith("nothing was renewed or restarted)")
    assert refused.value.nodes == {"cp1": "failed", "cp3": "unreachable"}
