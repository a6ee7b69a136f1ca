"""What the cluster offers the smoke test, asked through the API before a run: the TrainJob and PyTorchJob APIs
(the Kubeflow add-ons), Volcano's PodGroup API and the smoke test's queue, and a default StorageClass.

Each `auto` setting becomes a choice here; an explicit choice the cluster cannot honour is refused with the
add-on that would make it possible. Nothing is created. Without a cluster to ask (`smoke-test --print-manifests`)
the same rules decide against the offer `assumed_offer` describes.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.inputs.settings import Settings
from provision.smoke.manifests import CUSTOM_KINDS, Cache, Scheduler, Workload

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
# The CRD each workload and the Volcano scheduler need, and the add-on that brings it.
NEEDS: dict[str, tuple[str, str]] = {
    "trainjob": ("trainjobs.trainer.kubeflow.org", "trainer"),
    "pytorchjob": ("pytorchjobs.kubeflow.org", "training_operator"),
    "volcano": ("podgroups.scheduling.volcano.sh", "volcano"),
}


@dataclass(frozen=True)
class Choices:
    """What a run uses, once `auto` has been decided against what the cluster offers."""

    workload: Workload
    scheduler: Scheduler
    cache: Cache


class NotOffered(Exception):
    """The cluster lacks what the run was asked to use; the message names the add-on and the alternative."""


@dataclass(frozen=True)
class Offer:
    """What the cluster serves, as far as the smoke test cares."""

    crds: frozenset[str]
    queues: frozenset[str]
    default_storage_class: str | None


def _crd_exists(extensions: client.ApiextensionsV1Api, name: str, call: Callable[..., Any]) -> bool:
    try:
        call(extensions.read_custom_resource_definition, name)
    except ApiException as exc:
        if exc.status in (403, 404):
            return False
        raise
    return True


def survey(api: client.ApiClient, queue: str, timeout_s: float = 10.0) -> Offer:
    """One look at the CRDs, the smoke test's Volcano queue and the StorageClasses (a missing API is 'none')."""
    def call(fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args, _request_timeout=timeout_s)

    extensions = client.ApiextensionsV1Api(api)
    crds = frozenset(name for name, _ in NEEDS.values() if _crd_exists(extensions, name, call))
    queues: frozenset[str] = frozenset()
    if NEEDS["volcano"][0] in crds:
        group, version, _ = CUSTOM_KINDS["PodGroup"]
        try:
            call(client.CustomObjectsApi(api).get_cluster_custom_object, group, version, "queues", queue)
            queues = frozenset({queue})
        except ApiException as exc:
            if exc.status not in (403, 404):
                raise
    default_class = None
    try:
        for storage_class in call(client.StorageV1Api(api).list_storage_class).items:
            annotations = (storage_class.metadata.annotations if storage_class.metadata else None) or {}
            if annotations.get(DEFAULT_CLASS_ANNOTATION) == "true":
                default_class = storage_class.metadata.name
    except ApiException as exc:
        if exc.status not in (403, 404):
            raise
    return Offer(crds, queues, default_class)


def choose_workload(offer: Offer, configured: str) -> Workload:
    """auto: a TrainJob when the Trainer is installed, else a Job; an explicit choice must be installed."""
    if configured == "auto":
        return "trainjob" if NEEDS["trainjob"][0] in offer.crds else "job"
    if configured in NEEDS and NEEDS[configured][0] not in offer.crds:
        crd, addon = NEEDS[configured]
        raise NotOffered(f"the cluster serves no {crd}: install it (`bootstrap addons install {addon}`) or run the "
                         "smoke test as a plain Job (--workload job)")
    return configured  # type: ignore[return-value]


def choose_scheduler(offer: Offer, configured: str, queue: str) -> Scheduler:
    """auto: Volcano when its PodGroup API and the smoke test's queue are there, else the default scheduler."""
    ready = NEEDS["volcano"][0] in offer.crds and queue in offer.queues
    if configured == "auto":
        return "volcano" if ready else "default"
    if configured == "volcano" and not ready:
        what = "no Volcano (PodGroup API)" if NEEDS["volcano"][0] not in offer.crds else f"no Volcano queue '{queue}'"
        raise NotOffered(f"the cluster has {what}: `bootstrap addons install volcano` creates both, or run with "
                         "--scheduler default")
    return configured  # type: ignore[return-value]


def choose_cache(offer: Offer, configured: Literal["auto", "hostpath", "pvc", "none"], *, needed: bool,
                 pods: int) -> Cache:
    """Where the archive and the results are kept: nowhere when the run needs no cache; auto: a PVC of the
    default StorageClass for a single pod (a claim is usually ReadWriteOnce), else the nodes' hostPath."""
    if not needed or configured == "none":
        return "none"
    if configured == "auto":
        return "pvc" if offer.default_storage_class and pods == 1 else "hostpath"
    if configured == "pvc" and not offer.default_storage_class:
        raise NotOffered("smoke_test.cache is pvc but the cluster has no default StorageClass: mark one default "
                         f"({DEFAULT_CLASS_ANNOTATION}=true) or use cache: hostpath")
    return configured


def choose(offer: Offer, settings: Settings, *, nodes: int, save: bool, workload: str | None = None,
           scheduler: str | None = None) -> Choices:
    """The workload, scheduler and cache of a run on `nodes` nodes: the arguments, else the settings, `auto`
    decided by the offer. NotOffered when an explicit choice is not there."""
    smoke, queue = settings.smoke_test, settings.addons.volcano_queue
    return Choices(workload=choose_workload(offer, workload or smoke.workload),
                   scheduler=choose_scheduler(offer, scheduler or smoke.scheduler, queue),
                   cache=choose_cache(offer, smoke.cache, needed=smoke.dataset == "cifar10" or save, pods=nodes))


def assumed_offer(settings: Settings, *, workload: str | None = None, scheduler: str | None = None) -> Offer:
    """What a cluster is taken to offer when there is none to ask: what the run asks for by name (the arguments,
    else the settings) and nothing else: `auto` becomes a plain Job, the default scheduler and the hostPath cache."""
    smoke = settings.smoke_test
    named = (workload or smoke.workload, scheduler or smoke.scheduler)
    return Offer(crds=frozenset(NEEDS[choice][0] for choice in named if choice in NEEDS),
                 queues=frozenset({settings.addons.volcano_queue}), default_storage_class=None)
