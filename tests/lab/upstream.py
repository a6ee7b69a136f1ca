"""The upstreams a bundle build reads, as this machine can have them: Debian's archive for real, the rest stand-ins.

One HTTP server on 127.0.0.1 plays a mirror of everything (as mirrors.aliyun.com does for the cn profile):

- `os/debian/`, `os/debian-security/`: passed through to deb.debian.org (the real archive: real packages, real
  signatures); `os/rockylinux/`: the lab's RPM tree (stand-ins, signed by a throwaway key);
- `docker/debian/` (containerd.io around Debian's containerd 2 and runc), `docker/rhel/`, `kubernetes/v<minor>/deb|rpm`
  (placeholder kubeadm, kubelet, kubectl; kubeadm answers `config images list`): stand-ins from tests/lab/repos.py;
- `nvidia-cuda/rhel9/`, `nvidia-cuda/debian12/`, `nvidia-container-toolkit/` (rpm and deb; also as `.../stable/`,
  its upstream channel): NVIDIA's repositories as stand-ins (tests/lab/repos.py), signed by the RPM tree's key;
- `calico/<version>/manifests/calico.yaml`, `github-raw/...` (Volcano's installer): small manifests naming the images
  the real ones name, at this release's versions;
- `cifar10/cifar-10-python.tar.gz`: a small stand-in archive (its md5 goes into the settings).

Images: a docker-registry on 127.0.0.1 holding a stand-in of every image the run pulls, named as a mirror of every
upstream registry (container_runtime.registry_mirrors).
"""
from __future__ import annotations

import functools
import hashlib
import http.server
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provision.bundle.images import Registry, free_port
from provision.inputs import versions
from provision.inputs.addons import ADDONS
from provision.inputs.settings import parse_settings
from provision.render.images import manifest_images, own_images
from tests.lab.images import fill_registry
from tests.lab.lab import CACHE_DIR
from tests.lab.repos import (
    STAND_IN_KUBEADM_EXTRA,
    RpmTree,
    build_docker_apt_repo,
    build_kubernetes_repo,
    build_rpm_tree,
)

# What a build runs on this machine (scripts/setup.sh installs them).
TOOLS = ("apt-get", "dnf", "rpm", "rpmbuild", "rpmsign", "createrepo_c", "skopeo", "docker-registry", "gpg", "gpgv",
         "dpkg-deb")
# Downloads kept between sessions, by sha256: a later session's build fetches only what the archive changed.
STORE = CACHE_DIR / "bundle-store"
DEBIAN = {"os/debian/": "http://deb.debian.org/debian/", "os/debian-security/": "http://deb.debian.org/debian-security/"}
TOOLKIT_CHANNEL = "nvidia-container-toolkit/stable/"
REGISTRIES = ("registry.k8s.io", "quay.io", "docker.io", "nvcr.io", "ghcr.io")
VOLCANO_IMAGES = ("vc-webhook-manager", "vc-controller-manager", "vc-scheduler")


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Files from the stand-in tree; the Debian archive's paths passed through to it."""

    def do_GET(self) -> None:
        path = self.path.lstrip("/")
        # NVIDIA's toolkit channel (.../stable/rpm/...) with its key one level up, as upstream lays it out.
        if path.startswith(TOOLKIT_CHANNEL):
            self.path = "/nvidia-container-toolkit/" + path[len(TOOLKIT_CHANNEL):]
        upstream = next((url + path[len(prefix):] for prefix, url in DEBIAN.items() if path.startswith(prefix)), None)
        if upstream is None:
            return super().do_GET()
        try:
            with urllib.request.urlopen(upstream, timeout=60) as response:
                self.send_response(200)
                self.send_header("Content-Length", response.headers.get("Content-Length", "0"))
                self.end_headers()
                shutil.copyfileobj(response, self.wfile)
        except urllib.error.HTTPError as exc:
            self.send_error(exc.code)
        except (urllib.error.URLError, OSError):
            self.send_error(502)
        return None

    def log_message(self, format: str, *args: Any) -> None:
        return


def calico_manifest(version: str) -> str:
    """A manifest in the shape of Calico's calico.yaml, naming its images at `version` (what a bundle reads)."""
    containers = [{"name": image.rsplit("/", 1)[-1], "image": f"{image}:{version}"}
                  for image in versions.calico_images(version)]
    return yaml.safe_dump({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "calico-node"},
                           "spec": {"template": {"spec": {"containers": containers}}}})


def volcano_manifest(version: str) -> str:
    return yaml.safe_dump_all([{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                                "spec": {"template": {"spec": {"containers": [
                                    {"name": name, "image": f"docker.io/volcanosh/{name}:{version}"}]}}}}
                               for name in VOLCANO_IMAGES])


@dataclass(frozen=True)
class Upstream:
    url: str
    registry: str  # host:port
    cifar10_md5: str
    rpm_tree: RpmTree

    def settings(self, **sections: dict[str, Any]) -> dict[str, Any]:
        """cluster.yaml for a build that reads these upstreams (plus `sections`)."""
        data: dict[str, Any] = {
            "mirrors": {"os_repo": f"{self.url}/os", "docker_repo": f"{self.url}/docker",
                        "kubernetes_repo": f"{self.url}/kubernetes", "calico_manifest": f"{self.url}/calico",
                        "github_raw": f"{self.url}/github-raw",
                        # NVIDIA's repositories: stand-ins in their own layouts, for the RHEL family and Debian 12.
                        "nvidia_cuda_repo": f"{self.url}/nvidia-cuda",
                        "nvidia_toolkit_repo": f"{self.url}/{TOOLKIT_CHANNEL.rstrip('/')}",
                        "cifar10_archive": f"{self.url}/cifar10/cifar-10-python.tar.gz"},
            "container_runtime": {"install_docker": False,
                                  "registry_mirrors": {r: [f"http://{self.registry}"] for r in REGISTRIES}},
            "smoke_test": {"dataset": "cifar10", "cifar10_md5": self.cifar10_md5},
        }
        for name, values in sections.items():
            data.setdefault(name, {}).update(values)
        return data


@contextmanager
def serve_upstream(root: Path, *, minor: str = versions.KUBERNETES_DEFAULT) -> Iterator[Upstream]:
    """Build the stand-in tree under `root` and serve it (and Debian's archive) while the block runs."""
    tree = build_rpm_tree(root / "tree", kube_minor=minor, releasevers=("9",), nvidia_apt=("debian12",))
    build_kubernetes_repo(root / "tree", minor)
    build_docker_apt_repo(root / "tree")
    settings = parse_settings({"kubernetes": {"version": minor}})
    calico = root / "tree" / "calico" / settings.calico.version / "manifests" / "calico.yaml"
    calico.parent.mkdir(parents=True)
    calico.write_text(calico_manifest(settings.calico.version))
    volcano = ADDONS["volcano"]
    installer = root / "tree" / "github-raw" / volcano.parts[0].path.format(version=volcano.version)
    installer.parent.mkdir(parents=True)
    installer.write_text(volcano_manifest(volcano.version))
    archive = root / "tree" / "cifar10" / "cifar-10-python.tar.gz"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"stand-in for the CIFAR-10 archive\n")
    release = next(r for r in versions.KUBERNETES_RELEASES if r.name == minor)
    kubeadm = [f"registry.k8s.io/kube-{part}:v{minor}.0" for part in
               ("apiserver", "controller-manager", "scheduler", "proxy")] + \
        [f"registry.k8s.io/{image}" for image in STAND_IN_KUBEADM_EXTRA] + [f"registry.k8s.io/pause:{release.pause}"]
    images = list(dict.fromkeys(kubeadm + own_images(settings, gpu=True) + manifest_images(calico.read_text())
                                + manifest_images(installer.read_text())))
    with ExitStack() as stack:
        storage = root / "registry"
        fill_registry(storage, images, root)
        registry = stack.enter_context(Registry(storage, port=free_port()))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler,
                                                                                      directory=str(root / "tree")))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        stack.callback(server.server_close)
        stack.callback(server.shutdown)
        yield Upstream(f"http://127.0.0.1:{server.server_address[1]}", registry.host,
                       hashlib.md5(archive.read_bytes(), usedforsecurity=False).hexdigest(), tree)
