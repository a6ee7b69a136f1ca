"""A bundle's images, in the storage of a real registry (the CNCF distribution registry, Debian's `docker-registry`),
so that `bundle serve` only has to start one over it.

The build starts the registry over the bundle's `registry/` directory on a loopback port and copies each image
into it with skopeo, from where `up` would pull it online: the upstream registry, or the mirror
container_runtime.registry_mirrors names for it. Each lands at the path the offline rewrite gives it
(render/manifests.py image_ref), so `offline.image_repository: <bundle server>:5000` finds every one. An image
already there is not copied again.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

import yaml

from provision.errors import InputError
from provision.inputs.settings import Settings
from provision.inputs.sources import image_repository, registry_mirror_carries
from provision.render.manifests import image_ref

REGISTRY_DIR = "registry"
REGISTRY_TOOL = "docker-registry"
COPY_TIMEOUT_S = 3600
# Where an image without a registry lives (Docker Hub), and the host Docker Hub's registry answers on.
DEFAULT_REGISTRY = "docker.io"
DOCKER_HUB = "registry-1.docker.io"
_PLACEHOLDER_REGISTRY = "cb-bundle.invalid"


def bundle_path(settings: Settings, image: str) -> str:
    """The image's repository and tag in the bundle's registry: what image_ref makes of it under any
    offline.image_repository, less that registry."""
    offline = settings.offline.model_copy(update={"image_repository": _PLACEHOLDER_REGISTRY})
    moved = image_ref(settings.model_copy(update={"offline": offline}), image)
    return moved[len(_PLACEHOLDER_REGISTRY) + 1:]


def split_image(image: str) -> tuple[str, str]:
    """'quay.io/calico/node:v3' -> ('quay.io', 'calico/node:v3'); 'busybox:1' -> ('docker.io', 'library/busybox:1')."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return DEFAULT_REGISTRY, image if "/" in image else f"library/{image}"


def source_of(settings: Settings, image: str) -> tuple[str, bool]:
    """Where the build pulls `image` from (a skopeo docker:// reference) and whether over TLS: the first mirror the
    settings name for its registry that is not known to lack it (inputs/sources.py's tables: DaoCloud serves only
    its allow list), else the registry itself."""
    registry, path = split_image(image)
    repository = image_repository(image)[1]
    mirrors = [m for m in settings.container_runtime.registry_mirrors.get(registry, [])
               if registry_mirror_carries(m, repository) is not False]
    if mirrors:
        scheme, _, host = mirrors[0].partition("://")
        return f"{host.rstrip('/')}/{path}", scheme == "https"
    return f"{DOCKER_HUB if registry == DEFAULT_REGISTRY else registry}/{path}", True


def registry_config(storage: Path, address: str, port: int, *, readonly: bool) -> str:
    return yaml.safe_dump({
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": False},
                    "maintenance": {"uploadpurging": {"enabled": False}, "readonly": {"enabled": readonly}}},
        "http": {"addr": f"{address}:{port}"},
    })


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Registry:
    """docker-registry serving `storage` on address:port while the `with` block runs."""

    def __init__(self, storage: Path, address: str = "127.0.0.1", port: int | None = None, *,
                 readonly: bool = False, log: Path | None = None) -> None:
        if shutil.which(REGISTRY_TOOL) is None:
            raise InputError(f"the bundle's images need a registry: apt-get install {REGISTRY_TOOL} (the CNCF "
                             "distribution registry)")
        self.storage, self.address, self.port = storage, address, port or free_port()
        self.readonly, self.log = readonly, log
        self.process: subprocess.Popen[bytes] | None = None
        self._config: Path | None = None

    @property
    def host(self) -> str:
        return f"{self.address}:{self.port}"

    def __enter__(self) -> Registry:
        self.storage.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(suffix=".yml")
        os.close(handle)
        self._config = Path(name)
        self._config.write_text(registry_config(self.storage, self.address, self.port, readonly=self.readonly))
        out = self.log.open("ab") if self.log else subprocess.DEVNULL
        self.process = subprocess.Popen([REGISTRY_TOOL, "serve", str(self._config)], stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise InputError(f"{REGISTRY_TOOL} stopped at once on {self.host} (is the port taken?)")
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2):
                    return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        self.__exit__(None, None, None)
        raise InputError(f"{REGISTRY_TOOL} did not answer on {self.host} within 30 s")

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._config:
            self._config.unlink(missing_ok=True)

    def has(self, path: str) -> bool:
        result = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{self.host}/{path}"],
                                capture_output=True, timeout=120)
        return result.returncode == 0


def copy_images(settings: Settings, images: list[str], storage: Path) -> dict[str, str]:
    """Each upstream image into the registry storage at its bundle path; returns upstream -> bundle path."""
    if shutil.which("skopeo") is None:
        raise InputError("copying the bundle's images needs skopeo: apt-get install skopeo")
    copied = {}
    with Registry(storage) as registry:
        for image in images:
            path = bundle_path(settings, image)
            copied[image] = path
            if registry.has(path):
                continue
            source, tls = source_of(settings, image)
            result = subprocess.run(["skopeo", "copy", "--retry-times", "2", f"--src-tls-verify={str(tls).lower()}",
                                     "--dest-tls-verify=false", f"docker://{source}", f"docker://{registry.host}/{path}"],
                                    capture_output=True, text=True, timeout=COPY_TIMEOUT_S)
            if result.returncode != 0:
                detail = " ".join(result.stderr.split())[-400:]
                raise InputError(f"image {image} could not be copied from {source} ({detail}): give this machine "
                                 "access to it, or name a mirror that has it in container_runtime.registry_mirrors")
    return copied
