"""The smoke-test runs the manifest tests render: one GPU, several per node, several nodes, CPU, the seeds'
RDMA set-up with a cache, and a Volcano gang with a PVC. Each is a default run's spec as build_spec makes it
from the default settings (the one place a spec is made), with the run's own changes."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from provision.inputs import versions
from provision.inputs.settings import Settings
from provision.smoke.manifests import SmokeSpec
from provision.smoke.spec import build_spec

IMAGE = versions.SMOKE_IMAGE_DEFAULT


def spec(namespace: str, **changes: Any) -> SmokeSpec:
    """A default run's spec, with these changes (epochs left to the trainer unless given)."""
    return replace(build_spec(Settings(), "gpu", namespace=namespace, image=IMAGE), **{"epochs": None} | changes)


SPECS = {
    "one-gpu": spec("cb-smoke-a1", gpus=1, epochs=10),
    "one-node-four-gpus": spec("cb-smoke-a2", gpus=4),
    "three-nodes": spec("cb-smoke-a3", gpus=2, nodes=3, timeout_s=1200),
    "cpu": spec("cb-smoke-a4", gpus=0),
    "cpu-two-nodes": spec("cb-smoke-a5", gpus=0, nodes=2, dataset="cifar10"),
    # The seeds' multi-node setup: RDMA, NCCL over the host's interfaces, a cache, the model kept for --save.
    "rdma-two-nodes-cached": spec("cb-smoke-a6", gpus=8, nodes=2, dataset="cifar10", cache="hostpath",
                                  keep_results=True, host_network=True, ipc_lock=True, shm_size="16Gi",
                                  extra_resources={"rdma/hca": "1"},
                                  env={"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "ens1f0", "NCCL_IB_HCA": "mlx5_0"}),
    "volcano-two-nodes-pvc": spec("cb-smoke-a7", gpus=1, nodes=2, scheduler="volcano", dataset="cifar10",
                                  cache="pvc"),
}
