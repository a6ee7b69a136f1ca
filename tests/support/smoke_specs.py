"""The smoke-test runs the manifest tests render: one GPU, several per node, several nodes, CPU, the seeds'
RDMA set-up with a cache, and a Volcano gang with a PVC."""
from __future__ import annotations

from provision.inputs import versions
from provision.smoke.manifests import SmokeSpec

IMAGE = versions.SMOKE_IMAGE_DEFAULT

SPECS = {
    "one-gpu": SmokeSpec(namespace="cb-smoke-a1", image=IMAGE, gpus=1, epochs=10),
    "one-node-four-gpus": SmokeSpec(namespace="cb-smoke-a2", image=IMAGE, gpus=4),
    "three-nodes": SmokeSpec(namespace="cb-smoke-a3", image=IMAGE, gpus=2, nodes=3, timeout_s=1200),
    "cpu": SmokeSpec(namespace="cb-smoke-a4", image=IMAGE, gpus=0),
    "cpu-two-nodes": SmokeSpec(namespace="cb-smoke-a5", image=IMAGE, gpus=0, nodes=2, dataset="cifar10"),
    # The seeds' multi-node setup: RDMA, NCCL over the host's interfaces, a cache, the model kept for --save.
    "rdma-two-nodes-cached": SmokeSpec(namespace="cb-smoke-a6", image=IMAGE, gpus=8, nodes=2, dataset="cifar10",
                                       cache="hostpath", keep_results=True, host_network=True, ipc_lock=True,
                                       shm_size="16Gi", extra_resources={"rdma/hca": "1"},
                                       env={"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "ens1f0",
                                            "NCCL_IB_HCA": "mlx5_0"}),
    "volcano-two-nodes-pvc": SmokeSpec(namespace="cb-smoke-a7", image=IMAGE, gpus=1, nodes=2, scheduler="volcano",
                                       dataset="cifar10", cache="pvc"),
}
