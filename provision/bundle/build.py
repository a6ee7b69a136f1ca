"""`bootstrap bundle build`: everything `up` fetches for some platforms and settings, in the layout offline.source
reads (docs/offline.md), checked and signed.

What goes in is what the run reads, from the same functions the run uses: the roles' packages and repositories
(plan.py), the manifests `up` downloads (render/manifests.py calico_source, render/addons.py part_source), the
CIFAR-10 archive the smoke test fetches, and every image of the run (render/images.py), kubeadm's listed by the
release's own kubeadm. Each is fetched from where the settings point `up` online, into a content-addressed store
under the bundle's `.build/`, so an interrupted build run again reuses what it has.
"""
from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from provision.bundle.apt import BundleFile, build_apt
from provision.bundle.fetch import Store, place
from provision.bundle.images import REGISTRY_DIR, copy_images
from provision.bundle.manifest import BUILD_DIR, OWN_FILES, Contents, bundle_files, write_manifest
from provision.bundle.plan import BUNDLE_ROOT, NodePlan, containerd_source, node_plan, offline_settings
from provision.bundle.rpm import build_rpm
from provision.errors import InputError
from provision.inputs.addons import ADDONS, AddonName
from provision.inputs.platforms import Platform, bundle_key
from provision.inputs.settings import Settings, parse_settings
from provision.inputs.sources import resolve_sources
from provision.render.addons import part_source
from provision.render.images import kubeadm_images, manifest_images, own_images
from provision.render.manifests import calico_source

KUBEADM_TIMEOUT_S = 60


@dataclass(frozen=True)
class BuildRequest:
    platforms: tuple[Platform, ...]
    gpu: bool
    output: Path  # a directory, or a .tar file (built in <name>.d beside it, then packed)
    key_home: Path
    addons: tuple[AddonName, ...] | None = None  # None: the settings' addons.enabled
    kubernetes: str | None = None  # None: the settings' kubernetes.version
    # Where downloads are kept by sha256 (default: the bundle's .build/store); one cache serves many bundles.
    cache: Path | None = None


@dataclass(frozen=True)
class BuildResult:
    root: Path
    archive: Path | None
    contents: Contents
    fingerprint: str
    files: int
    size: int
    downloaded: int
    seconds: float
    sizes: dict[str, int]  # per top-level part: os/, kubernetes/, registry/ ...


def build_settings(settings: Settings, request: BuildRequest) -> Settings:
    """The settings the bundle is built for: cluster.yaml's, with the flags' Kubernetes release and add-ons (checked
    as cluster.yaml's would be: Calico follows the release)."""
    data = settings.model_dump(exclude_unset=True)
    if request.kubernetes:
        data.setdefault("kubernetes", {})["version"] = request.kubernetes
        data.get("calico", {}).pop("version", None)
    if request.addons is not None:
        data.setdefault("addons", {})["enabled"] = list(request.addons)
    if settings.offline.source:
        raise InputError("cluster.yaml sets offline.source: a bundle is built from the online sources (mirrors.*), "
                         "so build it with a cluster.yaml without offline.source")
    return parse_settings(data, "the bundle's settings")


def _inside(offline_url: str) -> str:
    return offline_url[len(BUNDLE_ROOT) + 1:]


def manifest_files(settings: Settings) -> list[BundleFile]:
    """Calico's manifest and the enabled add-ons' raw parts: from where `up` fetches them, to where `up` reads them
    from an offline source (the kustomize parts are rendered apart: `rendered_parts`)."""
    offline = offline_settings(settings)
    found = [BundleFile(_inside(calico_source(offline).url), calico_source(settings).url)]
    for name in settings.addons.enabled:
        for part in ADDONS[name].parts:
            fetch, source = part_source(settings, name, part.name)
            if fetch == "url":
                found.append(BundleFile(_inside(part_source(offline, name, part.name)[1]), source))
    return found


def rendered_parts(settings: Settings, store: Store) -> dict[str, Path]:
    """The add-ons' kustomize parts rendered here (`kubectl kustomize`, which needs git), as the control plane
    would: bundle path -> the stored file."""
    offline = offline_settings(settings)
    found = {}
    for name in settings.addons.enabled:
        for part in ADDONS[name].parts:
            fetch, source = part_source(settings, name, part.name)
            if fetch != "kustomize":
                continue
            if shutil.which("kubectl") is None or shutil.which("git") is None:
                raise InputError(f"{ADDONS[name].title}'s {part.name} part is a kustomize target ({source}): rendering "
                                 "it needs kubectl and git on this machine, or mirrors.addon_manifests pointing at it "
                                 "rendered (docs/addons.md)")
            result = subprocess.run(["kubectl", "kustomize", source], capture_output=True, timeout=600)
            if result.returncode != 0:
                raise InputError(f"kubectl kustomize {source} failed: {result.stderr.decode(errors='replace')[-300:]}")
            with tempfile.NamedTemporaryFile(dir=store.root / "partial", delete=False) as out:
                out.write(result.stdout)
            found[_inside(part_source(offline, name, part.name)[1])] = store.add(Path(out.name))
            Path(out.name).unlink()
    return found


def kubeadm_release(root: Path, plans: list[NodePlan]) -> tuple[str, list[str]]:
    """The Kubernetes release the bundle's kubeadm is, and the images it lists for it (it is the authority on its
    control-plane images): read from the first kubeadm package in the bundle, unpacked here."""
    packages = sorted((root / "kubernetes").rglob("kubeadm[_-]*.*")) if (root / "kubernetes").is_dir() else []
    package = next((p for p in packages if p.suffix in (".deb", ".rpm")), None)
    if package is None:
        raise InputError("the bundle has no kubeadm package: its Kubernetes repository gave none")
    with tempfile.TemporaryDirectory() as scratch:
        if package.suffix == ".deb":
            subprocess.run(["dpkg-deb", "-x", str(package), scratch], check=True, capture_output=True, timeout=120)
        else:
            # rpm2archive (beside rpm2cpio, which rpm depends on) writes the payload as a tar: no cpio needed.
            if shutil.which("rpm2archive") is None:
                raise InputError(f"reading kubeadm from {package.name} needs rpm2archive on this machine (Debian and "
                                 "Ubuntu: apt-get install rpm2cpio; the RHEL family: dnf install rpm)")
            with package.open("rb") as rpm:
                payload = subprocess.run(["rpm2archive", "-n", "-"], stdin=rpm, check=True, capture_output=True,
                                         timeout=120).stdout
            with tarfile.open(fileobj=io.BytesIO(payload)) as tar:
                tar.extractall(scratch, filter="data")
        binary = next(Path(scratch).rglob("bin/kubeadm"), None)
        if binary is None:
            raise InputError(f"{package.name} holds no kubeadm binary")
        version = subprocess.run([str(binary), "version", "-o", "short"], capture_output=True, text=True,
                                 timeout=KUBEADM_TIMEOUT_S).stdout.strip().lstrip("v")
        listed = subprocess.run([str(binary), "config", "images", "list", "--kubernetes-version", f"v{version}",
                                 "--image-repository", "registry.k8s.io"], capture_output=True, text=True,
                                timeout=KUBEADM_TIMEOUT_S)
    try:
        return version, kubeadm_images(listed.stdout)
    except ValueError as exc:
        raise InputError(f"{package.name}: {exc}") from None


def _cifar10(settings: Settings, store: Store) -> tuple[str, Path] | None:
    if settings.smoke_test.dataset != "cifar10":
        return None
    url = resolve_sources(settings).cifar10_archive
    stored = store.fetch(url)
    digest = hashlib.md5(stored.read_bytes(), usedforsecurity=False).hexdigest()
    if digest != settings.smoke_test.cifar10_md5:
        raise InputError(f"{url}: its md5 is {digest}, not smoke_test.cifar10_md5 ({settings.smoke_test.cifar10_md5})")
    return _inside(resolve_sources(offline_settings(settings)).cifar10_archive), stored


def bundle_images(settings: Settings, *, gpu: bool, control_plane: list[str], manifests: list[str]) -> list[str]:
    """Every image the bundle's registry must hold: kubeadm's, ours, and every image the packed manifests name
    (render/images.py manifest_images: the rule the control plane moves them offline by)."""
    named = [image for text in manifests for image in manifest_images(text)]
    return list(dict.fromkeys(control_plane + own_images(settings, gpu=gpu) + named))


def _sizes(root: Path) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for name, path in bundle_files(root).items():
        part = name.split("/", 1)[0]
        sizes[part] = sizes.get(part, 0) + path.stat().st_size
    return sizes


def build_bundle(settings: Settings, request: BuildRequest, progress: Callable[[str], None] = lambda _: None
                 ) -> BuildResult:
    started = time.monotonic()
    # Everything that can refuse without a download comes first: a refused build writes nothing (the CLI judged
    # the output folder before this: new, empty, or an earlier build's, cli/option_kinds.bundle_output).
    settings = build_settings(settings, request)
    plans = [node_plan(platform, settings, gpu=request.gpu) for platform in request.platforms]
    archive = request.output if request.output.suffix == ".tar" else None
    root = request.output.with_name(request.output.name + ".d") if archive else request.output
    work = root / BUILD_DIR
    store = Store(request.cache or work / "store")
    # A bundle is a closed set of files (tree.py): its files may be hard links to its own store, never to a cache
    # outside it, whose file would change the bundle's when it changes.
    link = request.cache is None
    wanted: dict[str, Path] = {}

    def take(files: list[BundleFile]) -> None:
        for item in files:
            wanted[item.dest] = store.fetch(item.url, item.sha256)

    for plan in plans:
        key = bundle_key(plan.platform)
        progress(f"{plan.platform.name}: resolving {len(plan.packages)} packages and their dependencies")
        build = build_apt if plan.platform.package_manager == "apt" else build_rpm
        files = build(plan, work / key, store)
        progress(f"{plan.platform.name}: {len(files)} files")
        take(files)
    progress("manifests")
    take(manifest_files(settings))
    wanted |= rendered_parts(settings, store)
    cifar = _cifar10(settings, store)
    if cifar:
        wanted[cifar[0]] = cifar[1]
    for dest, stored in wanted.items():
        place(stored, root / dest, link=link)
    # What an earlier build left that this one does not hold (the registry is the registry's to keep).
    for name, path in bundle_files(root).items():
        if name not in wanted and name.split("/", 1)[0] != REGISTRY_DIR:
            path.unlink()
    version, control_plane_images = kubeadm_release(root, plans)
    manifests_text = [(root / dest).read_text() for dest in wanted if dest.endswith(".yaml")]
    images = bundle_images(settings, gpu=request.gpu, control_plane=control_plane_images, manifests=manifests_text)
    progress(f"images: {len(images)}")
    copied = copy_images(settings, images, root / REGISTRY_DIR)
    contents = Contents(platforms=tuple(bundle_key(p.platform) for p in plans), gpu=request.gpu,
                        kubernetes_minor=settings.kubernetes.minor, kubernetes_version=version,
                        calico=settings.calico.version,
                        addons={name: settings.addons.version(name) for name in settings.addons.enabled},
                        images=copied, cifar10=cifar is not None,
                        containerd_sources={bundle_key(p.platform): containerd_source(settings, p.platform)
                                            for p in plans})
    progress("manifest and signature")
    fingerprint = write_manifest(root, contents, request.key_home)
    held = bundle_files(root)
    if archive:
        progress(f"packing {archive}")
        with tarfile.open(archive, "w") as tar:
            for name in sorted(set(held) | set(OWN_FILES)):
                tar.add(root / name, arcname=name)
    return BuildResult(root=root, archive=archive, contents=contents, fingerprint=fingerprint, files=len(held),
                       size=sum(p.stat().st_size for p in held.values()), downloaded=store.downloaded,
                       seconds=time.monotonic() - started, sizes=_sizes(root))
