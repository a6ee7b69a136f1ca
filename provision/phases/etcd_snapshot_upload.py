"""etcd_snapshot_upload (`bootstrap etcd snapshot`, with `etcd.snapshot_target`): the snapshot just taken and checked
here sent to the S3-compatible store with its record and every control plane's /etc/kubernetes/pki (the CAs are
shared, the server, peer and client certificates each node's own), sealed with the operator's key
(provision/nodes/etcd/offsite.py), so that a cluster whose every control plane is lost can be brought back
(`bootstrap etcd restore --from s3://...`)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from provision.errors import BootstrapError
from provision.nodes.etcd.offsite import PKI_SUFFIX, S3Location, Store, read_passphrase, seal, upload
from provision.nodes.etcd.report import LAYOUT
from provision.nodes.etcd.snapshot import record_path
from provision.nodes.ssh import connect
from provision.phases.engine import Phase, PhaseContext

# The certificates as one archive, read as root and sent as text (a few dozen KiB).
PKI_ARCHIVE_COMMAND = f"tar -C {os.path.dirname(LAYOUT.pki_dir)} -czf - {os.path.basename(LAYOUT.pki_dir)} | base64"


def store(ctx: PhaseContext) -> Store:
    target = ctx.settings.etcd.snapshot_target
    assert target is not None
    return Store(S3Location.parse(target), ctx.settings.etcd.s3_endpoint, ctx.settings.etcd.s3_region)


def skip_reason(ctx: PhaseContext) -> str | None:
    return None if ctx.settings.etcd.snapshot_target else "etcd.snapshot_target is not set: the snapshot stays here"


def key_file(ctx: PhaseContext) -> Path:
    path = ctx.settings.etcd.pki_key_file
    assert path is not None  # settings refuse a target without it
    return Path(path).expanduser()


def check(ctx: PhaseContext) -> str:
    snapshot = ctx.results.etcd_snapshot
    if snapshot is None:
        raise BootstrapError("internal: etcd_snapshot_upload runs after etcd_snapshot")
    passphrase = read_passphrase(key_file(ctx))
    # Each control plane's own: kubeadm's server, peer and client certificates are the node's, the CAs shared.
    survey = ctx.results.etcd
    planes = [n.name for n in ctx.cluster.control_planes if survey is None or n.name in survey.reports]
    archives: dict[str, str] = {}
    for name in planes:
        with connect(ctx.cluster.node(name), ctx.settings.ssh, ctx.become_password) as shell:
            read = shell.run(PKI_ARCHIVE_COMMAND, sudo=True, timeout_s=120)
        if not read.ok:
            raise BootstrapError(f"etcd snapshot: {name} did not give its {LAYOUT.pki_dir} "
                                 f"({read.first_error_line()}); the snapshot is here, at {snapshot.path}, not in the "
                                 "store")
        archives[name] = "".join(read.stdout.split())
    payload = json.dumps({"nodes": archives}, sort_keys=True).encode()
    sealed = snapshot.path.with_name(snapshot.path.name.removesuffix(".db") + PKI_SUFFIX)
    fd = os.open(sealed, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(seal(payload, passphrase, snapshot.record.name))
    destination = store(ctx)
    try:
        keys = upload(destination, [snapshot.path, record_path(snapshot.path), sealed])
    except Exception as exc:  # noqa: BLE001 (boto3's and botocore's errors share no base: each is named here)
        raise BootstrapError(f"etcd snapshot: sending {snapshot.record.name} to {destination.location} failed "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); it is here, at "
                             f"{snapshot.path}: check etcd.s3_endpoint and the AWS credentials, then run it again") \
            from None
    where = keys[0].rsplit("/", 1)[0] + "/" if "/" in keys[0] else ""
    return (f"sent to s3://{destination.location.bucket}/{where}: {snapshot.record.name}, its record and "
            f"{LAYOUT.pki_dir} of {', '.join(archives)} sealed ({len(payload) >> 10} KiB)")


PHASE = Phase("etcd_snapshot_upload", "send the snapshot and the sealed certificates to the store", check,
              skip_reason=skip_reason)
