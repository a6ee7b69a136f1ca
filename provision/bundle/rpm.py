"""The dnf part of a bundle: the closure of what prepare installs, resolved by dnf itself, and each repository's
metadata copied as published.

dnf runs here (`dnf install --downloadonly` into an empty install root of the platform's release, so the closure is
complete and module streams resolve as on a node), then `dnf repoquery --location` names where each package lives
in its repository; the build downloads them into the bundle at the same place. repodata/ (repomd.xml, its
signature and key where published, and every file it lists) is copied unchanged, so the nodes' dnf checks the
upstream signatures as it would online.
"""
from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

from provision.bundle.apt import BundleFile, key_files
from provision.bundle.fetch import Store, exists, read_url, sha256_file
from provision.bundle.plan import NodePlan, Repository
from provision.errors import InputError

DNF_TIMEOUT_S = 1800
_REPO_NS = "{http://linux.duke.edu/metadata/repo}"


def metadata_files(repository: Repository) -> list[BundleFile]:
    base = f"{repository.url}/repodata/"
    found = [BundleFile(f"{repository.path}/repodata/repomd.xml", base + "repomd.xml")]
    for extra in ("repomd.xml.asc", "repomd.xml.key"):
        if exists(base + extra):
            found.append(BundleFile(f"{repository.path}/repodata/{extra}", base + extra))
    root = ET.fromstring(read_url(base + "repomd.xml"))
    for data in root.iter(f"{_REPO_NS}data"):
        location = data.find(f"{_REPO_NS}location")
        checksum = data.find(f"{_REPO_NS}checksum")
        href = location.get("href") if location is not None else None
        if not href:
            continue
        sha256 = checksum.text if checksum is not None and checksum.get("type") == "sha256" else None
        found.append(BundleFile(f"{repository.path}/{href}", f"{repository.url}/{href}", sha256))
    return found


class DnfResolver:
    """dnf with its own install root, repositories and cache under `work`."""

    def __init__(self, plan: NodePlan, work: Path) -> None:
        self.plan, self.work = plan, work
        if shutil.which("dnf") is None or shutil.which("rpm") is None:
            raise InputError(f"resolving the packages of {plan.platform.name} needs dnf and rpm: build on a RHEL-family "
                             f"machine, in a container of {plan.platform.name}, or here after "
                             "`apt-get install dnf rpm`; or leave the platform out of --for")
        self.release = plan.platform.releases[0].split(".")[0]
        (work / "root").mkdir(parents=True, exist_ok=True)
        (work / "repos.d").mkdir(parents=True, exist_ok=True)
        (work / "cache").mkdir(parents=True, exist_ok=True)
        # Signatures are the nodes' to check (gpgcheck stays on there); here dnf only resolves.
        (work / "repos.d" / "bundle.repo").write_text("".join(
            f"[cb{index}]\nname={repository.name}\nbaseurl={repository.url}/\nenabled=1\ngpgcheck=0\n"
            f"repo_gpgcheck=0\n\n" for index, repository in enumerate(plan.repositories)))

    def _dnf(self, *args: str) -> str:
        work = self.work
        options = ["-y", "-q", f"--installroot={work / 'root'}", f"--releasever={self.release}",
                   f"--setopt=reposdir={work / 'repos.d'}", f"--setopt=cachedir={work / 'cache'}",
                   "--setopt=keepcache=True", f"--setopt=module_platform_id=platform:el{self.release}",
                   "--setopt=install_weak_deps=False", "--setopt=skip_if_unavailable=False", "--disableplugin=*",
                   "--forcearch=x86_64"]
        result = subprocess.run(["dnf", *options, *args], capture_output=True, text=True, timeout=DNF_TIMEOUT_S,
                                env={"LC_ALL": "C.UTF-8", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        if result.returncode != 0:
            detail = " ".join((result.stderr or result.stdout).split())[-600:]
            raise InputError(f"dnf could not resolve {self.plan.platform.name}'s packages ({args[0]}): {detail}")
        return result.stdout

    def resolve(self, store: Store) -> list[BundleFile]:
        """The closure's packages: dnf downloads them (into its cache here), they go into the store by sha256, and
        `dnf repoquery --location` says where each lives in its repository."""
        # A GPU bundle carries both of the driver module's streams (open and proprietary kernel modules), and dnf
        # enables one stream of a module at a time: one resolution per stream, into the same cache.
        modules: list[str | None] = [p for p in self.plan.packages if p.startswith("@")]
        plain = [p for p in self.plan.packages if not p.startswith("@")]
        for module in modules or [None]:
            if module is not None:
                self._dnf("module", "reset", module[1:].split(":")[0].split("/")[0])
                self._dnf("module", "enable", module[1:])
            self._dnf("install", "--downloadonly", *plain, *([module] if module else []))
        downloaded = sorted((self.work / "cache").rglob("*.rpm"))
        if not downloaded:
            return []
        query = subprocess.run(["rpm", "-qp", "--nosignature", "--qf", "%{NAME}-%{VERSION}-%{RELEASE}.%{ARCH}\\n",
                                *map(str, downloaded)], capture_output=True, text=True, timeout=300, check=True)
        nevras = query.stdout.split()
        listed = self._dnf("repoquery", "--location", *nevras)
        stored = {path.name: sha256_file(store.add(path)) for path in downloaded}
        repositories = sorted(self.plan.repositories, key=lambda r: len(r.url), reverse=True)
        found = []
        for url in dict.fromkeys(listed.split()):
            repository = next((r for r in repositories if url.startswith(r.url + "/")), None)
            if repository is not None:
                found.append(BundleFile(f"{repository.path}/{url[len(repository.url) + 1:]}", url,
                                        stored.get(url.rsplit("/", 1)[-1])))
        return found


def build_rpm(plan: NodePlan, work: Path, store: Store) -> list[BundleFile]:
    packages = DnfResolver(plan, work).resolve(store)
    return [f for r in plan.repositories for f in metadata_files(r)] + key_files(plan) + packages
