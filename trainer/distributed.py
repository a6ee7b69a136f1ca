"""torchrun's side of a run: which rank this process is (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and
LOCAL_WORLD_SIZE), its device and threads, the sums and averages across ranks, and how the other local ranks
wait for local rank 0 to have the data ready before any process group exists."""
from __future__ import annotations

import hashlib
import inspect
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from termination import TrainerError
from torch import nn


@dataclass(frozen=True)
class Ranks:
    rank: int
    world: int
    local_rank: int
    local_world: int

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def ranks_from_env() -> Ranks:
    env = os.environ
    return Ranks(rank=int(env.get("RANK", 0)), world=int(env.get("WORLD_SIZE", 1)),
                 local_rank=int(env.get("LOCAL_RANK", 0)), local_world=int(env.get("LOCAL_WORLD_SIZE", 1)))


def choose_device(requested: str, ranks: Ranks) -> torch.device:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise TrainerError("CUDA is not available in this container: check that the pod requested "
                               "nvidia.com/gpu and that the node's container runtime is NVIDIA's")
        if ranks.local_rank >= torch.cuda.device_count():
            raise TrainerError(f"local rank {ranks.local_rank} has no GPU: {torch.cuda.device_count()} visible; "
                               "--nproc-per-node must not exceed the GPUs per pod")
        torch.cuda.set_device(ranks.local_rank)
        return torch.device("cuda", ranks.local_rank)
    return torch.device("cpu")


def set_cpu_threads(ranks: Ranks) -> int:
    """Share the cores among the local ranks unless OMP_NUM_THREADS says otherwise."""
    if "OMP_NUM_THREADS" in os.environ:
        threads = max(1, int(os.environ["OMP_NUM_THREADS"]))
    else:
        # The cores this process may run on (a container's cpuset), where the OS can tell.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        threads = max(1, cores // ranks.local_world)
    torch.set_num_threads(threads)
    return threads


def all_sum(values: list[float], device: torch.device, ranks: Ranks) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    if ranks.distributed:
        dist.all_reduce(tensor)
    return tensor.tolist()


def no_buffer_sync() -> dict[str, bool]:
    """DDP's option for not broadcasting rank 0's buffers before every forward pass (newer torch renamed it):
    each rank keeps its own batch-norm statistics while training, and average_batch_norm_statistics makes
    them one before anything is evaluated."""
    options = inspect.signature(nn.parallel.DistributedDataParallel).parameters
    return {"forward_sync_buffers": False} if "forward_sync_buffers" in options else {"broadcast_buffers": False}


@torch.no_grad()
def average_batch_norm_statistics(net: nn.Module, world: int) -> None:
    """Every rank's running statistics replaced by their mean over the ranks. Each rank's come from its
    own shard, so without this the ranks would evaluate, and rank 0 save, different models."""
    buffers = [buffer for module in net.modules() if isinstance(module, nn.BatchNorm2d)
               for buffer in (module.running_mean, module.running_var)]
    flat = torch.cat([buffer.flatten() for buffer in buffers])
    dist.all_reduce(flat)
    flat /= world
    for buffer, value in zip(buffers, flat.split([b.numel() for b in buffers]), strict=True):
        buffer.copy_(value.view_as(buffer))


def model_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 of every weight and buffer, in name order: equal digests mean one model."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        digest.update(name.encode())
        digest.update(state_dict[name].detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def data_ready_marker(data_dir: Path) -> Path:
    """Where local rank 0 says the data are ready, named for this launch: torchrun's run id and its own
    process (every local rank's parent), so a marker left by an earlier run is never taken for this one's."""
    run = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return data_dir / f".ready-{run}-{os.getppid()}-{attempt}"


def wait_for_data(marker: Path, timeout_s: float, poll_s: float = 0.2) -> Path:
    deadline = time.monotonic() + timeout_s
    while not marker.is_file():
        if time.monotonic() > deadline:
            raise TrainerError(f"local rank 0 did not have the data ready within {timeout_s:.0f}s "
                               f"(no {marker}); see its error above")
        time.sleep(poll_s)
    return Path(marker.read_text())
