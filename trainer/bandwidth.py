"""Time an all-reduce of a large tensor across every process torchrun started: the bandwidth the training's
collectives will get, measured before training and set beside the link speed.

    torchrun --nnodes 2 --nproc-per-node 4 ... bandwidth.py                  # NCCL over the GPUs
    torchrun --standalone --nproc-per-node 2 bandwidth.py --device cpu       # gloo on CPU

Rank 0 prints one JSON line on stdout, {"allreduce": {...}}: the tensor's size, the slowest rank's time per
all-reduce, the algorithm bandwidth (size / time) and the bus bandwidth, which nccl-tests defines for an
all-reduce as algbw * 2(n-1)/n (what each link carried, comparable with its speed), in Gb/s; and the speed of
this node's link where the kernel tells it (a physical NIC: with hostNetwork, not through the pod's veth).
A failure (a rendezvous that times out, an NCCL error) ends the process with torch's own error, before any
training starts.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

SIZE_MB = 256             # on GPU: large enough that the time is bandwidth, not latency
CPU_SIZE_MB = 32          # gloo on CPU: the same measurement in seconds on a small node
WARMUP = 2
ITERATIONS = 5
SYS_NET = Path("/sys/class/net")


def link_of_this_node() -> tuple[str | None, float | None]:
    """(interface, Gb/s) of the link to the other nodes: NCCL_SOCKET_IFNAME's first interface when set, else
    the default route's; the speed only for a physical NIC (a veth or virtio NIC reports none or a made-up one)."""
    chosen = os.environ.get("NCCL_SOCKET_IFNAME", "").split(",")[0].strip()
    iface = chosen if chosen and not chosen.startswith("^") and (SYS_NET / chosen).exists() else None
    if iface is None:
        try:
            routes = Path("/proc/net/route").read_text().splitlines()[1:]
        except OSError:
            routes = []
        iface = next((r.split()[0] for r in routes if len(r.split()) > 1 and r.split()[1] == "00000000"), None)
    if iface is None or not (SYS_NET / iface / "device").exists():
        return iface, None
    try:
        speed = int((SYS_NET / iface / "speed").read_text().strip())
    except (OSError, ValueError):
        return iface, None
    return iface, speed / 1000 if speed > 0 else None


def measure(device: torch.device, size_mb: int, iterations: int, warmup: int) -> dict:
    world = dist.get_world_size()
    tensor = torch.ones(size_mb * 1024 * 1024 // 4, dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = torch.tensor([(time.perf_counter() - started) / iterations], dtype=torch.float64, device=device)
    # The collective is as fast as its slowest member.
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    seconds = float(elapsed.item())
    size_bytes = tensor.numel() * tensor.element_size()
    algbw = size_bytes * 8 / seconds / 1e9
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    iface, link = link_of_this_node()
    return {"backend": dist.get_backend(), "device": device.type, "world_size": world,
            "nodes": max(1, world // max(1, local)), "size_bytes": size_bytes, "iterations": iterations,
            "seconds": round(seconds, 6), "algbw_gbps": round(algbw, 3),
            "busbw_gbps": round(algbw * 2 * (world - 1) / world, 3), "link_iface": iface, "link_gbps": link}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time an all-reduce across the processes torchrun started.")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--size-mb", type=int, default=0, help=f"tensor size (default {SIZE_MB} on GPU, "
                        f"{CPU_SIZE_MB} on CPU)")
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    parser.add_argument("--warmup", type=int, default=WARMUP)
    args = parser.parse_args(argv)
    if "RANK" not in os.environ:
        print("error: run under torchrun (it sets RANK, WORLD_SIZE and the rendezvous)", file=sys.stderr)
        return 2
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        result = measure(device, args.size_mb or (SIZE_MB if cuda else CPU_SIZE_MB), args.iterations, args.warmup)
    finally:
        dist.destroy_process_group()
    if int(os.environ["RANK"]) == 0:
        print(json.dumps({"allreduce": result}), flush=True)
        print(f"all-reduce of {result['size_bytes'] / 2**20:.0f} MiB over {result['world_size']} processes on "
              f"{result['nodes']} node(s): bus bandwidth {result['busbw_gbps']:.2f} Gb/s"
              + (f", link {result['link_iface']} {result['link_gbps']:g} Gb/s" if result["link_gbps"] else ""),
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
