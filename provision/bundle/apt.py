"""The apt part of a bundle: the closure of what prepare installs, resolved by apt itself, and each repository's
signed metadata copied as upstream publishes it.

apt-get runs here with a private state (its own sources, lists and cache; an empty dpkg status, so the closure is
complete down to libc and fits any node of the release), lists the packages it would fetch (`--print-uris`, with
each one's sha256 from the signed indexes), and the build downloads them into the bundle at the same path under
the repository. The repository's InRelease/Release and the indexes it lists are copied unchanged, so the nodes'
apt checks the upstream signatures exactly as it would online; nothing is re-signed.
"""
from __future__ import annotations

import getpass
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from provision.bundle.fetch import FetchError, Store, exists, read_url
from provision.bundle.plan import NodePlan, Repository
from provision.errors import InputError

# The keyrings that sign each distribution's own archive (the distribution's keyring packages install them).
ARCHIVE_KEYRINGS = {"debian": ("/usr/share/keyrings/debian-archive-keyring.gpg", "debian-archive-keyring"),
                    "ubuntu": ("/usr/share/keyrings/ubuntu-archive-keyring.gpg", "ubuntu-keyring")}
# apt's order of preference among the compressions a Release lists (apt-config dump Acquire::CompressionTypes).
COMPRESSIONS = (".xz", ".bz2", ".lzma", ".gz", ".lz4", ".zst", "")
ARCH = "amd64"
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


def _wanted_indexes(entries: dict[str, tuple[str, int]], components: tuple[str, ...]) -> list[str]:
    """The index files apt on an amd64 node reads: per component, binary-amd64's and binary-all's Packages and the
    English translations, each in the one compression apt prefers among those listed."""
    chosen = []
    prefixes = [f"{c}/" for c in components] if components else [""]
    for prefix in prefixes:
        for stem in ("binary-amd64/Packages", "binary-all/Packages", "i18n/Translation-en"):
            for suffix in COMPRESSIONS:
                if f"{prefix}{stem}{suffix}" in entries:
                    chosen.append(f"{prefix}{stem}{suffix}")
                    break
    return chosen


def metadata_files(repository: Repository) -> list[BundleFile]:
    """Every metadata file a node's apt reads from the repository: the Release files, as published, and the
    indexes they list for amd64 (also under by-hash/, where the Release asks apt to fetch by hash)."""
    found: list[BundleFile] = []
    for suite in repository.suites:
        directory = "" if suite == "/" else f"dists/{suite}/"
        base = f"{repository.url}/{directory}"
        release_text = ""
        for name in ("InRelease", "Release", "Release.gpg"):
            url = base + name
            if name == "InRelease" or exists(url):
                found.append(BundleFile(f"{repository.path}/{directory}{name}", url))
                if name == "Release":
                    release_text = read_url(url).decode()
        if not release_text:
            raise FetchError(f"{base}Release: missing beside InRelease")
        entries = _release_entries(release_text)
        by_hash = re.search(r"^Acquire-By-Hash:\s*yes", release_text, re.MULTILINE) is not None
        for name in _wanted_indexes(entries, repository.components):
            sha256, _size = entries[name]
            found.append(BundleFile(f"{repository.path}/{directory}{name}", base + name, sha256))
            if by_hash:
                folder = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
                found.append(BundleFile(f"{repository.path}/{directory}{folder}by-hash/SHA256/{sha256}", base + name,
                                        sha256))
    return found


class AptResolver:
    """apt-get with a private state under `work`, reading the plan's repositories."""

    def __init__(self, plan: NodePlan, work: Path, store: Store) -> None:
        self.plan, self.work, self.store = plan, work, store
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
            for suite in repository.suites:
                target = f"{repository.url}/ /" if suite == "/" else \
                    f"{repository.url} {suite} {' '.join(repository.components)}"
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
                   "-oAcquire::Languages=none", "-oAcquire::ForceHash=SHA256", "-oAPT::Install-Recommends=false", "-oDebug::NoLocking=1",
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
        repositories = sorted(self.plan.repositories, key=lambda r: len(r.url), reverse=True)
        for match in re.finditer(r"^'([^']+)' (\S+) (\d+) SHA256:([0-9a-f]{64})$", listed, re.MULTILINE):
            url, _name, _size, sha256 = match.groups()
            repository = next((r for r in repositories if url.startswith(r.url + "/")), None)
            if repository is None:
                raise InputError(f"apt chose {url}, from none of the repositories a node reads")
            # apt quotes the path ('+' as %2b); the file keeps the Filename of the index, which the server unquotes.
            found.append(BundleFile(f"{repository.path}/{unquote(url[len(repository.url) + 1:])}", url, sha256))
        return found


def key_files(plan: NodePlan) -> list[BundleFile]:
    """The repository keys the roles download, where the offline layout has them."""
    return [BundleFile(inside, url) for repository in plan.repositories for url, inside in repository.keys]


def build_apt(plan: NodePlan, work: Path, store: Store) -> list[BundleFile]:
    """The files of the platform's apt repositories: metadata as published, keys, and the closure's packages."""
    packages = AptResolver(plan, work, store).resolve()
    return [f for r in plan.repositories for f in metadata_files(r)] + key_files(plan) + packages
