"""Downloads for a bundle build, kept by content: each file is stored once under its sha256 in the build's cache,
so an interrupted build (or the next one) reuses everything it already has, and a file is placed in the bundle
only once its hash is known and checked.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from provision.errors import BootstrapError

TIMEOUT_S = 60
CHUNK = 1 << 20


class FetchError(BootstrapError):
    """A download that failed: the URL, what came back, and the setting that moves it."""


def _open(url: str, timeout: float = TIMEOUT_S) -> object:
    try:
        return urllib.request.urlopen(url, timeout=timeout)
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise FetchError(f"{url}: {reason}") from None


def read_url(url: str, limit: int = 256 << 20) -> bytes:
    """A small file (an index, a key) read whole."""
    response = _open(url)
    with response as stream:  # type: ignore[attr-defined]
        data: bytes = stream.read(limit + 1)
    if len(data) > limit:
        raise FetchError(f"{url}: larger than {limit >> 20} MiB")
    return data


def exists(url: str) -> bool:
    try:
        read_url(url, limit=256 << 20)
    except FetchError as exc:
        if "HTTP 404" in str(exc) or "No such file" in str(exc):
            return False
        raise
    return True


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class Store:
    """The content-addressed cache: <root>/sha256/<hex>."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "sha256").mkdir(parents=True, exist_ok=True)
        (root / "partial").mkdir(parents=True, exist_ok=True)
        self.downloaded = 0  # bytes fetched by this build (what it reused is not counted)

    def path(self, sha256: str) -> Path:
        return self.root / "sha256" / sha256

    def fetch(self, url: str, sha256: str | None = None) -> Path:
        """The file at `url` in the store: taken from the store when its sha256 is known and there, else downloaded
        and checked against `sha256` when given."""
        if sha256 and self.path(sha256).is_file():
            # Checked again: the bundle's copies are hard links to these, and a copy edited there edits this one.
            if sha256_file(self.path(sha256)) == sha256:
                return self.path(sha256)
            self.path(sha256).unlink()
        handle, name = tempfile.mkstemp(dir=self.root / "partial")
        digest = hashlib.sha256()
        try:
            with os.fdopen(handle, "wb") as out, _open(url) as stream:  # type: ignore[attr-defined]
                while chunk := stream.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    self.downloaded += len(chunk)
            found = digest.hexdigest()
            if sha256 and found != sha256:
                raise FetchError(f"{url}: its sha256 is {found}, not {sha256} as its index says: the source changed "
                                 "under the build or is corrupt; run the build again")
            target = self.path(found)
            # Served as it is (the bundle's files are hard links to these): readable by every user.
            os.chmod(name, 0o644)
            os.replace(name, target)
            return target
        finally:
            if os.path.exists(name):
                os.unlink(name)

    def add(self, path: Path) -> Path:
        """A file made here (a rendered manifest) into the store."""
        target = self.path(sha256_file(path))
        if not target.exists():
            shutil.copyfile(path, target)
            target.chmod(0o644)
        return target


def place(stored: Path, dest: Path, *, link: bool = True) -> None:
    """The stored file at `dest` in the bundle (with `link`, a hard link where the file system allows; else a
    copy); a file already there with other content is replaced."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() or dest.is_symlink():
        if link and not dest.is_symlink() and dest.samefile(stored):
            return
        if not link and dest.is_file() and not dest.is_symlink() and dest.stat().st_nlink == 1 and \
                dest.stat().st_size == stored.stat().st_size and sha256_file(dest) == stored.name:
            return
        dest.unlink()
    if link:
        try:
            os.link(stored, dest)
            return
        except OSError:
            pass
    shutil.copyfile(stored, dest)
