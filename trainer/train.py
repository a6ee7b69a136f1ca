"""CIFAR-10 to a real accuracy in seconds on one GPU: the cluster's proof that its GPUs train.

The recipe is in this file, and every knob is named in the block below. Beside it, what is not the recipe:
cifar_data.py (the data sets), distributed.py (torchrun's ranks, and the sums across them), termination.py (the
report Kubernetes keeps), faults.py (deliberate breaks, for the tests only), infer.py (the saved model put to
use), bandwidth.py (the all-reduce timed before multi-node training), serve.py and deploy.py (the model served
by KServe, for `smoke-test --serve` and `--pipeline`). The recipe is airbench94's (Keller Jordan, 2024;
https://github.com/KellerJordan/cifar10-airbench, airbench94.py), written afresh here. Its pieces, each a
named constant or function below:

  - whitening: the first layer's 2x2 filters are computed from the training images' patch covariance
    and frozen (only their bias trains, for the first WHITEN_BIAS_EPOCHS epochs);
  - dirac initialisation: each 3x3 convolution starts by passing its input channels through unchanged;
  - batch norm with a tiny epsilon (BN_EPS), a fixed scale, and biases that learn BIAS_LR_SCALE times
    faster than the weights (the whitening bias learns at the plain rate);
  - nesterov SGD with a triangular learning-rate schedule, decoupled weight decay, label smoothing;
  - lookahead averaging: from LOOKAHEAD_FROM_EPOCH on, the weights are pulled towards a running
    average every LOOKAHEAD_EVERY steps, and take the average at the end of each epoch;
  - alternating flips: a random half of the images is mirrored in odd epochs and the other half in even
    epochs, so every image is seen both ways; plus random translation by up to TRANSLATE_PX pixels;
  - 6-view test-time augmentation: each test image, its mirror, and both shifted one pixel each way;
  - the data set lives on the device as one tensor (half precision and channels_last on a GPU), so no
    DataLoader sits in the hot loop; bfloat16 autocast where the GPU has it (compute capability 8.0 and
    newer), float16 with loss scaling on older GPUs, float32 on CPU; torch.compile with --compile.

    python train.py --synthetic                 # generated set with a known accuracy ceiling; no download
    python train.py --data-dir /data --download # the real CIFAR-10 (md5-checked)
    torchrun --nproc-per-node 2 train.py ...    # DDP: NCCL on GPU, gloo on CPU, each rank on its shard

Progress goes to stderr, one line per epoch; the final metrics are one JSON line on stdout and, in a
Kubernetes container, in /dev/termination-log. The model is saved with its metadata, read back the way
infer.py reads it, and used to classify the held-out images once more.
"""
from __future__ import annotations

import argparse
import json
import pickle
import socket
import sys
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import cifar_data
import faults
import torch
import torch.distributed as dist
import torch.nn.functional as F
from distributed import (
    Ranks,
    all_sum,
    average_batch_norm_statistics,
    choose_device,
    data_ready_marker,
    model_digest,
    no_buffer_sync,
    ranks_from_env,
    set_cpu_threads,
    wait_for_data,
)
from termination import TERMINATION_LOG, TrainerError, report_failure, write_termination_log
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import get_error_handler

# ---------------------------------------------------------------------------------------------------
# Hyperparameters
# ---------------------------------------------------------------------------------------------------
EPOCHS = 10                  # GPU default; airbench94 reaches 94% on the real set in 9.9
CPU_EPOCHS = 2               # CPU default (labs without GPUs), with the smaller synthetic set below
BATCH_SIZE = 1024            # global batch, split evenly across ranks
CPU_BATCH_SIZE = 256         # smaller batches make more steps out of the CPU's smaller data set
# airbench94's lr 11.5 and weight decay 0.0153 per 1024 examples, decoupled from nesterov momentum 0.85,
# restated for torch SGD on the batch's mean loss: LR is per step at BATCH_SIZE and scales with the batch.
LR = 1.5
MOMENTUM = 0.85              # nesterov
WEIGHT_DECAY = 0.002         # fraction of each weight decayed per step at the peak learning rate
BIAS_LR_SCALE = 64.0         # batch-norm biases learn this much faster (their decay per step stays the same)
LR_START = 0.2               # schedule: fraction of LR at step 0,
LR_PEAK_AT = 0.23            # rising linearly to LR at this fraction of training,
LR_END = 0.07                # then falling linearly to this fraction at the end
LABEL_SMOOTHING = 0.2
WIDTHS = (64, 256, 256)      # channels of the three conv blocks
DIRAC_INIT = True            # each conv's first filters start as the identity (an implicit residual path)
WHITEN_KERNEL = 2            # the first layer whitens 2x2 patches: 3*2*2 = 12 directions, each +/-
WHITEN_EPS = 5e-4            # added to the patch covariance's eigenvalues before dividing by their root
WHITEN_INIT_IMAGES = 5000    # training images used to estimate the patch covariance
WHITEN_BIAS_EPOCHS = 3       # the whitening layer's bias trains for this many epochs, then stays fixed
BN_MOMENTUM = 0.4            # torch convention: weight of the newest batch in the running statistics
BN_EPS = 1e-12               # the recipe's; torch's default 1e-5 would blunt the whitened inputs' scale
LOGIT_SCALE = 1 / 9          # final logits are scaled down; keeps early steps from saturating
ALTERNATING_FLIP = True      # a fixed random half mirrored in odd epochs, the other half in even ones
TRANSLATE_PX = 2             # random shifts of up to this many pixels (reflect-padded) while training
LOOKAHEAD_FROM_EPOCH = 4     # lookahead averaging starts in this epoch (airbench: after 3 epochs)
LOOKAHEAD_EVERY = 5          # steps between pulls towards the average
LOOKAHEAD_DECAY = 0.95       # per-step decay of the average, raised to LOOKAHEAD_EVERY per pull ...
LOOKAHEAD_DECAY_POWER = 3.0  # ... and scaled by (progress ** this): move fast early, average hard at the end
TTA_TRANSLATE_PX = 1         # test-time views: image and mirror, unshifted (1/4 each) and shifted +/-1 (1/8 each)
BF16_MIN_CAPABILITY = (8, 0) # bfloat16 tensor cores from Ampere on; older GPUs train in float16 with loss scaling
EVAL_BATCH_SIZE = 2000
SYNTHETIC_TRAIN_SIZE = 50_000
SYNTHETIC_TEST_SIZE = 10_000
CPU_SYNTHETIC_TRAIN_SIZE = 5_000   # CPU: a smaller generated set, so a lab node finishes in minutes
CPU_SYNTHETIC_TEST_SIZE = 500      # 6 test-time views per image make evaluation cost as much as training here
SEED = 0

# Waiting. Data are prepared before the process group exists (local rank 0 of each node; the others wait
# for its marker file), so no collective waits on a download. A node still downloading holds the others
# at their first collective, so the process group's timeout outlasts the longest data preparation.
DATA_WAIT_TIMEOUT_S = cifar_data.DOWNLOAD_TOTAL_TIMEOUT_S + 300   # download, md5 and unpacking
PROCESS_GROUP_TIMEOUT_S = DATA_WAIT_TIMEOUT_S + 300


# ---------------------------------------------------------------------------------------------------
# Network
# ---------------------------------------------------------------------------------------------------
def batch_norm(channels: int) -> nn.BatchNorm2d:
    norm = nn.BatchNorm2d(channels, eps=BN_EPS, momentum=BN_MOMENTUM)
    # The scale is redundant with the next conv's weights; only the shift is learned.
    norm.weight.requires_grad_(False)
    return norm


def conv3x3(cin: int, cout: int) -> nn.Conv2d:
    conv = nn.Conv2d(cin, cout, kernel_size=3, padding=1, bias=False)
    if DIRAC_INIT:
        with torch.no_grad():
            nn.init.dirac_(conv.weight[:cin])
    return conv


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
    whiten = nn.Conv2d(3, whiten_channels, kernel_size=WHITEN_KERNEL, bias=True)  # 32x32 -> 31x31
    whiten.weight.requires_grad_(False)  # set from the data by init_whitening, never trained
    return nn.Sequential(
        whiten,
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
    layer.weight.copy_(torch.cat([filters, -filters]).to(layer.weight))
    layer.bias.zero_()


# ---------------------------------------------------------------------------------------------------
# Precision
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Precision:
    name: str                          # bf16, fp16 or fp32: reported in the metrics
    autocast_dtype: torch.dtype | None
    data_dtype: torch.dtype            # how the data set is kept on the device
    loss_scaling: bool                 # float16 gradients underflow without it


def precision_for(capability: tuple[int, int] | None) -> Precision:
    """The numeric format for a GPU of this compute capability (None: CPU). bfloat16 on a GPU without
    bfloat16 tensor cores runs on slow emulated kernels, so older GPUs get float16 with loss scaling."""
    if capability is None:
        return Precision("fp32", None, torch.float32, loss_scaling=False)
    if tuple(capability) >= BF16_MIN_CAPABILITY:
        return Precision("bf16", torch.bfloat16, torch.float16, loss_scaling=False)
    return Precision("fp16", torch.float16, torch.float16, loss_scaling=True)


def device_precision(device: torch.device) -> Precision:
    return precision_for(torch.cuda.get_device_capability(device) if device.type == "cuda" else None)


def autocast(device: torch.device, precision: Precision) -> torch.autocast:
    return torch.autocast(device_type=device.type, dtype=precision.autocast_dtype or torch.float32,
                          enabled=precision.autocast_dtype is not None)


def to_layout(x: torch.Tensor) -> torch.Tensor:
    """channels_last on GPU, where the convolutions are faster for it."""
    return x.contiguous(memory_format=torch.channels_last) if x.is_cuda else x


# ---------------------------------------------------------------------------------------------------
# Data, kept on the device
# ---------------------------------------------------------------------------------------------------
def to_device(split: cifar_data.Split, device: torch.device, mean: torch.Tensor, std: torch.Tensor,
              dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.from_numpy(split.images).to(device).float()
    images = (images - mean.view(1, 3, 1, 1).to(device)) / std.view(1, 3, 1, 1).to(device)
    return to_layout(images.to(dtype)), torch.from_numpy(split.labels).to(device)


def epoch_flips(flip_mask: torch.Tensor, epoch: int) -> torch.Tensor:
    """Which images are mirrored in this epoch (1-based): the fixed random half in odd epochs, the other
    half in even ones, so every image is seen both ways in every two epochs."""
    return flip_mask if epoch % 2 == 1 else ~flip_mask


def translate(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Every image shifted by its own random offset of up to TRANSLATE_PX pixels, reflect-padded."""
    pad = TRANSLATE_PX
    padded = F.pad(images, (pad, pad, pad, pad), mode="reflect")
    shifts = torch.randint(0, 2 * pad + 1, (len(images), 2), device=images.device, generator=generator)
    shifted = torch.empty_like(images)
    # One slice per possible shift (25 for 2 px) beats per-image gathers on every device.
    for dy in range(2 * pad + 1):
        for dx in range(2 * pad + 1):
            chosen = ((shifts[:, 0] == dy) & (shifts[:, 1] == dx)).nonzero().squeeze(1)
            if len(chosen):
                shifted[chosen] = padded[chosen, :, dy:dy + images.shape[2], dx:dx + images.shape[3]]
    return shifted


def augment(images: torch.Tensor, flips: torch.Tensor | None, generator: torch.Generator) -> torch.Tensor:
    """This epoch's view of the whole training set, made at once on the device."""
    out = images
    if flips is not None:
        out = torch.where(flips.view(-1, 1, 1, 1), images.flip(-1), images)
    if TRANSLATE_PX:
        out = translate(out, generator)
    return out


# ---------------------------------------------------------------------------------------------------
# Lookahead averaging and test-time augmentation
# ---------------------------------------------------------------------------------------------------
class Lookahead:
    """A running average of the network's floating-point state (weights and batch-norm statistics) that
    the network is pulled back to: each update moves the average towards the network, then copies it in."""

    def __init__(self, net: nn.Module) -> None:
        self.average = {name: value.detach().clone() for name, value in net.state_dict().items()
                        if value.is_floating_point()}

    @torch.no_grad()
    def update(self, net: nn.Module, decay: float) -> None:
        current = net.state_dict()
        for name, average in self.average.items():
            average.lerp_(current[name], 1 - decay)
            current[name].copy_(average)


def lookahead_decay(step: int, total_steps: int) -> float:
    """Weight of the old average at a pull: small early (the average follows the weights), near
    LOOKAHEAD_DECAY ** LOOKAHEAD_EVERY at the end (it averages the last stretch of training)."""
    return LOOKAHEAD_DECAY ** LOOKAHEAD_EVERY * (step / total_steps) ** LOOKAHEAD_DECAY_POWER


def tta_views(images: torch.Tensor) -> list[tuple[float, torch.Tensor]]:
    """The six test-time views with their weights (summing to 1): the image and its mirror at 1/4 each,
    and both shifted TTA_TRANSLATE_PX pixels up-left and down-right, mirrored or not, at 1/8 each."""
    pad = TTA_TRANSLATE_PX
    height, width = images.shape[-2:]
    padded = F.pad(images, (pad, pad, pad, pad), mode="reflect")
    shifted = [padded[..., :height, :width], padded[..., 2 * pad:, 2 * pad:]]
    views = [(0.25, images), (0.25, images.flip(-1))]
    for view in shifted:
        views += [(0.125, view), (0.125, view.flip(-1))]
    return views


@torch.no_grad()
def tta_logits(net: nn.Module, images: torch.Tensor) -> torch.Tensor:
    return sum(weight * net(to_layout(view)).float() for weight, view in tta_views(images))


@torch.no_grad()
def predict(net: nn.Module, images: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Class predictions from the 6-view test-time augmentation."""
    net.eval()
    precision = device_precision(device)
    predictions = []
    for start in range(0, len(images), EVAL_BATCH_SIZE):
        batch = images[start:start + EVAL_BATCH_SIZE].to(device, precision.data_dtype)
        with autocast(device, precision):
            predictions.append(tta_logits(net, batch).argmax(1))
    return torch.cat(predictions) if predictions else torch.empty(0, dtype=torch.long, device=images.device)


# ---------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------
@dataclass
class Metrics:
    test_accuracy: float
    inference_accuracy: float | None
    images_per_s: float
    epoch_time_s: float
    train_time_s: float
    warmup_epoch_time_s: float
    steady_epoch_time_s: float | None
    steady_images_per_s: float | None
    wall_time_s: float
    epochs: int
    steps: int
    batch_size: int
    train_images: int
    test_images: int
    parameters: int
    tta_views: int
    accuracy_ceiling: float | None
    dataset: str
    device: str
    device_type: str
    gpu_capability: str | None
    precision: str
    compiled: bool
    gpu_count: int
    world_size: int
    nodes: int
    torch_version: str
    cuda_version: str | None
    hostname: str
    model_sha256: str
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
        {"params": [whiten_bias], "lr": lr, "weight_decay": decay, "base_lr": lr, "name": "whiten_bias"},
    ]
    return torch.optim.SGD(groups, momentum=MOMENTUM, nesterov=True)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prepare_data(args: argparse.Namespace, ranks: Ranks, cpu: bool) -> Path:
    """The data set's folder on this node's disk. Local rank 0 generates, downloads, unpacks and checks it;
    the other local ranks wait for its marker. No process group exists yet, so nothing times out on it."""
    if ranks.local_rank != 0:
        return wait_for_data(data_ready_marker(args.data_dir), DATA_WAIT_TIMEOUT_S)
    if args.synthetic:
        folder = cifar_data.write_synthetic(
            args.data_dir,
            train_size=args.synthetic_train_size or (CPU_SYNTHETIC_TRAIN_SIZE if cpu else SYNTHETIC_TRAIN_SIZE),
            test_size=args.synthetic_test_size or (CPU_SYNTHETIC_TEST_SIZE if cpu else SYNTHETIC_TEST_SIZE),
            seed=args.seed)
    else:
        folder = cifar_data.locate(args.data_dir, download_missing=args.download, url=args.download_url,
                                   md5=args.md5)
    if ranks.local_world > 1:
        marker = data_ready_marker(args.data_dir)
        partial = marker.with_name(marker.name + ".part")
        partial.write_text(str(folder))
        partial.replace(marker)
    return folder


@dataclass
class Shard:
    """This rank's data on the device, normalised with the whole training set's mean and std: an equal shard of
    the training images (so every rank runs the same number of steps) and every world-th test image."""
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    size: int                          # training images in the shard


def shard_to_device(data: cifar_data.Cifar10, ranks: Ranks, device: torch.device, precision: Precision) -> Shard:
    train_images_u8 = torch.from_numpy(data.train.images)
    mean = train_images_u8.float().mean(dim=(0, 2, 3))
    std = train_images_u8.float().std(dim=(0, 2, 3))
    # Every rank takes an equal shard, so every rank runs the same number of steps.
    shard = len(data.train) // ranks.world
    rows = slice(ranks.rank * shard, (ranks.rank + 1) * shard)
    train_x, train_y = to_device(cifar_data.Split(data.train.images[rows], data.train.labels[rows]), device, mean,
                                 std, precision.data_dtype)
    test_rows = slice(ranks.rank, None, ranks.world)
    test_x, test_y = to_device(cifar_data.Split(data.test.images[test_rows], data.test.labels[test_rows]),
                               device, mean, std, precision.data_dtype)
    return Shard(train_x, train_y, test_x, test_y, mean, std, shard)


def build_model(args: argparse.Namespace, data: cifar_data.Cifar10, shard: Shard, ranks: Ranks,
                device: torch.device) -> tuple[nn.Sequential, nn.Module]:
    """The network on the device, its whitening layer computed from the first training images; and the module
    the steps call (the network under DDP across ranks, compiled with --compile)."""
    net = build_network(WIDTHS, num_classes=len(data.classes)).to(device)
    whiten_sample = to_device(cifar_data.Split(data.train.images[:WHITEN_INIT_IMAGES],
                                               data.train.labels[:WHITEN_INIT_IMAGES]), device, shard.mean,
                              shard.std)[0]
    init_whitening(net[0], whiten_sample)
    del whiten_sample
    net = net.to(memory_format=torch.channels_last) if device.type == "cuda" else net
    model: nn.Module = net
    if ranks.distributed:
        model = nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None,
                                                    **no_buffer_sync())
        if ranks.local_rank == 0:
            data_ready_marker(args.data_dir).unlink(missing_ok=True)  # every rank is past it: DDP's set-up met them all
    if args.compile:
        model = torch.compile(model)
    return net, model


@dataclass
class Steps:
    """What one rank's training steps use: its data and batches, the schedule, the optimizer and what else each
    step updates. Made once by make_steps; train_epoch carries `step` and `lookahead` from epoch to epoch."""
    net: nn.Sequential                 # the network itself: its parameters, the lookahead average's
    optimizer: torch.optim.SGD
    scaler: torch.amp.GradScaler
    generator: torch.Generator
    flip_mask: torch.Tensor
    shard: Shard
    local_batch: int
    steps_per_epoch: int
    total_steps: int
    fault: faults.Fault
    rank: int
    device: torch.device
    precision: Precision
    step: int = 0
    lookahead: Lookahead | None = None


def make_steps(args: argparse.Namespace, net: nn.Sequential, shard: Shard, ranks: Ranks, device: torch.device,
               precision: Precision, *, batch_size: int, local_batch: int, steps_per_epoch: int,
               total_steps: int) -> Steps:
    """The optimizer and loss scaler for `net`, and this rank's generator (seeded per rank) with the fixed half
    of its shard that alternating flips mirror in odd epochs."""
    optimizer = make_optimizer(net, batch_size)
    scaler = torch.amp.GradScaler(device.type, enabled=precision.loss_scaling)
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed * 1000 + ranks.rank)
    flip_mask = torch.rand(shard.size, device=device, generator=generator) < 0.5
    return Steps(net, optimizer, scaler, generator, flip_mask, shard, local_batch, steps_per_epoch, total_steps,
                 args.fault, ranks.rank, device, precision)


def train_epoch(model: nn.Module, steps: Steps, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One epoch (1-based) of this rank's steps through `model`; its summed loss and correct predictions."""
    net, optimizer, scaler, device, precision = steps.net, steps.optimizer, steps.scaler, steps.device, steps.precision
    train_y, local_batch, total_steps, fault = steps.shard.train_y, steps.local_batch, steps.total_steps, steps.fault
    step, lookahead = steps.step, steps.lookahead
    model.train()
    inputs = augment(steps.shard.train_x, epoch_flips(steps.flip_mask, epoch) if ALTERNATING_FLIP else None,
                     steps.generator)
    order = torch.randperm(steps.shard.size, device=device, generator=steps.generator)
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device)
    for index in range(steps.steps_per_epoch):
        faults.raise_if_due(fault, steps.rank, step + 1)
        factor = lr_factor(step, total_steps)
        for group in optimizer.param_groups:
            frozen = group["name"] == "whiten_bias" and epoch > WHITEN_BIAS_EPOCHS
            group["lr"] = 0.0 if frozen else group["base_lr"] * factor
        batch = order[index * local_batch:(index + 1) * local_batch]
        x, y = inputs[batch], train_y[batch]
        with autocast(device, precision):
            logits = model(to_layout(x))
            loss = F.cross_entropy(logits.float(), y, label_smoothing=LABEL_SMOOTHING)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        faults.break_gradients(net, fault)
        scaler.step(optimizer)
        scaler.update()
        loss_sum += loss.detach()
        correct += (logits.argmax(1) == y).sum()
        step += 1
        if epoch >= LOOKAHEAD_FROM_EPOCH and step % LOOKAHEAD_EVERY == 0:
            if lookahead is None:
                lookahead = Lookahead(net)
            else:
                lookahead.update(net, lookahead_decay(step, total_steps))
    if lookahead is not None:
        lookahead.update(net, decay=1.0)  # the epoch ends on the average
    steps.step, steps.lookahead = step, lookahead
    return loss_sum, correct


def agreed_digest(net: nn.Sequential, ranks: Ranks) -> str:
    """The trained model's sha256, once every rank holds the same one (batch-norm statistics averaged first);
    TrainerError where DDP let the ranks drift apart."""
    if ranks.distributed:
        average_batch_norm_statistics(net, ranks.world)
    digest = model_digest(net.state_dict())
    if ranks.distributed:
        digests: list[Any] = [None] * ranks.world
        dist.all_gather_object(digests, digest)
        log(f"rank {ranks.rank}/{ranks.world}: model sha256 {digest}")
        if len(set(digests)) > 1:
            raise TrainerError(f"the ranks ended training with {len(set(digests))} different models "
                               f"(sha256 per rank: {', '.join(d[:12] for d in digests)}); DDP did not keep "
                               "them in step")
    return digest


def train(args: argparse.Namespace) -> Metrics:
    started = time.perf_counter()
    ranks = ranks_from_env()
    device = choose_device(args.device, ranks)
    threads = set_cpu_threads(ranks)
    cpu = device.type == "cpu"
    folder = prepare_data(args, ranks, cpu)
    if ranks.distributed:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                timeout=timedelta(seconds=PROCESS_GROUP_TIMEOUT_S))
    data = cifar_data.read_folder(folder)
    precision = device_precision(device)
    epochs = args.epochs or (CPU_EPOCHS if cpu else EPOCHS)
    batch_size = args.batch_size or (CPU_BATCH_SIZE if cpu else BATCH_SIZE)
    if batch_size % ranks.world:
        raise TrainerError(f"--batch-size {batch_size} does not split evenly across {ranks.world} ranks")
    local_batch = batch_size // ranks.world
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True

    shard = shard_to_device(data, ranks, device, precision)
    steps_per_epoch = shard.size // local_batch
    if steps_per_epoch == 0:
        raise TrainerError(f"{len(data.train)} training images are fewer than one batch of {batch_size}; "
                           "lower --batch-size or use more data")
    total_steps = epochs * steps_per_epoch
    net, model = build_model(args, data, shard, ranks, device)
    steps = make_steps(args, net, shard, ranks, device, precision, batch_size=batch_size, local_batch=local_batch,
                       steps_per_epoch=steps_per_epoch, total_steps=total_steps)
    parameters = sum(p.numel() for p in net.parameters())

    if ranks.local_rank == 0:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({threads} threads)"
        log(f"device {name}; {precision.name}; ranks {ranks.world}; dataset {args.dataset_name} "
            f"({len(data.train)} train, {len(data.test)} test); {parameters / 1e6:.2f}M parameters; {epochs} "
            f"epochs of {steps_per_epoch} steps, batch {batch_size}{'; compiled' if args.compile else ''}")

    epoch_times: list[float] = []
    for epoch in range(1, epochs + 1):
        synchronize(device)
        epoch_start = time.perf_counter()
        loss_sum, correct = train_epoch(model, steps, epoch)
        synchronize(device)
        epoch_times.append(time.perf_counter() - epoch_start)
        loss_total, correct_total = all_sum([loss_sum.item(), correct.item()], device, ranks)
        if ranks.local_rank == 0:
            seen = steps_per_epoch * batch_size
            log(f"epoch {epoch}/{epochs}  loss {loss_total / ranks.world / steps_per_epoch:.4f}  "
                f"train_acc {correct_total / seen:.4f}  time {epoch_times[-1]:.2f}s  "
                f"images/s {seen / epoch_times[-1]:.0f}")

    digest = agreed_digest(net, ranks)
    hits, count = all_sum([(predict(net, shard.test_x, device) == shard.test_y).sum().item(),
                           float(len(shard.test_y))], device, ranks)
    test_accuracy = hits / count
    model_path: Path | None = None
    inference_accuracy: float | None = None
    if ranks.is_main:
        model_path = save_model(net, args.output_dir / "model.pt", data.classes, shard.mean, shard.std, test_accuracy,
                                epochs, args.dataset_name)
        inference_accuracy = reload_accuracy(model_path, data.test, device)
    metrics = run_metrics(args, data, folder, ranks, device, precision, epoch_times=epoch_times,
                          steps_per_epoch=steps_per_epoch, batch_size=batch_size, parameters=parameters,
                          test_accuracy=test_accuracy, inference_accuracy=inference_accuracy, digest=digest,
                          model_path=model_path)
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


def run_metrics(args: argparse.Namespace, data: cifar_data.Cifar10, folder: Path, ranks: Ranks, device: torch.device,
                precision: Precision, *, epoch_times: list[float], steps_per_epoch: int, batch_size: int,
                parameters: int, test_accuracy: float, inference_accuracy: float | None, digest: str,
                model_path: Path | None) -> Metrics:
    """What the run reports (wall_time_s is train()'s to fill in, last)."""
    epochs = len(epoch_times)
    total_steps = epochs * steps_per_epoch
    train_time = sum(epoch_times)
    steady = epoch_times[1:]
    images_per_epoch = steps_per_epoch * batch_size
    return Metrics(
        test_accuracy=round(test_accuracy, 4),
        inference_accuracy=None if inference_accuracy is None else round(inference_accuracy, 4),
        images_per_s=round(total_steps * batch_size / train_time, 1),
        epoch_time_s=round(train_time / epochs, 3),
        train_time_s=round(train_time, 3),
        warmup_epoch_time_s=round(epoch_times[0], 3),
        steady_epoch_time_s=round(sum(steady) / len(steady), 3) if steady else None,
        steady_images_per_s=round(images_per_epoch * len(steady) / sum(steady), 1) if steady else None,
        wall_time_s=0.0,
        epochs=epochs,
        steps=total_steps,
        batch_size=batch_size,
        train_images=len(data.train),
        test_images=len(data.test),
        parameters=parameters,
        tta_views=len(tta_views(torch.zeros(1, 3, 4, 4))),
        accuracy_ceiling=cifar_data.accuracy_ceiling(folder),
        dataset=args.dataset_name,
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        device_type=device.type,
        gpu_capability=".".join(map(str, torch.cuda.get_device_capability(device))) if device.type == "cuda" else None,
        precision=precision.name,
        compiled=bool(args.compile),
        gpu_count=ranks.world if device.type == "cuda" else 0,
        world_size=ranks.world,
        nodes=ranks.world // ranks.local_world,
        torch_version=str(torch.__version__),
        cuda_version=torch.version.cuda,
        hostname=socket.gethostname(),
        model_sha256=digest,
        model_path=str(model_path) if model_path else None,
    )


def save_model(net: nn.Sequential, path: Path, classes: tuple[str, ...], mean: torch.Tensor, std: torch.Tensor,
               test_accuracy: float, epochs: int, dataset: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    meta = {"widths": list(WIDTHS), "classes": list(classes), "mean": mean.tolist(), "std": std.tolist(),
            "test_accuracy": test_accuracy, "epochs": epochs, "dataset": dataset, "torch_version": str(torch.__version__),
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    torch.save({"state_dict": state, "meta": meta}, path)
    return path


class ModelFileError(Exception):
    """The file is not a model saved by save_model."""


def load_model(path: Path, device: torch.device) -> tuple[nn.Sequential, dict[str, Any]]:
    """The network saved at `path`, built again from its metadata, and the metadata (classes, normalisation)."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as exc:
        raise ModelFileError(f"{path}: cannot be read as a saved model ({exc})") from None
    if not isinstance(saved, dict) or "state_dict" not in saved or "meta" not in saved:
        raise ModelFileError(f"{path}: not a model saved by train.py (expected 'state_dict' and 'meta')")
    meta = saved["meta"]
    net = build_network(tuple(meta["widths"]), num_classes=len(meta["classes"]))
    net.load_state_dict(saved["state_dict"])
    return net.to(device).eval(), meta


def classify(net: nn.Sequential, meta: dict[str, Any], images_u8: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Predicted class indices for uint8 images (N x 3 x 32 x 32), normalised as in training."""
    mean = torch.tensor(meta["mean"], device=device).view(1, 3, 1, 1)
    std = torch.tensor(meta["std"], device=device).view(1, 3, 1, 1)
    images = (images_u8.to(device).float() - mean) / std
    return predict(net, images, device)


def reload_accuracy(path: Path, split: cifar_data.Split, device: torch.device) -> float:
    """The saved file read back as infer.py reads it, classifying the held-out images once more."""
    net, meta = load_model(path, device)
    predicted = classify(net, meta, torch.from_numpy(split.images), device)
    labels = torch.from_numpy(split.labels).to(device)
    return (predicted == labels).float().mean().item() if len(labels) else 0.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a small CNN on CIFAR-10 (or a synthetic set) quickly.")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="holds cifar-10-batches-py/ or cifar-10-python.tar.gz (default: ./data, "
                             "or ./data-synthetic with --synthetic)")
    parser.add_argument("--download", action="store_true", help="fetch the official archive when it is missing")
    parser.add_argument("--download-url", default=cifar_data.CIFAR_URL, help="where to fetch it (a mirror)")
    parser.add_argument("--md5", default=cifar_data.CIFAR_MD5, help="the archive's expected md5")
    parser.add_argument("--synthetic", action="store_true",
                        help="generate a set in CIFAR-10's format, with a known accuracy ceiling, instead of "
                             "reading the real one")
    parser.add_argument("--synthetic-train-size", type=int, default=0)
    parser.add_argument("--synthetic-test-size", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=0, help=f"default {EPOCHS} on GPU, {CPU_EPOCHS} on CPU")
    parser.add_argument("--batch-size", type=int, default=0,
                        help=f"global batch; default {BATCH_SIZE} on GPU, {CPU_BATCH_SIZE} on CPU")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--compile", action="store_true", help="torch.compile the network (the first epoch "
                        "pays for the compilation)")
    parser.add_argument("--output-dir", type=Path, default=Path("out"), help="where model.pt is written")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--termination-log", type=Path, default=TERMINATION_LOG,
                        help="written with the final metrics (or the error) when the file exists")
    parser.add_argument("--fault", type=faults.parse_fault, default=faults.Fault(), metavar="|".join(faults.FAULTS),
                        help="for tests only: break the run on purpose (zero-grads: no parameter learns; "
                             "frozen-convs: the convolutions never learn; error@N: rank N raises)")
    args = parser.parse_args(argv)
    args.dataset_name = "synthetic" if args.synthetic else "cifar10"
    if args.data_dir is None:
        # The same path for every local rank, and never the folder a real data set is kept in.
        args.data_dir = Path("data-synthetic" if args.synthetic else "data")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ranks = ranks_from_env()
    get_error_handler().initialize()  # faulthandler: a crash in native code still prints its stack
    try:
        metrics = train(args)
    except (TrainerError, cifar_data.DataError) as exc:
        report_failure(exc, args.termination_log, rank=ranks.rank, world=ranks.world, local_rank=ranks.local_rank,
                       local_world=ranks.local_world, expected=True)
        return 2
    except Exception as exc:
        # Any other failure (CUDA out of memory, NCCL, ...) still leaves its cause where the driver reads it.
        report_failure(exc, args.termination_log, rank=ranks.rank, world=ranks.world, local_rank=ranks.local_rank,
                       local_world=ranks.local_world, expected=False)
        raise
    payload = asdict(metrics)
    if ranks.local_rank == 0:
        log(f"test accuracy {metrics.test_accuracy:.4f} in {metrics.train_time_s:.2f}s of training "
            f"({metrics.images_per_s:.0f} images/s; {metrics.steady_images_per_s} after the first epoch); "
            f"saved model re-read: {metrics.inference_accuracy}")
        print(json.dumps(payload), flush=True)
        write_termination_log(payload, args.termination_log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
