#!/usr/bin/python
"""Report the certificates kubeadm manages on a control plane, as one JSON document returned under `cb_certs`.

The ones `kubeadm certs check-expiration` lists: the PEM files under the PKI directory and the client certificates
embedded in the kubeconfigs kubeadm writes, and the three CAs. Each certificate's notAfter and subject CN are read
from its DER encoding here, with no openssl or Python package needed on the node; provision/nodes/certs.py
validates the document and judges the dates. Files that are not there (external etcd, super-admin.conf on a
joined control plane) are left out. Only reads.
"""
from __future__ import annotations

import base64
import binascii
import os
import re
from datetime import datetime, timezone

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: cb_certs
short_description: Report the certificates kubeadm manages on a control plane (cb_certs)
options:
  pki_dir:
    description: kubeadm's certificate directory.
    type: path
    default: /etc/kubernetes/pki
  kubeconfig_dir:
    description: Where kubeadm writes its kubeconfigs.
    type: path
    default: /etc/kubernetes
"""

SCHEMA = 1
REPORT_KEY = "cb_certs"
# kubeadm's names (`kubeadm certs check-expiration`) -> the file, relative to the PKI directory.
CERTIFICATES = {
    "apiserver": "apiserver.crt", "apiserver-etcd-client": "apiserver-etcd-client.crt",
    "apiserver-kubelet-client": "apiserver-kubelet-client.crt", "etcd-healthcheck-client":
    "etcd/healthcheck-client.crt", "etcd-peer": "etcd/peer.crt", "etcd-server": "etcd/server.crt",
    "front-proxy-client": "front-proxy-client.crt",
}
AUTHORITIES = {"ca": "ca.crt", "etcd-ca": "etcd/ca.crt", "front-proxy-ca": "front-proxy-ca.crt"}
KUBECONFIGS = ("admin.conf", "super-admin.conf", "controller-manager.conf", "scheduler.conf")
_PEM_RE = re.compile(rb"-----BEGIN CERTIFICATE-----\s+([A-Za-z0-9+/=\s]+?)-----END CERTIFICATE-----")
_CLIENT_DATA_RE = re.compile(r"^\s*client-certificate-data:\s*([A-Za-z0-9+/=]+)\s*$", re.MULTILINE)
_COMMON_NAME = bytes([0x06, 0x03, 0x55, 0x04, 0x03])


def _tlv(der: bytes, at: int) -> tuple[int, int, int]:
    """The DER element at `at`: its tag, where its content starts, where it ends."""
    tag, length = der[at], der[at + 1]
    start = at + 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(der[start:start + count], "big")
        start += count
    if start + length > len(der):
        raise ValueError("truncated DER")
    return tag, start, start + length


def _time(tag: int, text: str) -> datetime:
    if tag == 0x17:  # UTCTime: YYMMDDHHMMSSZ, years 50-99 in the 1900s
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    elif tag != 0x18:  # GeneralizedTime: YYYYMMDDHHMMSSZ
        raise ValueError(f"not a time (tag {tag:#x})")
    return datetime.strptime(text.rstrip("Z"), "%Y%m%d%H%M%S").replace(tzinfo=timezone.utc)


def _common_name(der: bytes, start: int, end: int) -> str | None:
    at = der.find(_COMMON_NAME, start, end)
    if at < 0:
        return None
    _, value_start, value_end = _tlv(der, at + len(_COMMON_NAME))
    return der[value_start:value_end].decode("utf-8", "replace")


def read_certificate(der: bytes) -> tuple[datetime, str | None]:
    """A certificate's notAfter and subject CN, from its DER encoding (RFC 5280: the TBSCertificate's version,
    serialNumber, signature, issuer, validity, subject)."""
    _, start, _ = _tlv(der, 0)
    _, at, _ = _tlv(der, start)
    tag, _, end = _tlv(der, at)
    if tag == 0xA0:  # the explicit version
        tag, _, end = _tlv(der, end)
    for _field in ("signature", "issuer"):
        _, _, end = _tlv(der, end)
    _, validity, after_validity = _tlv(der, end)
    _, _, not_before_end = _tlv(der, validity)
    tag, value_start, value_end = _tlv(der, not_before_end)
    not_after = _time(tag, der[value_start:value_end].decode("ascii"))
    _, subject_start, subject_end = _tlv(der, after_validity)
    return not_after, _common_name(der, subject_start, subject_end)


def pem_certificate(data: bytes) -> bytes:
    """The DER of the first certificate in a PEM text."""
    match = _PEM_RE.search(data)
    if not match:
        raise ValueError("no PEM certificate in it")
    return base64.b64decode(b"".join(match.group(1).split()))


def kubeconfig_certificate(text: str) -> bytes:
    """The DER of the client certificate a kubeconfig embeds (client-certificate-data)."""
    match = _CLIENT_DATA_RE.search(text)
    if not match:
        raise ValueError("no client-certificate-data in it")
    return pem_certificate(base64.b64decode(match.group(1)))


def entry(name: str, kind: str, path: str) -> dict[str, object] | None:
    """The document's entry for one file; None when it is not there."""
    if not os.path.exists(path):
        return None
    found: dict[str, object] = {"name": name, "kind": kind, "path": path, "not_after": None, "subject": None,
                                "problem": None}
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        der = kubeconfig_certificate(data.decode("utf-8", "replace")) if kind == "kubeconfig" else pem_certificate(data)
        not_after, subject = read_certificate(der)
        found["not_after"], found["subject"] = not_after.isoformat(), subject
    except (OSError, ValueError, IndexError, binascii.Error) as exc:
        found["problem"] = f"unreadable: {exc}"
    return found


def main() -> None:
    module = AnsibleModule(argument_spec={"pki_dir": {"type": "path", "default": "/etc/kubernetes/pki"},
                                          "kubeconfig_dir": {"type": "path", "default": "/etc/kubernetes"}},
                           supports_check_mode=True)
    pki, kubeconfigs = module.params["pki_dir"], module.params["kubeconfig_dir"]
    entries = [entry(name, "certificate", os.path.join(pki, path)) for name, path in CERTIFICATES.items()]
    entries += [entry(name, "kubeconfig", os.path.join(kubeconfigs, name)) for name in KUBECONFIGS]
    entries += [entry(name, "ca", os.path.join(pki, path)) for name, path in AUTHORITIES.items()]
    document = {"schema": SCHEMA, "certificates": [e for e in entries if e is not None]}
    module.exit_json(changed=False, **{REPORT_KEY: document})


if __name__ == "__main__":
    main()
