"""etcd_pki (`bootstrap etcd restore --from s3://...`, first): the certificates sealed beside the snapshot in the store
put back on the control planes that have none (fresh or reset machines), each its own as it was when the snapshot
was taken (the CAs are shared, the server and peer certificates name their node); a control plane that has an etcd
CA other than the snapshot's is refused before any is touched (it belongs to another cluster), one with the
snapshot's own is left as it is. The restore's phases follow and find the cluster's identity in place."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from provision.errors import BootstrapError
from provision.nodes.etcd.report import LAYOUT
from provision.nodes.ssh import connect
from provision.phases.engine import Phase, PhaseContext

CA = f"{LAYOUT.pki_dir}/etcd/ca.crt"
# What goes into the shell command that unpacks an archive: base64 text only.
BASE64_RE = re.compile(r"[A-Za-z0-9+/]+={0,2}", re.ASCII)


def ca_sha256(pem: str) -> str | None:
    """The etcd CA's identity as the snapshot records it: the SHA-256 of its DER (None: not a certificate)."""
    try:
        return hashlib.sha256(x509.load_pem_x509_certificate(pem.encode()).public_bytes(Encoding.DER)).hexdigest()
    except ValueError:
        return None


def node_archives(payload: bytes) -> dict[str, str]:
    """Each control plane's archive (base64 text) in the sealed payload; BootstrapError when it is not one."""
    try:
        nodes = json.loads(payload)["nodes"]
    except (ValueError, KeyError, TypeError):
        nodes = None
    if not isinstance(nodes, dict) or not all(isinstance(k, str) and isinstance(v, str) and BASE64_RE.fullmatch(v)
                                              for k, v in nodes.items()):
        raise BootstrapError("the snapshot's sealed certificates hold no archive per control plane: take a new "
                             "snapshot with this version")
    return nodes


def check(ctx: PhaseContext) -> str:
    snapshot, archive = ctx.etcd.restore, ctx.etcd.pki_archive
    if snapshot is None or archive is None:
        raise BootstrapError("internal: etcd_pki runs for a restore --from a store with its certificates")
    wanted = snapshot.record.ca_sha256
    archives = node_archives(archive)
    found: dict[str, str | None] = {}
    problems = []
    for node in ctx.cluster.control_planes:
        with connect(node, ctx.settings.ssh, ctx.become_password) as shell:
            read = shell.run(f"[ -e {shlex.quote(CA)} ] && cat {shlex.quote(CA)} || true", sudo=True, timeout_s=60)
        if not read.ok:
            problems.append(f"{node.name}: reading {CA} failed ({read.first_error_line()})")
            continue
        found[node.name] = ca_sha256(read.stdout) if read.stdout.strip() else None
        if read.stdout.strip() and found[node.name] != wanted:
            problems.append(f"{node.name} has an etcd CA of another cluster ({CA}): reset it first, or restore "
                            "that cluster's own snapshot")
    missing = [name for name, sha in found.items() if sha is None]
    problems += [f"{name} has no certificates and the snapshot holds none of its own (it was no control plane "
                 f"then): join it after the restore with `bootstrap node replace {name}`" for name in missing
                 if name not in archives]
    if problems:
        raise BootstrapError(f"etcd restore refused, nothing changed: {'; '.join(problems)}")
    parent, leaf = os.path.dirname(LAYOUT.pki_dir), os.path.basename(LAYOUT.pki_dir)
    for name in missing:
        # Unpacked beside, then moved into place: a machine cut off midway has no half of a pki directory.
        command = (f"set -e; rm -rf {parent}/.cb-pki; mkdir -p {parent}/.cb-pki; "
                   f"echo {archives[name]} | base64 -d | tar -C {parent}/.cb-pki -xzf -; "
                   f"[ -e {LAYOUT.pki_dir} ] && mv {LAYOUT.pki_dir} {LAYOUT.pki_dir}.cb-before-restore-$(date +%s) "
                   f"|| true; mv {parent}/.cb-pki/{leaf} {LAYOUT.pki_dir}; rmdir {parent}/.cb-pki")
        with connect(ctx.cluster.node(name), ctx.settings.ssh, ctx.become_password) as shell:
            done = shell.run(command, sudo=True, timeout_s=120)
        if not done.ok:
            raise BootstrapError(f"etcd restore: putting the certificates back on {name} failed "
                                 f"({done.first_error_line()}); run it again")
    kept = [name for name in found if name not in missing]
    return (f"{LAYOUT.pki_dir} from the store put back on {', '.join(missing) or 'none'}"
            + (f"; {', '.join(kept)} had the snapshot's own" if kept else ""))


PHASE = Phase("etcd_pki", "put the snapshot's certificates back where there are none", check)
