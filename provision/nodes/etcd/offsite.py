"""Snapshots off the nodes and off this machine: each snapshot, its record and the control plane's
`/etc/kubernetes/pki` (encrypted with the operator's key) copied to an S3-compatible store
(`etcd.snapshot_target`), and brought back from there for `bootstrap etcd restore --from s3://...`, so that losing
every control plane is recoverable (docs/etcd.md, "Off the nodes").

The certificates travel as a tar archive sealed with AES-256-GCM under a key derived from the operator's passphrase
(`etcd.pki_key_file`) with scrypt: an authenticated cipher, so a changed or truncated archive is refused, not
unpacked; the snapshot's name is bound in as associated data, so an archive cannot pass for another snapshot's.
The passphrase never leaves this machine.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from provision.errors import BootstrapError, InputError
from provision.inputs.values import S3_URL

PKI_SUFFIX = ".pki.enc"
MAGIC = b"CBPKI1\n"
SALT_BYTES, NONCE_BYTES = 16, 12
# scrypt's cost (RFC 7914; N = 2^15, r = 8: 32 MiB and a tenth of a second per try, the `cryptography` docs' own
# interactive-login figures), for a passphrase an operator chose.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 15, 8, 1
MIN_PASSPHRASE = 16
MAX_KEY_FILE_BYTES = 4096
# An archive of /etc/kubernetes/pki is a few dozen KiB; anything far larger is not one.
MAX_PKI_BYTES = 16 << 20
@dataclass(frozen=True)
class S3Location:
    bucket: str
    key: str  # a prefix (ending without '/') or an object's key

    @classmethod
    def parse(cls, url: str, what: str = "etcd.snapshot_target") -> S3Location:
        """An s3:// URL (inputs/values.py's S3_URL) into its bucket and key; InputError naming `what`."""
        problem = S3_URL.problem(url)
        if problem:
            raise InputError(f"{what}: {problem}")
        bucket, _, key = url.removeprefix("s3://").partition("/")
        return cls(bucket, key.rstrip("/"))

    def child(self, name: str) -> str:
        return f"{self.key}/{name}" if self.key else name

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


@dataclass(frozen=True)
class Store:
    """Where snapshots go and come from: an S3-compatible endpoint (None: AWS's own), its region, and the
    location. Credentials come from the AWS chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile):
    never from the settings file."""

    location: S3Location
    endpoint: str | None = None
    region: str | None = None

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=self.region or "us-east-1",
                            config=Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10,
                                          read_timeout=60))


def read_passphrase(path: Path) -> bytes:
    """The operator's key: the key file's first line, at least 16 characters, the file readable by its owner
    only (a snapshot's certificates are as secret as the cluster). InputError otherwise."""
    try:
        info = path.stat()
    except OSError as exc:
        raise InputError(f"etcd.pki_key_file: {path}: {exc.strerror}: write your passphrase there (one line, 16 "
                         "characters or more; mode 0600)") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"etcd.pki_key_file: {path} is not a file")
    if info.st_mode & 0o077:
        raise InputError(f"etcd.pki_key_file: {path} is readable by others (mode {info.st_mode & 0o777:o}): "
                         f"`chmod 600 {path}`")
    if info.st_size > MAX_KEY_FILE_BYTES:
        raise InputError(f"etcd.pki_key_file: {path} is {info.st_size} bytes: a passphrase is one line")
    lines = path.read_bytes().splitlines()
    passphrase = lines[0].strip() if lines else b""
    if len(passphrase) < MIN_PASSPHRASE:
        raise InputError(f"etcd.pki_key_file: {path}: its first line must be a passphrase of {MIN_PASSPHRASE} "
                         "characters or more")
    return passphrase


def _key(passphrase: bytes, salt: bytes) -> bytes:
    return Scrypt(salt=salt, length=32, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P).derive(passphrase)


def seal(archive: bytes, passphrase: bytes, snapshot_name: str) -> bytes:
    """The pki archive encrypted and authenticated, bound to its snapshot's name."""
    salt, nonce = os.urandom(SALT_BYTES), os.urandom(NONCE_BYTES)
    header = MAGIC + salt + nonce
    return header + AESGCM(_key(passphrase, salt)).encrypt(nonce, archive, header + snapshot_name.encode())


def unseal(blob: bytes, passphrase: bytes, snapshot_name: str) -> bytes:
    """The pki archive back; BootstrapError when the key is not the one it was sealed with, or the file was
    changed, cut short, or belongs to another snapshot."""
    size = len(MAGIC) + SALT_BYTES + NONCE_BYTES
    if len(blob) > MAX_PKI_BYTES or len(blob) < size + 16 or not blob.startswith(MAGIC):
        raise BootstrapError(f"{snapshot_name}{PKI_SUFFIX} is not an archive of certificates sealed by this tool")
    header = blob[:size]
    salt, nonce = header[len(MAGIC):len(MAGIC) + SALT_BYTES], header[len(MAGIC) + SALT_BYTES:]
    try:
        return AESGCM(_key(passphrase, salt)).decrypt(nonce, blob[size:], header + snapshot_name.encode())
    except InvalidTag:
        raise BootstrapError(f"{snapshot_name}{PKI_SUFFIX} does not open with etcd.pki_key_file's key: another key, "
                             "or the file was changed or belongs to another snapshot") from None


def object_names(snapshot_name: str) -> tuple[str, str, str]:
    """The three objects of one snapshot: the database, its record, the sealed certificates."""
    stem = snapshot_name.removesuffix(".db")
    return snapshot_name, f"{stem}.json", f"{stem}{PKI_SUFFIX}"


def upload(store: Store, files: list[Path]) -> list[str]:
    """Each file to the store under the location's prefix, the record after the database and the certificates
    last: a listing shows a snapshot only once it is whole. The keys written."""
    client = store.client()
    written = []
    for path in files:
        key = store.location.child(path.name)
        client.upload_file(str(path), store.location.bucket, key)
        written.append(key)
    return written


def download(store: Store, name: str, directory: Path) -> list[Path]:
    """A snapshot's objects (database, record, and the sealed certificates where there are some) into `directory`,
    each written as a `.part` first; the paths written. BootstrapError naming what is missing."""
    from botocore.exceptions import BotoCoreError, ClientError

    client = store.client()
    written = []
    for index, object_name in enumerate(object_names(name)):
        key = store.location.child(object_name)
        target = directory / object_name
        part = target.with_name(target.name + ".part")
        try:
            client.download_file(store.location.bucket, key, str(part))
        except ClientError as exc:
            part.unlink(missing_ok=True)
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchKey") and index == 2:
                continue  # a snapshot taken without certificates
            raise BootstrapError(f"s3://{store.location.bucket}/{key}: {code or exc}: name a snapshot the store holds "
                                 "(`bootstrap etcd snapshots` lists them)") from None
        except BotoCoreError as exc:
            part.unlink(missing_ok=True)
            raise BootstrapError(f"s3://{store.location.bucket}/{key}: {exc}") from None
        part.chmod(0o600)
        os.replace(part, target)
        written.append(target)
    return written
