"""What the addon role does for one add-on, rendered from the release table and the settings.

The role runs on the control plane: it fetches each part of the release there (a single file with get_url,
or a kustomize target rendered with `kubectl kustomize`, which needs git), writes a kustomization beside it
that moves the images to `offline.image_repository` when one is set, and applies it with
`kubectl apply --server-side`. Where a part comes from follows the sources:

- `offline.source` or `mirrors.addon_manifests`: `<base>/<addon>/<version>/<part>.yaml`, rendered beforehand
  (`kubectl kustomize <upstream> > <part>.yaml` on a machine that reaches GitHub; docs/addons.md);
- otherwise the upstream release: raw files through `mirrors.github_raw` (the profile's), kustomize
  targets from github.com.

Our own objects (the Volcano queue of the smoke test) are rendered here and applied as a last part.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import yaml

from provision.inputs.addons import ADDONS, AddonName
from provision.inputs.settings import Settings
from provision.inputs.sources import resolve_sources
from provision.render.manifests import image_ref
from provision.render.node_paths import ADDONS_DIR

FIELD_MANAGER = "cluster-bootstrap"
MANAGED_LABELS = {"app.kubernetes.io/managed-by": "cluster-bootstrap"}


@dataclass(frozen=True)
class PartPlan:
    name: str
    # url: fetched with get_url; kustomize: rendered with `kubectl kustomize <source>`; local: `content` below.
    fetch: Literal["url", "kustomize", "local"]
    source: str
    # The release manifest's file name in the part's directory (the version in it: a new version fetches anew).
    file: str
    kustomization: str
    content: str = ""
    # Wait for the add-on's CRDs to be Established and its Deployments Available before the next part.
    wait_after: bool = False


@dataclass(frozen=True)
class AddonPlan:
    name: AddonName
    version: str
    namespace: str
    directory: str
    parts: tuple[PartPlan, ...]
    crds: tuple[str, ...]
    deployments: tuple[str, ...]

    def as_vars(self) -> dict[str, Any]:
        return asdict(self)


def part_source(settings: Settings, name: AddonName, part: str) -> tuple[Literal["url", "kustomize"], str]:
    """Where one part of an add-on's release comes from, and how it is fetched."""
    addon = ADDONS[name]
    version = settings.addons.version(name)
    sources = resolve_sources(settings)
    if sources.addon_manifests:
        return "url", f"{sources.addon_manifests.rstrip('/')}/{name}/{version}/{part}.yaml"
    upstream = next(p for p in addon.parts if p.name == part)
    return ("url" if upstream.kind == "raw" else "kustomize"), upstream.upstream(version, sources.github_raw)


def _kustomization(settings: Settings, resource: str, images: tuple[str, ...]) -> str:
    document: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                                "resources": [resource]}
    if settings.offline.image_repository:
        # Each upstream image name -> the same path under the offline registry; names absent from the release
        # are ignored by kustomize, so both spellings of a Docker Hub image can be listed.
        document["images"] = [{"name": image, "newName": image_ref(settings, image)} for image in images]
    return yaml.safe_dump(document, sort_keys=False)


def volcano_queue(settings: Settings) -> dict[str, Any]:
    """The queue the smoke test's gangs wait in: reclaimable, weight 1, no capability cap of its own."""
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": settings.addons.volcano_queue, "labels": dict(MANAGED_LABELS)},
            "spec": {"weight": 1, "reclaimable": True}}


def _own_objects(settings: Settings, name: AddonName) -> list[dict[str, Any]]:
    return [volcano_queue(settings)] if name == "volcano" else []


def addon_plan(settings: Settings, name: AddonName) -> AddonPlan:
    addon = ADDONS[name]
    version = settings.addons.version(name)
    parts: list[PartPlan] = []
    for part in addon.parts:
        fetch, source = part_source(settings, name, part.name)
        file = f"{part.name}-{version}.yaml"
        parts.append(PartPlan(name=part.name, fetch=fetch, source=source, file=file,
                              kustomization=_kustomization(settings, file, addon.images)))
    own = _own_objects(settings, name)
    if own:
        file = "objects.yaml"
        parts.append(PartPlan(name="cluster-bootstrap", fetch="local", source="", file=file,
                              kustomization=_kustomization(settings, file, ()),
                              content=yaml.safe_dump_all(own, sort_keys=False)))
    # Every part but the last waits: the next one may need the CRDs, or the webhooks that check its objects.
    waiting = [PartPlan(**{**asdict(p), "wait_after": i < len(parts) - 1}) for i, p in enumerate(parts)]
    return AddonPlan(name=name, version=version, namespace=addon.namespace, directory=f"{ADDONS_DIR}/{name}",
                     parts=tuple(waiting), crds=addon.crds, deployments=addon.deployments)
