"""Whether the bundle `offline.source` points at can serve a run: it verifies, and it holds what the settings need.

Asked before any node is touched (the CLI loads the inputs, then this). An offline source with a bundle.json is a
bundle; one without is a hand-made copy of the layout, checked by preflight's sources check as before, unless
`offline.bundle_fingerprint` says it must be a bundle signed by that key. A bundle on this machine (a file:// path
that exists here) is checked whole, every file's sha256; over HTTP the signed manifest is checked, and the nodes'
apt and dnf check every package against the signed indexes it vouches for, containerd every image layer against
its digest.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from provision.bundle.fetch import FetchError, read_url
from provision.bundle.manifest import MANIFEST, PUBLIC_KEY, SIGNATURE, Contents, judge_manifest, verify_directory
from provision.errors import InputError
from provision.inputs.addons import ADDONS
from provision.inputs.inventory import Cluster
from provision.inputs.platforms import bundle_key
from provision.inputs.settings import Settings
from provision.inputs.sources import resolve_sources
from provision.nodes.sources_check import NodeTarget
from provision.render.addons import part_source
from provision.render.images import own_images
from provision.render.manifests import calico_source


def _read(source: str, name: str, *, required: bool) -> bytes | None:
    """`name` under `source`, or None where it is not there. Where this machine cannot reach `source` at all, only a
    source that must be a bundle (`required`: offline.bundle_fingerprint set) is refused: the nodes read
    offline.source, not this machine, and preflight proves from the nodes that it answers."""
    try:
        return read_url(f"{source}/{name}")
    except FetchError as exc:
        if "404" in str(exc) or "No such file" in str(exc) or not required:
            return None
        raise InputError(f"offline.source {source}: {name} could not be read from this machine ({exc}): serve the "
                         "bundle where this machine reaches it too (bootstrap bundle serve)") from None


def missing_for(contents: Contents, settings: Settings, cluster: Cluster | None) -> list[str]:
    """What the settings (and the inventory's GPU nodes) need that the bundle does not hold."""
    problems = []
    kube = settings.kubernetes
    if kube.minor != contents.kubernetes_minor:
        problems.append(f"kubernetes.version is {kube.version}, the bundle holds Kubernetes {contents.kubernetes_version}")
    elif kube.version.count(".") == 2 and kube.version != contents.kubernetes_version:
        problems.append(f"kubernetes.version pins {kube.version}, the bundle holds {contents.kubernetes_version}")
    if settings.calico.version != contents.calico:
        problems.append(f"calico.version is {settings.calico.version}, the bundle holds Calico {contents.calico}")
    for name in settings.addons.enabled:
        held = contents.addons.get(name)
        if held != settings.addons.version(name):
            problems.append(f"addons.enabled has {name} {settings.addons.version(name)}, the bundle holds "
                            f"{held or 'none of it'}")
    gpu_nodes = [n.name for n in cluster.nodes if n.gpu == "true"] if cluster else []
    if gpu_nodes and not contents.gpu:
        problems.append(f"{', '.join(gpu_nodes)} {'is a GPU node' if len(gpu_nodes) == 1 else 'are GPU nodes'} "
                        "(gpu=true) and the bundle has no NVIDIA stack (built without --gpu)")
    if settings.smoke_test.dataset == "cifar10" and not contents.cifar10:
        problems.append("smoke_test.dataset is cifar10 and the bundle has no CIFAR-10 archive")
    needed = own_images(settings, gpu=contents.gpu)
    absent = [image for image in needed if image not in contents.images]
    if absent:
        problems.append(f"the bundle lacks the image{'s' if len(absent) > 1 else ''} {', '.join(absent[:3])}"
                        f"{' ...' if len(absent) > 3 else ''}")
    return problems


def node_problems(contents: Contents, targets: Iterable[NodeTarget]) -> list[str]:
    """What the nodes preflight found need that the bundle does not hold: their platform, and the NVIDIA stack on
    GPU nodes."""
    held = ", ".join(contents.platforms)
    problems = []
    for target in targets:
        key = bundle_key(target.platform)
        if key not in contents.platforms:
            problems.append(f"{target.node.name} runs {target.platform.name} ({key}), which the bundle does not carry "
                            f"(it holds {held}): rebuild it with --for {','.join([*contents.platforms, key])}")
        if target.gpu and not contents.gpu:
            problems.append(f"{target.node.name} is a GPU node and the bundle has no NVIDIA stack: rebuild it with --gpu")
    return problems


def layout_problems(local: Path, settings: Settings) -> list[str]:
    """What a hand-made offline source on this machine lacks of docs/offline.md's layout for these settings (the
    parts every node reads whatever its platform: the Kubernetes repository, Calico's manifest, the enabled
    add-ons' manifests, the CIFAR-10 archive; the platform's own parts are asked of the nodes by preflight)."""
    sources = resolve_sources(settings)
    base = f"file://{local}"

    def here(url: str) -> Path:
        return local / url.removeprefix(base).lstrip("/")

    kubernetes = here(sources.kubernetes_repo) / f"v{settings.kubernetes.minor}"
    needed: list[tuple[Path, str]] = []
    problems = []
    if not (kubernetes / "deb").is_dir() and not (kubernetes / "rpm").is_dir():
        problems.append(f"{kubernetes.relative_to(local)}/deb or /rpm (the Kubernetes packages) is missing")
    needed.append((here(calico_source(settings).url), "Calico's manifest"))
    for name in settings.addons.enabled:
        for part in ADDONS[name].parts:
            needed.append((here(part_source(settings, name, part.name)[1]), f"{name}'s {part.name} manifest"))
    if settings.smoke_test.dataset == "cifar10":
        needed.append((here(sources.cifar10_archive), "the CIFAR-10 archive (smoke_test.dataset: cifar10)"))
    problems += [f"{path.relative_to(local)} ({what}) is missing" for path, what in needed
                 if not path.is_file() or path.is_symlink()]
    return problems


def check_offline_bundle(settings: Settings, cluster: Cluster | None = None, *, files: bool = True) -> Contents | None:
    """The bundle's contents when offline.source is a bundle that verifies and serves these settings; None when it
    is no bundle (and none is required); InputError naming every problem otherwise. files=False checks a local
    bundle's signed manifest only, not every file's sha256 again (preflight, after the CLI checked them whole)."""
    source = settings.offline.source
    if not source:
        return None
    pinned = settings.offline.bundle_fingerprint
    where = f"offline.source {source}"
    fix = "rebuild it (bootstrap bundle build) for these settings, or point offline.source at one that has them"
    local = Path(source.removeprefix("file://")) if source.startswith("file://") else None
    if local is not None and local.is_dir() and files:
        if not (local / MANIFEST).exists() and not (local / MANIFEST).is_symlink():
            if pinned:
                raise InputError(f"{where} is not a bundle (no {MANIFEST}) and offline.bundle_fingerprint is set: "
                                 "point it at the bundle")
            # A hand-made copy of the layout on this machine: what every node will read is there, or it is named.
            missing = layout_problems(local, settings)
            if missing:
                raise InputError(f"{where} is not a bundle and lacks what docs/offline.md's layout holds for these "
                                 f"settings: {'; '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}: copy them "
                                 "there, or build a bundle (bootstrap bundle build)")
            return None
        verdict = verify_directory(local, fingerprint=pinned)
    elif local is not None and not local.is_dir():
        if pinned:
            raise InputError(f"{where}: offline.bundle_fingerprint is set, so the bundle is checked before the run, "
                             "and this machine has no such directory: serve it (bootstrap bundle serve) and use its "
                             "http:// URL, or copy it here at the same path")
        return None
    else:
        base = source if local is None else local.as_uri()
        manifest = _read(base, MANIFEST, required=bool(pinned))
        if manifest is None:
            if pinned:
                raise InputError(f"{where} has no {MANIFEST} and offline.bundle_fingerprint is set: point it at the "
                                 "bundle's server")
            return None
        verdict = judge_manifest(manifest, _read(base, SIGNATURE, required=True), _read(base, PUBLIC_KEY, required=True),
                                 fingerprint=pinned)
    if not verdict.ok:
        shown = "; ".join(verdict.problems[:5]) + (f"; and {len(verdict.problems) - 5} more"
                                                   if len(verdict.problems) > 5 else "")
        raise InputError(f"{where} does not verify: {shown}: rebuild or copy the bundle again "
                         "(`bootstrap bundle verify DIR` on the machine that holds it lists every problem)")
    assert verdict.contents is not None
    problems = missing_for(verdict.contents, settings, cluster)
    if problems:
        raise InputError(f"{where} lacks what the settings need: {'; '.join(problems)}: {fix}")
    return verdict.contents
