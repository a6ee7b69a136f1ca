"""The settings' sections about where everything comes from and how nodes are reached: the container runtime and
its registry mirrors, the mirrors (a profile and per-source overrides), the offline source, Calico's release,
packages and downloads, Ansible, SSH."""
from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from provision.inputs import versions
from provision.inputs.files import shown
from provision.inputs.settings_base import (
    CalicoVersion,
    _Section,
)
from provision.inputs.values import (
    LOCAL_PATH,
    Fingerprint,
    Registry,
    RegistryHost,
    RepositoryUrl,
    Url,
)


class ContainerRuntimeSettings(_Section):
    # containerd runs the pods; the Docker engine is installed beside it for building images (the kubelet does
    # not use it), from the same place as containerd: docker-ce with Docker's containerd.io, docker.io with the
    # distribution's containerd (Debian's docker.io cannot sit beside containerd.io).
    install_docker: bool = True
    # auto: Docker's containerd.io where the distribution's containerd is older than 2.0, else the distribution's.
    containerd_source: Literal["auto", "docker", "distribution"] = "auto"
    # Registry host -> mirror endpoints, written into containerd's hosts.toml files.
    registry_mirrors: dict[RegistryHost, list[Url]] = Field(default_factory=dict)

    @field_validator("registry_mirrors")
    @classmethod
    def _mirrors(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for registry, endpoints in value.items():
            if not endpoints:
                raise ValueError(f"{registry} has no mirror: list at least one URL, or leave the registry out")
        return value


class MirrorProfile(StrEnum):
    """Named sets of sources (inputs/sources.py PROFILES holds what each one points at)."""

    default = "default"
    # Mirrors reachable from mainland China.
    cn = "cn"


class MirrorSettings(_Section):
    # A named profile switches every source at once; a per-source value below overrides the profile.
    # Not strict: YAML gives the profile's name, which names the member.
    profile: MirrorProfile = Field(default=MirrorProfile.default, strict=False)
    os_repo: RepositoryUrl | None = None
    docker_repo: RepositoryUrl | None = None
    kubernetes_repo: RepositoryUrl | None = None
    nvidia_cuda_repo: RepositoryUrl | None = None
    nvidia_toolkit_repo: RepositoryUrl | None = None
    image_repository: Registry | None = None
    calico_manifest: RepositoryUrl | None = None
    pip_index: RepositoryUrl | None = None
    # The CIFAR-10 python archive the smoke test's pods fetch (dataset: cifar10), as a full URL.
    cifar10_archive: RepositoryUrl | None = None
    # Raw files of GitHub repositories (Volcano's installer): raw.githubusercontent.com or a mirror of it.
    github_raw: RepositoryUrl | None = None
    # A base URL holding the add-ons' release manifests already rendered, as <addon>/<version>/<part>.yaml
    # (docs/addons.md): replaces GitHub for every add-on, the Kubeflow ones included.
    addon_manifests: RepositoryUrl | None = None

    @field_validator("image_repository", mode="before")
    @classmethod
    def _registry(cls, value: object) -> object:
        # A trailing '/' is how a path is often copied; the registry is the same without it.
        return value.rstrip("/") if isinstance(value, str) else value


class OfflineSettings(_Section):
    # A local directory on the nodes (file://) or an HTTP repository that replaces every online source.
    # Layout expected under it is documented in docs/offline.md.
    source: RepositoryUrl | None = None
    image_repository: Registry | None = None
    # The key a bundle at `source` must be signed by (`bootstrap bundle build` prints it): with it set, `source`
    # must be a bundle that verifies against that key, checked before any node is touched.
    bundle_fingerprint: Fingerprint | None = None

    @field_validator("source", mode="before")
    @classmethod
    def _absolute_path_is_a_file_url(cls, value: object) -> object:
        if isinstance(value, str) and value.startswith("/"):
            value = "file://" + value
        if isinstance(value, str) and not re.match(r"(?:https?|file)://", value, re.ASCII | re.IGNORECASE):
            raise ValueError(f"{shown(value)} is neither an absolute path nor an http(s):// or file:// URL")
        # A trailing '/' is how a folder is often written; the source is the same without it (file:/// stays, and is
        # refused: the root is no source).
        return value.rstrip("/") if isinstance(value, str) and not value.endswith(":///") else value

    @field_validator("image_repository", mode="before")
    @classmethod
    def _registry(cls, value: object) -> object:
        return value.rstrip("/") if isinstance(value, str) else value

    @model_validator(mode="after")
    def _fingerprint_needs_a_source(self) -> OfflineSettings:
        if self.bundle_fingerprint is not None and self.source is None:
            raise ValueError("offline.bundle_fingerprint names the key the bundle at offline.source must be signed "
                             "by, and offline.source is not set: set offline.source to the bundle, or remove "
                             "bundle_fingerprint")
        return self


class CalicoSettings(_Section):
    # Left out: the release the versions table pairs with kubernetes.version (filled in by Settings).
    version: CalicoVersion = versions.kubernetes_release(int(versions.KUBERNETES_DEFAULT.split(".")[1])).calico

    @field_validator("version", mode="before")
    @classmethod
    def _a_tag(cls, value: object) -> object:
        if not isinstance(value, str):
            raise ValueError(f"{shown(value)} is not a Calico release tag: write it as v3.33.1 (quoted or not)")
        return value


class PackagesSettings(_Section):
    # How long a package transaction waits for a dpkg/apt or rpm/dnf lock another process holds (unattended-upgrades
    # or cloud-init on a freshly booted machine) before it fails, naming the lock and its holder.
    lock_timeout_s: int = Field(default=300, ge=1, le=86400)


class DownloadsSettings(_Section):
    # Tries per download (repository keys and package lists, packages, Calico's manifest) when it fails transiently
    # (a mirror's 5xx, a reset connection, a slow read), with a doubling pause between them; permanent failures
    # (404, a bad signature) fail at once.
    attempts: int = Field(default=4, ge=1, le=10)


class AnsibleSettings(_Section):
    # auto: Mitogen's mitogen_linear strategy when it is installed and supports this Ansible, else the stock one.
    # Mitogen costs far less controller CPU per task and host; stock is the fallback and the reference.
    executor: Literal["auto", "mitogen", "stock"] = "auto"


class SshSettings(_Section):
    # Host keys are always checked; accepting unknown keys on first contact must be asked for.
    accept_new_host_keys: bool = False
    known_hosts_file: str = "~/.ssh/known_hosts"
    connect_timeout_s: int = Field(default=10, ge=1, le=300)

    @field_validator("known_hosts_file")
    @classmethod
    def _known_hosts(cls, value: str) -> str:
        problem = known_hosts_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @property
    def known_hosts_path(self) -> Path:
        return Path(self.known_hosts_file).expanduser()


def known_hosts_problem(value: str) -> str | None:
    """Why `value` cannot be a known_hosts file (host keys are read from it and new ones appended), or None."""
    if not value.strip() or LOCAL_PATH.problem(value):
        return f"{shown(value)} is not a file name: name the known_hosts file, e.g. ~/.ssh/known_hosts"
    try:
        path = Path(value).expanduser()
    except RuntimeError:
        return f"{shown(value)} names a home directory that does not exist: write the path out"
    try:
        if path.exists() and not path.is_file():
            return f"{path} is a directory, not a known_hosts file: name the file in it, e.g. {path / 'known_hosts'}"
        blocker = next((p for p in path.parents if p.exists()), None)
    except OSError as exc:
        return f"{shown(value)} cannot name a file here ({exc.strerror})"
    if blocker is not None and not blocker.is_dir():
        return f"{path}: {blocker} is a file, so the known_hosts file cannot be there"
    return None
