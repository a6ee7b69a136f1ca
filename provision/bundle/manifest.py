"""A bundle's manifest: every file with its size and sha256, and what the bundle holds (platforms, GPU stack,
add-ons, Kubernetes release, images), signed with an OpenPGP key.

Beside the files: `bundle.json` (the manifest), `bundle.json.asc` (its detached signature) and `bundle.key` (the
public key that made it). The private key never enters the bundle: it lives in a GnuPG home of its own, made by
the first build (`default_key_home`) or given. Verification checks the signature against a key the user trusts
(the bundle's own key is only trusted when pinned by its fingerprint, or when nothing else is given, which
`verify` reports), then every file, naming each problem: missing, changed, extra, bad signature.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.bundle.document import FORMAT as DOCUMENT_FORMAT
from provision.bundle.document import (
    MAX_KEY_BYTES,
    MAX_MANIFEST_BYTES,
    MAX_SIGNATURE_BYTES,
    ManifestDocument,
    contents_from_dict,
    read_manifest,
)
from provision.bundle.fetch import sha256_file
from provision.bundle.tree import walk
from provision.errors import InputError
from provision.inputs.files import read_bytes
from provision.inputs.state import state_root

__all__ = ["MAX_KEY_BYTES", "MAX_MANIFEST_BYTES", "MAX_SIGNATURE_BYTES", "ManifestDocument"]

MANIFEST = "bundle.json"
SIGNATURE = "bundle.json.asc"
PUBLIC_KEY = "bundle.key"
OWN_FILES = (MANIFEST, SIGNATURE, PUBLIC_KEY)
FORMAT = DOCUMENT_FORMAT
# Build leftovers that are not part of a bundle (the build's state, resumable).
BUILD_DIR = ".build"
KEY_UID = "cluster-bootstrap offline bundle"
GPG_TIMEOUT_S = 120


def default_key_home() -> Path:
    return state_root() / "bundle-key"


@dataclass(frozen=True)
class Contents:
    """What a bundle holds, as `up` checks it against its settings."""

    platforms: tuple[str, ...]
    gpu: bool
    kubernetes_minor: str
    kubernetes_version: str  # the exact release the packages and images are of (1.36.4)
    calico: str
    addons: dict[str, str]  # add-on -> release
    images: dict[str, str]  # upstream reference -> its path in the bundle's registry
    cifar10: bool
    containerd_sources: dict[str, str] = field(default_factory=dict)  # platform -> docker|distribution

    def as_dict(self) -> dict[str, Any]:
        return {"platforms": list(self.platforms), "gpu": self.gpu, "kubernetes_minor": self.kubernetes_minor,
                "kubernetes_version": self.kubernetes_version, "calico": self.calico, "addons": self.addons,
                "images": self.images, "cifar10": self.cifar10, "containerd_sources": self.containerd_sources}

    @classmethod
    def from_dict(cls, data: object) -> Contents:
        """Contents checked as a manifest's are (document.py); InputError in one line."""
        return cls(**contents_from_dict(data))


# --- the key ---------------------------------------------------------------------------------------------------

def _gpg(home: Path, *args: str, input_bytes: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["gpg", "--batch", "--quiet", "--yes", "--no-tty", "--pinentry-mode", "loopback",
                           "--passphrase", "", *args], input=input_bytes, capture_output=True, timeout=GPG_TIMEOUT_S,
                          env=os.environ | {"GNUPGHOME": str(home)})


def ensure_key(home: Path) -> str:
    """The fingerprint of the signing key in GnuPG home `home`, made there (ed25519, no expiry) when it has none."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    fingerprint = _secret_fingerprint(home)
    if fingerprint:
        return fingerprint
    made = _gpg(home, "--quick-gen-key", KEY_UID, "ed25519", "sign", "never")
    if made.returncode != 0:
        raise InputError(f"could not make a signing key in {home}: {made.stderr.decode(errors='replace').strip()}")
    fingerprint = _secret_fingerprint(home)
    assert fingerprint, "gpg made a key"
    return fingerprint


def _secret_fingerprint(home: Path) -> str | None:
    listed = _gpg(home, "--with-colons", "--list-secret-keys")
    fingerprints = [line.split(":")[9] for line in listed.stdout.decode().splitlines() if line.startswith("fpr:")]
    if len(fingerprints) > 1:
        raise InputError(f"{home} holds {len(fingerprints)} secret keys: give a GnuPG home with one (--key)")
    return fingerprints[0] if fingerprints else None


def export_public(home: Path, fingerprint: str) -> bytes:
    return _gpg(home, "--armor", "--export", fingerprint).stdout


# --- writing ---------------------------------------------------------------------------------------------------

def bundle_files(root: Path) -> dict[str, Path]:
    """Every regular file of the bundle by its path relative to it (the manifest's own files and the build's state
    aside); links and other kinds are not files of a bundle (tree.py names them)."""
    return {name: root / name for name in walk(str(root), frozenset({BUILD_DIR})).files if name not in OWN_FILES}


def write_manifest(root: Path, contents: Contents, key_home: Path) -> str:
    """bundle.json for every file under `root`, signed; returns the key's fingerprint."""
    fingerprint = ensure_key(key_home)
    files = {name: {"size": path.stat().st_size, "sha256": sha256_file(path)}
             for name, path in sorted(bundle_files(root).items())}
    document = {"format": FORMAT, "contents": contents.as_dict(), "files": files, "signed_by": fingerprint}
    (root / MANIFEST).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    (root / PUBLIC_KEY).write_bytes(export_public(key_home, fingerprint))
    signed = _gpg(key_home, "--local-user", fingerprint, "--armor", "--detach-sign", "--output",
                  str(root / SIGNATURE), str(root / MANIFEST))
    if signed.returncode != 0:
        raise InputError(f"signing {root / MANIFEST} failed: {signed.stderr.decode(errors='replace').strip()}")
    return fingerprint


# --- checking --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """What verification found: the problems (one line each), the contents and the key that signed them."""

    problems: tuple[str, ...]
    contents: Contents | None
    fingerprint: str | None
    # Whether the key was given or pinned by the user, rather than taken from the bundle itself.
    key_trusted: bool

    @property
    def ok(self) -> bool:
        return not self.problems


def signature_fingerprint(manifest: bytes, signature: bytes, public_key: bytes) -> str | None:
    """The fingerprint of the key in `public_key` whose good signature `signature` is over `manifest`; None when
    the signature is bad or made by another key."""
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        home.chmod(0o700)
        keyring = home / "trusted.gpg"
        imported = _gpg(home, "--dearmor", "--output", str(keyring), input_bytes=public_key)
        if imported.returncode != 0:
            return None
        (home / "bundle.json").write_bytes(manifest)
        (home / "bundle.json.asc").write_bytes(signature)
        checked = subprocess.run(["gpgv", "--status-fd", "1", "--keyring", str(keyring), str(home / "bundle.json.asc"),
                                  str(home / "bundle.json")], capture_output=True, timeout=GPG_TIMEOUT_S,
                                 env=os.environ | {"GNUPGHOME": str(home)})
        for line in checked.stdout.decode(errors="replace").splitlines():
            if line.startswith("[GNUPG:] VALIDSIG ") and checked.returncode == 0:
                return line.split()[2]
    return None


def judge_manifest(manifest: bytes, signature: bytes | None, bundle_key: bytes | None, *,
                   trusted_key: bytes | None = None, fingerprint: str | None = None) -> Verdict:
    """The manifest read as untrusted input (bounded, then checked field by field), then the signature: checked
    against `trusted_key` when given, else the bundle's own key, which must have `fingerprint` when one is pinned."""
    problems: list[str] = []
    document = _document(manifest, problems)
    key = trusted_key or bundle_key
    signer = None
    if signature is None:
        problems.append(f"bad signature: {SIGNATURE} is missing")
    elif key is None:
        problems.append(f"bad signature: no key to check it ({PUBLIC_KEY} is missing and no --key given)")
    elif len(signature) > MAX_SIGNATURE_BYTES or len(key) > MAX_KEY_BYTES:
        problems.append(f"bad signature: {SIGNATURE} or the key is larger than a signature or key can be")
    else:
        signer = signature_fingerprint(manifest, signature, key)
        if signer is None:
            problems.append(f"bad signature: {SIGNATURE} is not a good signature of {MANIFEST} by "
                            f"{'the key given' if trusted_key else 'the bundle key'}")
        elif fingerprint and signer.upper() != fingerprint.upper().replace(" ", ""):
            problems.append(f"bad signature: signed by {signer}, not by the pinned key {fingerprint}")
    contents = Contents.from_dict(document.contents.model_dump()) if document else None
    return Verdict(tuple(problems), contents, signer, key_trusted=bool(trusted_key or fingerprint))


def _document(manifest: bytes, problems: list[str]) -> ManifestDocument | None:
    try:
        return read_manifest(manifest)
    except InputError as exc:
        problems.append(str(exc))
        return None


def file_problems(listed: dict[str, Any], found: dict[str, int], root: Path | None = None) -> list[str]:
    """Each file the manifest lists that is missing or changed, and each file found that it does not list: the
    names and sizes first (cheap); the sha256 of each file only when they all agree, and only with `root`."""
    problems = [f"missing: {name}" for name in listed if name not in found]
    problems += [f"changed: {name} (its size is not the manifest's)" for name, entry in listed.items()
                 if name in found and found[name] != entry.size]
    problems += [f"extra: {name} (not in the manifest)" for name in sorted(set(found) - set(listed))]
    if problems or root is None:
        return problems
    return [f"changed: {name} (its sha256 is not the manifest's)" for name, entry in listed.items()
            if _sha256(root, name) != entry.sha256]


def _sha256(root: Path, name: str) -> str | None:
    """The file's sha256, opened without following a link (one swapped in after the walk is not read)."""
    try:
        fd = os.open(root / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    os.close(fd)
    return sha256_file(root / name)


def verify_directory(root: Path, *, trusted_key: bytes | None = None, fingerprint: str | None = None) -> Verdict:
    """A bundle folder checked whole, cheapest first: its files walked as a closed world (no link, device, pipe or
    outside hard link), the manifest read bounded and checked, the signature, every name and size; then, when all
    of that holds, every file's sha256."""
    root = Path(os.path.realpath(root))
    tree = walk(str(root), frozenset({BUILD_DIR}))
    if MANIFEST not in tree.files:
        return Verdict((*tree.problems, f"missing: {MANIFEST} ({root} is not a bundle)"), None, None, False)
    own: dict[str, bytes | None] = {}
    problems = list(tree.problems)
    for name in (MANIFEST, SIGNATURE, PUBLIC_KEY):
        own[name] = _own(root, name, problems)
    if own[MANIFEST] is None:
        return Verdict(tuple(problems), None, None, False)
    verdict = judge_manifest(own[MANIFEST] or b"", own[SIGNATURE], own[PUBLIC_KEY], trusted_key=trusted_key,
                             fingerprint=fingerprint)
    problems += verdict.problems
    found = {name: size for name, size in tree.files.items() if name not in OWN_FILES}
    try:
        document = read_manifest(own[MANIFEST] or b"")
    except InputError:
        return Verdict(tuple(problems), verdict.contents, verdict.fingerprint, verdict.key_trusted)
    problems += file_problems(document.files, found, None if problems else root)
    return Verdict(tuple(problems), verdict.contents, verdict.fingerprint, verdict.key_trusted)


def _own(root: Path, name: str, problems: list[str]) -> bytes | None:
    """The manifest, its signature or the key, read bounded (size first); None when absent or refused (the walk
    names any that is a link), the refusal added to `problems`."""
    limit = {MANIFEST: MAX_MANIFEST_BYTES, SIGNATURE: MAX_SIGNATURE_BYTES, PUBLIC_KEY: MAX_KEY_BYTES}[name]
    path = root / name
    if path.is_symlink() or not path.exists():
        return None
    try:
        return read_bytes(path, name, "rebuild the bundle or copy it again", limit=limit)
    except InputError as exc:
        problems.append(str(exc))
        return None


def problem_lines(problems: Iterable[str], limit: int = 20) -> list[str]:
    """At most `limit` problems, then how many more."""
    problems = list(problems)
    shown = problems[:limit]
    if len(problems) > limit:
        shown.append(f"... and {len(problems) - limit} more")
    return shown
