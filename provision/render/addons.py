"""What the addon role does for one add-on, rendered from the release table and the settings.

The role runs on the control plane: it fetches each part of the release there (a single file with get_url,
or a kustomize target rendered with `kubectl kustomize`, which needs git), reads every image the part names from
its objects (module cb_addon_images: containers, sidecars, and the images named in env values, args and
ConfigMaps) and moves each to `offline.image_repository` when one is set, writes a kustomization beside it (our
patches), and applies it with `kubectl apply --server-side`. Where a part comes from follows the sources:

- `offline.source` or `mirrors.addon_manifests`: `<base>/<addon>/<version>/<part>.yaml`, rendered beforehand
  (`kubectl kustomize <upstream> > <part>.yaml` on a machine that reaches GitHub; docs/addons.md);
- otherwise the upstream release: raw files through `mirrors.github_raw` (the profile's), files attached to a
  GitHub release and kustomize targets from github.com.

Our own objects are rendered here: the namespace of a release that ships none, first; after the release, the
Volcano queue of the smoke test, KServe's default deployment mode (Standard: no Knative, no Istio), and DCGM's
ServiceMonitor where the cluster serves the Prometheus Operator's API. Our changes to a release's objects (the
GPU DaemonSets kept to GPU nodes, GFD's MIG strategy) are kustomize patches, written by the YAML emitter.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

import yaml

from provision.inputs.addons import ADDONS, AddonName
from provision.inputs.settings import GPU_RESOURCE, Settings
from provision.inputs.sources import resolve_sources
from provision.render.node_paths import ADDONS_DIR

# Server-side apply's field managers: the releases' objects are applied under one, our own settings under another.
# A manager owns the fields it applied last; a field it stops sending is deleted unless another manager owns it
# (Kubernetes docs, Server-Side Apply, "Field management"). Under one manager, our one key of KServe's
# inferenceservice-config would delete every key of the release's copy of that ConfigMap.
FIELD_MANAGER = "cluster-bootstrap"
OWN_FIELD_MANAGER = "cluster-bootstrap-settings"
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
    field_manager: str = FIELD_MANAGER


@dataclass(frozen=True)
class AddonPlan:
    name: AddonName
    version: str
    namespace: str
    directory: str
    parts: tuple[PartPlan, ...]
    crds: tuple[str, ...]
    deployments: tuple[str, ...]
    daemonsets: tuple[str, ...] = ()
    # offline.image_repository: every image the fetched parts name is moved there on the control plane.
    image_registry: str | None = None

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
    return ("kustomize" if upstream.kind == "kustomize" else "url"), upstream.upstream(version, sources.github_raw)


def _kustomization(resource: str, *, namespace: str | None = None, patches: tuple[dict[str, Any], ...] = ()) -> str:
    document: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    if namespace:
        document["namespace"] = namespace
    document["resources"] = [resource]
    if patches:
        # Strategic-merge patches, each naming its target: serialised by the emitter, never templated.
        document["patches"] = [{"target": {"kind": p["kind"], "name": p["metadata"]["name"]},
                                "patch": yaml.safe_dump(p, sort_keys=False)} for p in patches]
    return yaml.safe_dump(document, sort_keys=False)


# Where the device plugin runs, DCGM's exporter and GFD run too (the gpu phase labels the nodes).
GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}
GPU_TOLERATIONS = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
# The Prometheus Operator's ServiceMonitor: rendered for DCGM's exporter when the cluster serves it.
SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
# KServe's configuration the controller reads: the deployment mode every InferenceService gets unless it says
# otherwise. Standard (the former RawDeployment) needs neither Knative nor Istio.
KSERVE_CONFIG = "inferenceservice-config"
KSERVE_DEPLOY_KEY = "deploy"
KSERVE_DEPLOYMENT_MODE = "Standard"


@dataclass(frozen=True)
class ClusterFacts:
    """What the cluster serves that changes what an add-on gets (asked through the API by the phase)."""

    service_monitors: bool = False


def _daemonset_patch(settings: Settings, name: str, env: dict[str, str] | None = None,
                     container: str | None = None) -> dict[str, Any]:
    """GPU nodes only, and (gpu.runtime: runtimeclass) the NVIDIA runtime: these agents read the GPUs through
    NVML, which only that runtime puts into a container."""
    spec: dict[str, Any] = {"nodeSelector": dict(GPU_NODE_SELECTOR), "tolerations": list(GPU_TOLERATIONS)}
    if settings.gpu.runtime_class:
        spec["runtimeClassName"] = settings.gpu.runtime_class
    if env and container:
        spec["containers"] = [{"name": container, "env": [{"name": k, "value": v} for k, v in env.items()]}]
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"template": {"spec": spec}}}


def _patches(settings: Settings, name: AddonName) -> tuple[dict[str, Any], ...]:
    """Our changes to a release's objects: GPU nodes only for the GPU DaemonSets, GFD's MIG strategy ours, and
    KServe's `deploy` key left out of the release's configuration (ours sets it, under its own field manager: two
    managers sending one field with different values would take it from each other on every run)."""
    if name == "kserve":
        return ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": KSERVE_CONFIG},
                 "data": {KSERVE_DEPLOY_KEY: None}},)
    if name == "dcgm_exporter":
        return (_daemonset_patch(settings, "dcgm-exporter"),)
    if name == "gpu_feature_discovery":
        return (_daemonset_patch(settings, "gpu-feature-discovery", {"MIG_STRATEGY": settings.gpu.mig.strategy},
                                 "gpu-feature-discovery"),)
    return ()


def service_monitor(namespace: str) -> dict[str, Any]:
    """DCGM's exporter scraped by the Prometheus Operator: its Service's `metrics` port every 15 s."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "dcgm-exporter", "namespace": namespace, "labels": dict(MANAGED_LABELS)},
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "dcgm-exporter"}},
                     "namespaceSelector": {"matchNames": [namespace]},
                     "endpoints": [{"port": "metrics", "interval": "15s", "path": "/metrics"}]}}


def kserve_config(namespace: str) -> dict[str, Any]:
    """The one key of KServe's configuration we set (applied server-side: the release keeps the others)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": KSERVE_CONFIG, "namespace": namespace},
            "data": {KSERVE_DEPLOY_KEY: json.dumps({"defaultDeploymentMode": KSERVE_DEPLOYMENT_MODE})}}


def namespace_object(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(MANAGED_LABELS)}}


def volcano_queue(settings: Settings) -> dict[str, Any]:
    """The queue the smoke test's gangs wait in: reclaimable, weight 1, no capability cap of its own."""
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": settings.addons.volcano_queue, "labels": dict(MANAGED_LABELS)},
            "spec": {"weight": 1, "reclaimable": True}}


def _own_objects(settings: Settings, name: AddonName, facts: ClusterFacts) -> list[dict[str, Any]]:
    """Our objects applied after the release (once its webhooks can admit them)."""
    if name == "volcano":
        return [volcano_queue(settings)]
    if name == "kserve":
        return [kserve_config(ADDONS[name].namespace)]
    if name == "dcgm_exporter" and facts.service_monitors:
        return [service_monitor(ADDONS[name].namespace)]
    return []


def _local_part(name: str, objects: list[dict[str, Any]], field_manager: str) -> PartPlan:
    file = "objects.yaml"
    return PartPlan(name=name, fetch="local", source="", file=file, kustomization=_kustomization(file),
                    content=yaml.safe_dump_all(objects, sort_keys=False), field_manager=field_manager)


def addon_plan(settings: Settings, name: AddonName, facts: ClusterFacts | None = None) -> AddonPlan:
    addon = ADDONS[name]
    version = settings.addons.version(name)
    parts: list[PartPlan] = []
    if addon.own_namespace:
        # Before the release, whose objects go into it.
        parts.append(_local_part("namespace", [namespace_object(addon.namespace)], FIELD_MANAGER))
    patches = _patches(settings, name)
    for part in addon.parts:
        fetch, source = part_source(settings, name, part.name)
        file = f"{part.name}-{version}.yaml"
        parts.append(PartPlan(name=part.name, fetch=fetch, source=source, file=file,
                              kustomization=_kustomization(file, namespace=part.namespace, patches=patches)))
    own = _own_objects(settings, name, facts or ClusterFacts())
    if own:
        parts.append(_local_part("cluster-bootstrap", own, OWN_FIELD_MANAGER))
    # Every part but the last waits: the next one may need the CRDs, or the webhooks that check its objects (a
    # namespace waits for nothing: no CRD or controller of the release is there yet).
    waiting = [PartPlan(**{**asdict(p), "wait_after": i < len(parts) - 1 and p.name != "namespace"})
               for i, p in enumerate(parts)]
    return AddonPlan(name=name, version=version, namespace=addon.namespace, directory=f"{ADDONS_DIR}/{name}",
                     parts=tuple(waiting), crds=addon.crds, deployments=addon.deployments,
                     daemonsets=addon.daemonsets, image_registry=settings.offline.image_repository)
