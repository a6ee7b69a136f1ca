"""What a smoke-test run will be, decided before anything is created: its mode (CPU or GPU, from the settings or
from what the nodes offer), its image (for the GPU generations the nodes are labelled with), its namespace and its
SmokeSpec (build_spec: the arguments given, else `settings.smoke_test`, with what `auto` became on the cluster).

The driver (driver.py) and the pipeline (pipeline.py) take their runs from here; `--print-manifests` renders one
without a cluster.
"""
from __future__ import annotations

import secrets

from kubernetes import client

from provision.inputs import versions
from provision.inputs.settings import GPU_RESOURCE, Settings
from provision.inputs.sources import resolve_sources
from provision.smoke.choices import Choices, assumed_offer, choose
from provision.smoke.manifests import SmokeSpec
from provision.smoke.observation import Mode

# Where the smoke test runs when its cache is a PVC: a namespace kept for the claim between runs.
CACHE_NAMESPACE = "cb-smoke-cache"


def new_namespace() -> str:
    return f"cb-smoke-{secrets.token_hex(3)}"


def choose_mode(api: client.ApiClient, configured: str, cpu: bool, timeout_s: float = 10.0,
                gpu_resource: str = GPU_RESOURCE) -> Mode:
    """cpu when asked; gpu when asked; otherwise gpu exactly when some node offers the GPU resource."""
    if cpu or configured == "cpu":
        return "cpu"
    if configured == "gpu":
        return "gpu"
    nodes = client.CoreV1Api(api).list_node(_request_timeout=timeout_s).items
    offered = sum(int((n.status.allocatable or {}).get(gpu_resource, 0) or 0) for n in nodes if n.status)
    return "gpu" if offered > 0 else "cpu"


def smoke_image(settings: Settings, generations: list[str]) -> str:
    """smoke_test.image when cluster.yaml sets it; else the image the versions table gives the oldest of the
    GPU generations the cluster's nodes are labelled with (CUDA 13 from Turing on, CUDA 12.6 before)."""
    smoke = settings.smoke_test
    if "image" in smoke.model_fields_set:
        return smoke.image
    return versions.smoke_image_for(generations) or smoke.image


def cluster_gpu_generations(api: client.ApiClient, timeout_s: float = 10.0) -> list[str]:
    """The GPU generations the gpu phase labelled the nodes with (none on a cluster it never labelled)."""
    nodes = client.CoreV1Api(api).list_node(_request_timeout=timeout_s).items
    found = {(n.metadata.labels or {}).get(versions.GPU_GENERATION_LABEL) for n in nodes if n.metadata}
    return sorted(name for name in found if name in {g.name for g in versions.GPU_GENERATIONS})


def build_spec(settings: Settings, mode: Mode, *, namespace: str, gpus: int | None = None, nodes: int | None = None,
               image: str | None = None, epochs: int | None = None, timeout_s: int | None = None,
               choices: Choices | None = None, keep_results: bool = False,
               generations: list[str] | None = None) -> SmokeSpec:
    """The one place a run's spec is made: the arguments given, else `settings.smoke_test` (the image for the GPU
    generations given, see smoke_image). On CPU the trainer's own CPU defaults (fewer epochs, a smaller synthetic
    set) apply unless epochs are given here or set in cluster.yaml. `choices`: what `auto` became on the cluster
    (None: what it becomes on a cluster that offers nothing it was not asked for, choices.assumed_offer)."""
    smoke = settings.smoke_test
    if epochs is None and (mode == "gpu" or "epochs" in smoke.model_fields_set):
        epochs = smoke.epochs
    nodes = nodes or smoke.nodes
    if choices is None:
        choices = choose(assumed_offer(settings), settings, nodes=nodes, save=keep_results)
    sources = resolve_sources(settings)
    name = "cifar10-smoke"
    if namespace == CACHE_NAMESPACE:
        # Runs share the cache's namespace: each names its objects after itself.
        name = f"cifar10-smoke-{secrets.token_hex(3)}"
    return SmokeSpec(namespace=namespace, name=name, image=image or smoke_image(settings, generations or []),
                     gpus=0 if mode == "cpu" else (gpus or smoke.gpus), nodes=nodes, epochs=epochs,
                     dataset=smoke.dataset, timeout_s=timeout_s or smoke.timeout_s,
                     runtime_class=settings.gpu.runtime_class,
                     pip_index=sources.pip_index, workload=choices.workload, scheduler=choices.scheduler,
                     queue=settings.addons.volcano_queue, gpu_resource=settings.smoke_gpu_resource, env=dict(smoke.env),
                     host_network=smoke.host_network, shm_size=smoke.shm_size,
                     extra_resources=dict(smoke.extra_resources), ipc_lock=smoke.ipc_lock,
                     cifar10_url=sources.cifar10_archive, cifar10_md5=smoke.cifar10_md5, cache=choices.cache,
                     cache_path=smoke.cache_path, cache_size=smoke.cache_size, data_timeout_s=smoke.data_timeout_s,
                     min_accuracy=smoke.cifar10_min_accuracy if smoke.dataset == "cifar10" else smoke.min_accuracy,
                     throughput_floors=dict(smoke.throughput_floors), registry_mirrors=sources.registry_mirrors,
                     min_link_gbps=smoke.min_link_gbps, keep_results=keep_results,
                     # Shared GPUs: several one-GPU pods at once (a plain Job; the settings refuse several nodes).
                     shared_pods=settings.shared_pods if mode == "gpu" and choices.workload == "job" else 1)

