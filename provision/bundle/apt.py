"""The apt part of a bundle: the closure of what prepare installs, resolved by apt itself, and each repository's
signed metadata copied as upstream publishes it.

apt-get runs here with a private state (its own sources, lists and cache; an empty dpkg status, so the closure is
complete down to libc and fits any node of the release), lists the packages it would fetch (`--print-uris`, with
each one's sha256 from the signed indexes), and the build downloads them into the bundle at the same path under
the repository. The repository's InRelease/Release and the indexes it lists are copied unchanged, so the nodes'
apt checks the upstream signatures exactly as it would online; nothing is re-signed.
"""
from __future__ import annotations

import bz2
import getpass
import gzip
import lzma
import posixpath
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from provision.bundle.fetch import Store, exists, place, read_url
from provision.bundle.plan import NodePlan, Repository
from provision.errors import InputError

# The keyrings that sign each distribution's own archive (the distribution's keyring packages install them).
ARCHIVE_KEYRINGS = {"debian": ("/usr/share/keyrings/debian-archive-keyring.gpg", "debian-archive-keyring"),
                    "ubuntu": ("/usr/share/keyrings/ubuntu-archive-keyring.gpg", "ubuntu-keyring")}
# apt's order of preference among the compressions a Release lists (apt-config dump Acquire::CompressionTypes).
COMPRESSIONS = (".xz", ".bz2", ".lzma", ".gz", ".lz4", ".zst", "")
ARCH = "amd64"
DECOMPRESS: dict[str, Callable[[Path], Any]] = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}
APT_TIMEOUT_S = 1200


@dataclass(frozen=True)
class BundleFile:
    """One file of the bundle and where it comes from (its sha256 when an index names it)."""

    dest: str  # relative to the bundle
    url: str
    sha256: str | None = None


def _release_entries(release: str) -> dict[str, tuple[str, int]]:
    """The SHA256 section of a Release file: path -> (sha256, size)."""
    entries: dict[str, tuple[str, int]] = {}
    section = False
    for line in release.splitlines():
        if not line.startswith(" "):
            section = line.startswith("SHA256:")
            continue
        if section:
            parts = line.split()
            if len(parts) == 3:
                entries[parts[2]] = (parts[0], int(parts[1]))
    return entries


def _wanted_indexes(entries: dict[str, tuple[str, int]], components: tuple[str, ...], *, all_apart: bool) -> list[str]:
    """The index files apt on an amd64 node reads: per component, binary-amd64's Packages (and binary-all's where the
    Release lists "all" among its Architectures, as apt asks only then) and the English translations, each in the
    one compression apt prefers among those listed."""
    chosen = []
    # A flat repository (no components) has its Packages beside its Release.
    prefixes = [f"{c}/" for c in components] if components else [""]
    stems: tuple[str, ...] = ("binary-amd64/Packages", "binary-all/Packages", "i18n/Translation-en") if all_apart \
        else ("binary-amd64/Packages", "i18n/Translation-en")
    if not components:
        stems = ("Packages",)
    for prefix in prefixes:
        for stem in stems:
            for suffix in COMPRESSIONS:
                if f"{prefix}{stem}{suffix}" in entries:
                    chosen.append(f"{prefix}{stem}{suffix}")
                    break
    return chosen


def signed_release(inrelease: str) -> str:
    """The Release text an InRelease file signs (its clear-signed body, dash-escaping undone)."""
    body = inrelease.split("\n\n", 1)[1] if inrelease.startswith("-----BEGIN PGP SIGNED MESSAGE-----") else inrelease
    body = body.split("\n-----BEGIN PGP SIGNATURE-----", 1)[0]
    return "\n".join(line[2:] if line.startswith("- ") else line for line in body.splitlines()) + "\n"


def metadata_files(repository: Repository, store: Store) -> list[BundleFile]:
    """Every metadata file a node's apt reads from the repository: InRelease (or Release and Release.gpg where it
    publishes no InRelease), as published, and the indexes that Release lists for amd64. Indexes are fetched by
    hash where the Release says the archive serves them so (and also placed under by-hash/, where apt asks first):
    one Release and the indexes it names, even while the archive changes under the build."""
    found: list[BundleFile] = []
    for suite in repository.suites:
        directory = "" if suite == "/" else f"dists/{suite}/"
        base = f"{repository.url}/{directory}"
        here = f"{repository.path}/{directory}"
        if exists(base + "InRelease"):
            signed = store.fetch(base + "InRelease")
            found.append(BundleFile(here + "InRelease", base + "InRelease", signed.name))
            release_text = signed_release(signed.read_text())
        else:
            release = store.fetch(base + "Release")
            found.append(BundleFile(here + "Release", base + "Release", release.name))
            signature = store.fetch(base + "Release.gpg")
            found.append(BundleFile(here + "Release.gpg", base + "Release.gpg", signature.name))
            release_text = release.read_text()
        entries = _release_entries(release_text)
        by_hash = re.search(r"^Acquire-By-Hash:\s*yes", release_text, re.MULTILINE) is not None
        architectures = re.search(r"^Architectures:(.*)$", release_text, re.MULTILINE)
        all_apart = architectures is not None and "all" in architectures.group(1).split()
        for name in _wanted_indexes(entries, repository.components, all_apart=all_apart):
            sha256, _size = entries[name]
            folder = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
            url = f"{base}{folder}by-hash/SHA256/{sha256}" if by_hash else base + name
            found.append(BundleFile(here + name, url, sha256))
            if by_hash:
                found.append(BundleFile(f"{here}{folder}by-hash/SHA256/{sha256}", url, sha256))
    return found


class AptResolver:
    """apt-get with a private state under `work`, reading the plan's repositories as the bundle holds their metadata
    (`metadata`: the files copied, placed under work/mirror/ first), so that what it resolves is exactly what the
    nodes will find."""

    def __init__(self, plan: NodePlan, work: Path, store: Store, metadata: list[BundleFile]) -> None:
        self.plan, self.work, self.store = plan, work, store
        self.mirror = work / "mirror"
        for item in metadata:
            place(store.fetch(item.url, item.sha256), self.mirror / item.dest)
            # apt reads a file:// repository's indexes uncompressed.
            opener = DECOMPRESS.get(Path(item.dest).suffix)
            if opener and "/by-hash/" not in item.dest:
                with opener(self.mirror / item.dest) as packed:
                    (self.mirror / item.dest).with_suffix("").write_bytes(packed.read())
        for sub in ("lists/partial", "cache/archives/partial", "keys", "etc/preferences.d", "etc/apt.conf.d"):
            (work / sub).mkdir(parents=True, exist_ok=True)
        (work / "status").write_text("")
        if shutil.which("apt-get") is None:
            raise InputError(f"resolving the packages of {plan.platform.name} needs apt-get: build on a Debian or "
                             "Ubuntu machine (or in a container of one), or leave the platform out of --for")

    def _keyring(self, index: int, repository: Repository) -> str:
        if repository.keys:
            url, _ = repository.keys[0]
            path = self.work / "keys" / f"{index}.asc"
            path.write_bytes(read_url(url))
            return str(path)
        keyring, package = ARCHIVE_KEYRINGS.get(self.plan.platform.os_id, ("", ""))
        if not keyring or not Path(keyring).is_file():
            raise InputError(f"checking {self.plan.platform.name}'s archive needs its keyring {keyring or '(none)'}: "
                             f"apt-get install {package or 'the distribution keyring'}")
        return keyring

    def _sources(self) -> str:
        lines = []
        for index, repository in enumerate(self.plan.repositories):
            keyring = self._keyring(index, repository)
            local = f"file://{self.mirror / repository.path}"
            for suite in repository.suites:
                target = f"{local}/ /" if suite == "/" else f"{local} {suite} {' '.join(repository.components)}"
                lines.append(f"deb [arch={ARCH} signed-by={keyring}] {target}")
        return "\n".join(lines) + "\n"

    def _apt(self, *args: str) -> str:
        work = self.work
        options = [f"-oDir::Etc::SourceList={work / 'sources.list'}", "-oDir::Etc::SourceParts=/dev/null",
                   f"-oDir::Etc::Preferences={work / 'etc/preferences'}",
                   f"-oDir::Etc::PreferencesParts={work / 'etc/preferences.d'}",
                   f"-oDir::Etc::Parts={work / 'etc/apt.conf.d'}",
                   f"-oDir::State::Lists={work / 'lists'}", f"-oDir::State::status={work / 'status'}",
                   f"-oDir::Cache={work / 'cache'}", f"-oAPT::Architecture={ARCH}", "-oAPT::Architectures=",
                   "-oAcquire::Languages=none", "-oAcquire::ForceHash=SHA256",
                   "-oAPT::Install-Recommends=false", "-oDebug::NoLocking=1",
                   f"-oAPT::Sandbox::User={getpass.getuser()}"]
        result = subprocess.run(["apt-get", "-q", *options, *args], capture_output=True, text=True,
                                timeout=APT_TIMEOUT_S, env={"LC_ALL": "C.UTF-8", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        if result.returncode != 0:
            detail = " ".join((result.stderr or result.stdout).split())[-600:]
            raise InputError(f"apt could not resolve {self.plan.platform.name}'s packages ({args[0]}): {detail}")
        return result.stdout

    def resolve(self) -> list[BundleFile]:
        """The closure of the plan's packages: each .deb apt would fetch, by repository."""
        (self.work / "sources.list").write_text(self._sources())
        self._apt("update")
        listed = self._apt("install", "--print-uris", "-qq", "-y", *self.plan.packages)
        found = []
        repositories = sorted(self.plan.repositories, key=lambda r: len(r.path), reverse=True)
        # apt names a file:// source's files as file:/path.
        prefix = f"file:{self.mirror}/"
        for match in re.finditer(r"^'([^']+)' (\S+) (\d+) SHA256:([0-9a-f]{64})$", listed, re.MULTILINE):
            url, _name, _size, sha256 = match.groups()
            url = "file:" + url.removeprefix("file://").removeprefix("file:")
            # apt quotes the path ('+' as %2b); the file keeps the index's Filename, which a server unquotes.
            inside = posixpath.normpath(unquote(url.removeprefix(prefix)))
            repository = next((r for r in repositories if inside.startswith(r.path + "/")), None)
            if repository is None:
                raise InputError(f"apt chose {url}, from none of the repositories a node reads")
            rest = url.removeprefix(prefix)[len(repository.path) + 1:]
            found.append(BundleFile(inside, f"{repository.url}/{rest}", sha256))
        return found


def key_files(plan: NodePlan) -> list[BundleFile]:
    """The repository keys the roles download, where the offline layout has them."""
    return [BundleFile(inside, url) for repository in plan.repositories for url, inside in repository.keys]


def build_apt(plan: NodePlan, work: Path, store: Store) -> list[BundleFile]:
    """The files of the platform's apt repositories: metadata as published, keys, and the closure's packages."""
    metadata = [f for r in plan.repositories for f in metadata_files(r, store)]
    packages = AptResolver(plan, work, store, metadata).resolve()
    return metadata + key_files(plan) + packages
