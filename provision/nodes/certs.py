"""The certificates kubeadm manages on each control plane, as the cb_certs module reports them
(playbooks/library/cb_certs.py), validated and judged against a date: expired, expiring within the threshold
(certificates.renew_before_days), or good; with the operator's own admin kubeconfig beside them."""
from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from cryptography import x509
from pydantic import BaseModel, ConfigDict, Field, field_validator

from provision.inputs.inventory import Cluster
from provision.nodes.documents import read_documents
from provision.nodes.runner import PlaybookResult

# The module's SCHEMA and key: bumped together when the document's shape changes.
CERTS_SCHEMA = 1
CERTS_KEY = "cb_certs"
Status = Literal["ok", "warn", "expired", "unreadable"]
# Where the table puts the operator's own copy of the admin kubeconfig.
THIS_MACHINE = "this machine"


class Certificate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str  # kubeadm's name (apiserver, admin.conf, ca, ...)
    kind: Literal["certificate", "kubeconfig", "ca"]
    path: str
    not_after: datetime | None
    subject: str | None
    problem: str | None


class CertsDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = Field(alias="schema")
    certificates: list[Certificate]

    @field_validator("schema_version")
    @classmethod
    def _readable(cls, value: int) -> int:
        if value != CERTS_SCHEMA:
            raise ValueError(f"schema {value}, but this version of cluster-bootstrap reads schema {CERTS_SCHEMA}")
        return value


@dataclass(frozen=True)
class CertStatus:
    node: str
    name: str
    kind: str
    path: str
    not_after: datetime | None
    days_left: int | None
    status: Status
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "name": self.name, "kind": self.kind, "path": self.path,
                "not_after": self.not_after.isoformat() if self.not_after else None, "days_left": self.days_left,
                "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class CertsReport:
    rows: tuple[CertStatus, ...]
    renew_before_days: int
    checked_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def attention(self) -> list[CertStatus]:
        """Rows that need a renewal (or a look), the worst first."""
        order = {"expired": 0, "unreadable": 1, "warn": 2}
        return sorted((r for r in self.rows if r.status != "ok"),
                      key=lambda r: (order[r.status], r.days_left if r.days_left is not None else -1))

    def soonest(self) -> CertStatus | None:
        dated = [r for r in self.rows if r.days_left is not None and r.kind != "ca"]
        return min(dated, key=lambda r: r.days_left or 0) if dated else None

    def as_dict(self) -> dict[str, Any]:
        return {"checked_at": self.checked_at.isoformat(), "renew_before_days": self.renew_before_days,
                "certificates": [r.as_dict() for r in self.rows],
                "attention": [f"{r.node}: {r.name}: {r.detail}" for r in self.attention]}


def judge(node: str, name: str, kind: str, path: str, not_after: datetime | None, problem: str | None,
          now: datetime, renew_before_days: int) -> CertStatus:
    """One certificate against `now`: expired, within the threshold, or good."""
    if not_after is None:
        return CertStatus(node, name, kind, path, None, None, "unreadable", problem or "unreadable")
    days = (not_after - now).total_seconds() / 86400
    left = math.floor(days)
    if days < 0:
        return CertStatus(node, name, kind, path, not_after, left, "expired",
                          f"expired {not_after:%Y-%m-%d}: run `bootstrap certs renew`")
    if days < renew_before_days:
        return CertStatus(node, name, kind, path, not_after, left, "warn",
                          f"expires {not_after:%Y-%m-%d}, in {left} days (below {renew_before_days}): run `bootstrap "
                          "certs renew`")
    return CertStatus(node, name, kind, path, not_after, left, "ok", f"expires {not_after:%Y-%m-%d}")


def read_certs(playbook: PlaybookResult, cluster: Cluster) -> dict[str, CertsDocument]:
    """Control plane name -> its document; raises BootstrapError for one that failed, sent none, or sent one this
    version cannot read."""
    return read_documents(playbook, cluster.control_planes, CERTS_KEY, CertsDocument, "its certificates")


def local_kubeconfig_expiry(path: Path) -> tuple[datetime | None, str | None] | None:
    """The expiry of the client certificate the operator's admin kubeconfig embeds, or why it cannot be read; None
    for a kubeconfig without one (a token: nothing of it expires here)."""
    try:
        data = yaml.safe_load(path.read_text())
        user = data["users"][0]["user"]
    except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError) as exc:
        return None, f"unreadable ({type(exc).__name__})"
    embedded = user.get("client-certificate-data") if isinstance(user, dict) else None
    if embedded is None:
        return None
    try:
        certificate = x509.load_pem_x509_certificate(base64.b64decode(embedded))
    except (ValueError, TypeError, binascii.Error) as exc:
        return None, f"unreadable ({type(exc).__name__})"
    return certificate.not_valid_after_utc, None


def certs_report(documents: Mapping[str, CertsDocument], *, renew_before_days: int, now: datetime | None = None,
                 local_kubeconfig: Path | None = None) -> CertsReport:
    """Every control plane's certificates (inventory order) judged, and the operator's admin kubeconfig."""
    now = now or datetime.now(UTC)
    rows = [judge(node, c.name, c.kind, c.path, c.not_after, c.problem, now, renew_before_days)
            for node, document in documents.items() for c in document.certificates]
    found = local_kubeconfig_expiry(local_kubeconfig) if local_kubeconfig and local_kubeconfig.exists() else None
    if found is not None and local_kubeconfig is not None:
        expiry, problem = found
        rows.append(judge(THIS_MACHINE, "admin kubeconfig", "kubeconfig", str(local_kubeconfig), expiry, problem, now,
                          renew_before_days))
    return CertsReport(tuple(rows), renew_before_days, now)
