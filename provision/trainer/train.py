"""CIFAR-10 to a real accuracy in seconds on one GPU: the cluster's proof that its GPUs train.

Everything the run does is in this file, and every knob is named in the block below. The recipe follows
the airbench family of fast CIFAR-10 trainers (Keller Jordan, 2024): a patch-whitening first layer, three
conv blocks with batch norm (about 2M parameters), nesterov SGD with a triangular schedule, label
smoothing, flip and translate augmentation, flip at test time. The data set lives on the device as one
tensor, so no DataLoader sits in the hot loop; the GPU runs in bfloat16 autocast with channels_last.

    python train.py --synthetic                 # generated, learnable set; no download
    python train.py --data-dir /data --download # the real CIFAR-10 (md5-checked)
    torchrun --nproc-per-node 2 train.py ...    # DDP: NCCL on GPU, gloo on CPU, each rank on its shard

Progress goes to stderr, one line per epoch; the final metrics are one JSON line on stdout and, in a
Kubernetes container, in /dev/termination-log. The model is saved with its metadata, reloaded by
infer.py, and used to classify the held-out images once more.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import cifar_data
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------------
# Hyperparameters
# ---------------------------------------------------------------------------------------------------
EPOCHS = 10                  # GPU default; the airbench recipe reaches about 94% on the real set in 10
CPU_EPOCHS = 2               # CPU default (labs without GPUs): the synthetic set is learned in two
BATCH_SIZE = 1024            # global batch, split evenly across ranks
CPU_BATCH_SIZE = 256         # smaller batches make more steps out of the CPU's smaller data set
LR = 1.5                     # peak learning rate for the mean loss at BATCH_SIZE; scaled linearly with batch
MOMENTUM = 0.85              # nesterov
WEIGHT_DECAY = 0.002         # fraction of each weight decayed per step at the peak learning rate
BIAS_LR_SCALE = 64.0         # batch-norm biases learn this much faster (and decay this much slower)
LR_START = 0.2               # schedule: fraction of LR at step 0,
LR_PEAK_AT = 0.23            # rising linearly to LR at this fraction of training,
LR_END = 0.07                # then falling linearly to this fraction at the end
LABEL_SMOOTHING = 0.2
WIDTHS = (64, 256, 256)      # channels of the three conv blocks
WHITEN_KERNEL = 2            # the first layer whitens 2x2 patches: 3*2*2 = 12 directions, each +/-
WHITEN_EPS = 5e-4            # added to the patch covariance's eigenvalues before dividing by their root
WHITEN_INIT_IMAGES = 5000    # training images used to estimate the patch covariance
WHITEN_BIAS_EPOCHS = 3       # the whitening layer's bias trains for this many epochs, then stays fixed
BN_MOMENTUM = 0.4            # torch convention: weight of the newest batch in the running statistics
LOGIT_SCALE = 1 / 9          # final logits are scaled down; keeps early steps from saturating
FLIP = True                  # random horizontal flips while training
TRANSLATE_PX = 2             # random shifts of up to this many pixels (reflect-padded) while training
TTA_FLIP = True              # test-time augmentation: average the logits of each image and its mirror
AMP_DTYPE = torch.bfloat16   # autocast dtype on GPU (bfloat16 needs no loss scaling); CPU runs in float32
EVAL_BATCH_SIZE = 2000
SYNTHETIC_TRAIN_SIZE = 50_000
SYNTHETIC_TEST_SIZE = 10_000
CPU_SYNTHETIC_TRAIN_SIZE = 5_000   # CPU: a smaller generated set, so a lab node finishes in about a minute
CPU_SYNTHETIC_TEST_SIZE = 1_000
SEED = 0

TERMINATION_LOG = Path("/dev/termination-log")


# ---------------------------------------------------------------------------------------------------
# Network
# ---------------------------------------------------------------------------------------------------
def batch_norm(channels: int) -> nn.BatchNorm2d:
    norm = nn.BatchNorm2d(channels, momentum=BN_MOMENTUM)
    # The scale is redundant with the next conv's weights; only the shift is learned.
    norm.weight.requires_grad_(False)
    return norm


def conv3x3(cin: int, cout: int) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=3, padding=1, bias=False)


class ConvBlock(nn.Sequential):
    """conv, 2x2 max-pool, norm, GELU, conv, norm, GELU: halves the resolution."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(conv3x3(cin, cout), nn.MaxPool2d(2), batch_norm(cout), nn.GELU(),
                         conv3x3(cout, cout), batch_norm(cout), nn.GELU())


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


def build_network(widths: tuple[int, int, int] = WIDTHS, num_classes: int = 10) -> nn.Sequential:
    whiten_channels = 2 * 3 * WHITEN_KERNEL ** 2
    return nn.Sequential(
        nn.Conv2d(3, whiten_channels, kernel_size=WHITEN_KERNEL, bias=True),  # 32x32 -> 31x31
        nn.GELU(),
        ConvBlock(whiten_channels, widths[0]),   # -> 15x15
        ConvBlock(widths[0], widths[1]),         # -> 7x7
        ConvBlock(widths[1], widths[2]),         # -> 3x3
        nn.MaxPool2d(3),
        nn.Flatten(),
        nn.Linear(widths[2], num_classes, bias=False),
        Scale(LOGIT_SCALE),
    )


@torch.no_grad()
def init_whitening(layer: nn.Conv2d, images: torch.Tensor) -> None:
    """Set the first layer to the patch-whitening transform of the training images: each filter is an
    eigenvector of the covariance of 2x2 patches divided by its standard deviation, once with each sign."""
    k = layer.kernel_size[0]
    patches = images.float().unfold(2, k, 1).unfold(3, k, 1)          # N, C, H', W', k, k
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(-1, 3 * k * k)
    covariance = patches.T @ patches / len(patches)
    eigenvalues, eigenvectors = torch.linalg.eigh(covariance)
    filters = eigenvectors.T.reshape(-1, 3, k, k) / torch.sqrt(eigenvalues + WHITEN_EPS).view(-1, 1, 1, 1)
    layer.weight.copy_(torch.cat([filters, -filters]))
    layer.bias.zero_()


# ---------------------------------------------------------------------------------------------------
# Data, kept on the device
# ---------------------------------------------------------------------------------------------------
def to_device(split: cifar_data.Split, device: torch.device, mean: torch.Tensor, std: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.from_numpy(split.images).to(device).float()
    images = (images - mean.view(1, 3, 1, 1).to(device)) / std.view(1, 3, 1, 1).to(device)
    return images, torch.from_numpy(split.labels).to(device)


def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A fresh random flip and translation of every image at once, on the device."""
    out = images
    if FLIP:
        flip = torch.rand(len(images), device=images.device, generator=generator) < 0.5
        out = torch.where(flip.view(-1, 1, 1, 1), images.flip(-1), images)
    if TRANSLATE_PX:
        pad = TRANSLATE_PX
        padded = F.pad(out, (pad, pad, pad, pad), mode="reflect")
        shifts = torch.randint(0, 2 * pad + 1, (len(images), 2), device=images.device, generator=generator)
        shifted = torch.empty_like(out)
        # One slice per possible shift (25 for 2 px) beats per-image gathers on every device.
        for dy in range(2 * pad + 1):
            for dx in range(2 * pad + 1):
                chosen = ((shifts[:, 0] == dy) & (shifts[:, 1] == dx)).nonzero().squeeze(1)
                if len(chosen):
                    shifted[chosen] = padded[chosen, :, dy:dy + images.shape[2], dx:dx + images.shape[3]]
        out = shifted
    return out


# ---------------------------------------------------------------------------------------------------
# Distributed set-up (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE)
# ---------------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------
class TrainerError(Exception):
    """A failure the user can act on; its message goes to the termination log."""


@dataclass
class Metrics:
    test_accuracy: float
    inference_accuracy: float | None
    images_per_s: float
    epoch_time_s: float
    train_time_s: float
    wall_time_s: float
    epochs: int
    steps: int
    batch_size: int
    train_images: int
    test_images: int
    parameters: int
    dataset: str
    device: str
    device_type: str
    gpu_count: int
    world_size: int
    nodes: int
    torch_version: str
    cuda_version: str | None
    hostname: str
    model_path: str | None


def lr_factor(step: int, total_steps: int) -> float:
    """The triangular schedule: LR_START -> 1 at LR_PEAK_AT -> LR_END."""
    progress = step / max(1, total_steps)
    if progress < LR_PEAK_AT:
        return LR_START + (1 - LR_START) * progress / LR_PEAK_AT
    return 1 + (LR_END - 1) * (progress - LR_PEAK_AT) / (1 - LR_PEAK_AT)


def make_optimizer(net: nn.Sequential, batch_size: int) -> torch.optim.SGD:
    lr = LR * batch_size / BATCH_SIZE
    decay = WEIGHT_DECAY / LR   # torch multiplies weight_decay by the lr: this gives WEIGHT_DECAY per step
    whiten_bias = net[0].bias
    norm_biases = [m.bias for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    special = {id(whiten_bias)} | {id(b) for b in norm_biases}
    weights = [p for p in net.parameters() if p.requires_grad and id(p) not in special]
    groups = [
        {"params": weights, "lr": lr, "weight_decay": decay, "base_lr": lr, "name": "weights"},
        {"params": norm_biases, "lr": lr * BIAS_LR_SCALE, "weight_decay": decay / BIAS_LR_SCALE,
             "base_lr": lr * BIAS_LR_SCALE, "name": "norm_biases"},
        {"params": [whiten_bias], "lr": lr * BIAS_LR_SCALE, "weight_decay": decay / BIAS_LR_SCALE,
             "base_lr": lr * BIAS_LR_SCALE, "name": "whiten_bias"},
    ]
    return torch.optim.SGD(groups, momentum=MOMENTUM, nesterov=True)


def autocast(device: torch.device) -> torch.autocast:
    return torch.autocast(device_type=device.type, dtype=AMP_DTYPE, enabled=device.type == "cuda")


@torch.no_grad()
def predict(net: nn.Module, images: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Class predictions, with the mirror image's logits added when TTA_FLIP."""
    net.eval()
    predictions = []
    for start in range(0, len(images), EVAL_BATCH_SIZE):
        batch = images[start:start + EVAL_BATCH_SIZE]
        if device.type == "cuda":
            batch = batch.contiguous(memory_format=torch.channels_last)
        with autocast(device):
            logits = net(batch).float()
            if TTA_FLIP:
                logits = logits + net(batch.flip(-1)).float()
        predictions.append(logits.argmax(1))
    return torch.cat(predictions) if predictions else torch.empty(0, dtype=torch.long, device=images.device)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prepare_data(args: argparse.Namespace, ranks: Ranks, device: torch.device) -> cifar_data.Cifar10:
    """The data set on this node's disk: local rank 0 generates, unpacks or downloads; the others wait."""
    if ranks.local_rank == 0:
        if args.synthetic:
            cpu = device.type == "cpu"
            cifar_data.write_synthetic(
                args.data_dir,
                train_size=args.synthetic_train_size or (CPU_SYNTHETIC_TRAIN_SIZE if cpu else SYNTHETIC_TRAIN_SIZE),
                test_size=args.synthetic_test_size or (CPU_SYNTHETIC_TEST_SIZE if cpu else SYNTHETIC_TEST_SIZE),
                seed=args.seed)
        else:
            cifar_data.locate(args.data_dir, download_missing=args.download, url=args.download_url, md5=args.md5)
    if ranks.distributed:
        dist.barrier()
    return cifar_data.read_folder(cifar_data.locate(args.data_dir, url=args.download_url, md5=args.md5))


def train(args: argparse.Namespace) -> Metrics:
    started = time.perf_counter()
    ranks = ranks_from_env()
    device = choose_device(args.device, ranks)
    if ranks.distributed:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    threads = set_cpu_threads(ranks)
    cpu = device.type == "cpu"
    epochs = args.epochs or (CPU_EPOCHS if cpu else EPOCHS)
    batch_size = args.batch_size or (CPU_BATCH_SIZE if cpu else BATCH_SIZE)
    if batch_size % ranks.world:
        raise TrainerError(f"--batch-size {batch_size} does not split evenly across {ranks.world} ranks")
    local_batch = batch_size // ranks.world
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True

    data = prepare_data(args, ranks, device)
    train_images_u8 = torch.from_numpy(data.train.images)
    mean = train_images_u8.float().mean(dim=(0, 2, 3))
    std = train_images_u8.float().std(dim=(0, 2, 3))
    # Every rank takes an equal shard, so every rank runs the same number of steps.
    shard = len(data.train) // ranks.world
    rows = slice(ranks.rank * shard, (ranks.rank + 1) * shard)
    train_x, train_y = to_device(cifar_data.Split(data.train.images[rows], data.train.labels[rows]), device, mean, std)
    test_rows = slice(ranks.rank, None, ranks.world)
    test_x, test_y = to_device(cifar_data.Split(data.test.images[test_rows], data.test.labels[test_rows]),
                               device, mean, std)
    steps_per_epoch = shard // local_batch
    if steps_per_epoch == 0:
        raise TrainerError(f"{len(data.train)} training images are fewer than one batch of {batch_size}; "
                           "lower --batch-size or use more data")
    total_steps = epochs * steps_per_epoch

    net = build_network(WIDTHS, num_classes=len(data.classes)).to(device)
    whiten_sample = to_device(cifar_data.Split(data.train.images[:WHITEN_INIT_IMAGES],
                                               data.train.labels[:WHITEN_INIT_IMAGES]), device, mean, std)[0]
    init_whitening(net[0], whiten_sample)
    if device.type == "cuda":
        net = net.to(memory_format=torch.channels_last)
    model: nn.Module = net
    if ranks.distributed:
        model = nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = make_optimizer(net, batch_size)
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed * 1000 + ranks.rank)
    parameters = sum(p.numel() for p in net.parameters())

    if ranks.local_rank == 0:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({threads} threads)"
        log(f"device {name}; ranks {ranks.world}; dataset {args.dataset_name} ({len(data.train)} train, "
            f"{len(data.test)} test); {parameters / 1e6:.2f}M parameters; {epochs} epochs of "
            f"{steps_per_epoch} steps, batch {batch_size}")

    epoch_times: list[float] = []
    step = 0
    for epoch in range(1, epochs + 1):
        synchronize(device)
        epoch_start = time.perf_counter()
        model.train()
        inputs = augment(train_x, generator)
        order = torch.randperm(shard, device=device, generator=generator)
        loss_sum = torch.zeros((), device=device)
        correct = torch.zeros((), device=device)
        for index in range(steps_per_epoch):
            factor = lr_factor(step, total_steps)
            for group in optimizer.param_groups:
                frozen = group["name"] == "whiten_bias" and epoch > WHITEN_BIAS_EPOCHS
                group["lr"] = 0.0 if frozen else group["base_lr"] * factor
            batch = order[index * local_batch:(index + 1) * local_batch]
            x, y = inputs[batch], train_y[batch]
            if device.type == "cuda":
                x = x.contiguous(memory_format=torch.channels_last)
            with autocast(device):
                logits = model(x)
                loss = F.cross_entropy(logits.float(), y, label_smoothing=LABEL_SMOOTHING)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
            correct += (logits.argmax(1) == y).sum()
            step += 1
        synchronize(device)
        epoch_times.append(time.perf_counter() - epoch_start)
        loss_total, correct_total = all_sum([loss_sum.item(), correct.item()], device, ranks)
        if ranks.local_rank == 0:
            seen = steps_per_epoch * batch_size
            log(f"epoch {epoch}/{epochs}  loss {loss_total / ranks.world / steps_per_epoch:.4f}  "
                f"train_acc {correct_total / seen:.4f}  time {epoch_times[-1]:.2f}s  "
                f"images/s {seen / epoch_times[-1]:.0f}")

    train_time = sum(epoch_times)
    hits, count = all_sum([(predict(net, test_x, device) == test_y).sum().item(), float(len(test_y))], device, ranks)
    test_accuracy = hits / count

    model_path: Path | None = None
    inference_accuracy: float | None = None
    if ranks.is_main:
        model_path = save_model(net, args.output_dir / "model.pt", data.classes, mean, std, test_accuracy, epochs,
                                args.dataset_name)
        import infer
        inference_accuracy = infer.evaluate(model_path, data.test, device=device).accuracy
    nodes = ranks.world // ranks.local_world
    metrics = Metrics(
        test_accuracy=round(test_accuracy, 4),
        inference_accuracy=None if inference_accuracy is None else round(inference_accuracy, 4),
        images_per_s=round(total_steps * batch_size / train_time, 1),
        epoch_time_s=round(train_time / epochs, 3),
        train_time_s=round(train_time, 3),
        wall_time_s=0.0,
        epochs=epochs,
        steps=total_steps,
        batch_size=batch_size,
        train_images=len(data.train),
        test_images=len(data.test),
        parameters=parameters,
        dataset=args.dataset_name,
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        device_type=device.type,
        gpu_count=ranks.world if device.type == "cuda" else 0,
        world_size=ranks.world,
        nodes=nodes,
        torch_version=str(torch.__version__),
        cuda_version=torch.version.cuda,
        hostname=socket.gethostname(),
        model_path=str(model_path) if model_path else None,
    )
    if ranks.distributed:
        # Rank 0 holds the saved model's numbers; every node reports the same metrics.
        shared = [metrics]
        dist.broadcast_object_list(shared, src=0)
        metrics = shared[0]
        # Drop DDP's reducer (it holds the process group) and let every rank arrive before the group goes:
        # destroying it under a live reducer aborts the process with "terminate called" under gloo.
        del model
        dist.barrier()
        dist.destroy_process_group()
    metrics.wall_time_s = round(time.perf_counter() - started, 3)
    return metrics


def save_model(net: nn.Sequential, path: Path, classes: tuple[str, ...], mean: torch.Tensor, std: torch.Tensor,
               test_accuracy: float, epochs: int, dataset: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in net.state_dict().items()}
    meta = {"widths": list(WIDTHS), "classes": list(classes), "mean": mean.tolist(), "std": std.tolist(),
            "test_accuracy": test_accuracy, "epochs": epochs, "dataset": dataset, "torch_version": str(torch.__version__),
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    torch.save({"state_dict": state, "meta": meta}, path)
    return path


def write_termination_log(payload: dict, path: Path) -> None:
    """Kubernetes shows this file's content as the container's termination message (4 KiB at most)."""
    if path.exists():
        path.write_text(json.dumps(payload, separators=(",", ":"))[:4096])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a small CNN on CIFAR-10 (or a synthetic set) quickly.")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="holds cifar-10-batches-py/ or cifar-10-python.tar.gz (default: ./data, "
                             "or ./data-synthetic with --synthetic)")
    parser.add_argument("--download", action="store_true", help="fetch the official archive when it is missing")
    parser.add_argument("--download-url", default=cifar_data.CIFAR_URL, help="where to fetch it (a mirror)")
    parser.add_argument("--md5", default=cifar_data.CIFAR_MD5, help="the archive's expected md5")
    parser.add_argument("--synthetic", action="store_true",
                        help="generate a learnable set in CIFAR-10's format instead of reading the real one")
    parser.add_argument("--synthetic-train-size", type=int, default=0)
    parser.add_argument("--synthetic-test-size", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=0, help=f"default {EPOCHS} on GPU, {CPU_EPOCHS} on CPU")
    parser.add_argument("--batch-size", type=int, default=0,
                        help=f"global batch; default {BATCH_SIZE} on GPU, {CPU_BATCH_SIZE} on CPU")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--output-dir", type=Path, default=Path("out"), help="where model.pt is written")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--termination-log", type=Path, default=TERMINATION_LOG,
                        help="written with the final metrics (or the error) when the file exists")
    args = parser.parse_args(argv)
    args.dataset_name = "synthetic" if args.synthetic else "cifar10"
    if args.data_dir is None:
        # The same path for every local rank, and never the folder a real data set is kept in.
        args.data_dir = Path("data-synthetic" if args.synthetic else "data")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ranks = ranks_from_env()
    try:
        metrics = train(args)
    except (TrainerError, cifar_data.DataError) as exc:
        log(f"error: {exc}")
        if ranks.local_rank == 0:
            write_termination_log({"error": str(exc)}, args.termination_log)
        return 2
    except Exception as exc:
        # Any other failure (CUDA out of memory, NCCL, ...) still leaves its cause where the driver reads it.
        if ranks.local_rank == 0:
            write_termination_log({"error": f"{type(exc).__name__}: {exc}"}, args.termination_log)
        raise
    payload = asdict(metrics)
    if ranks.local_rank == 0:
        log(f"test accuracy {metrics.test_accuracy:.4f} in {metrics.train_time_s:.2f}s of training "
            f"({metrics.images_per_s:.0f} images/s); saved model re-read: {metrics.inference_accuracy}")
        print(json.dumps(payload), flush=True)
        write_termination_log(payload, args.termination_log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
