"""Trainer throughput on whatever device this machine has: images/s and time, one process and torchrun.

    .venv/bin/python bench/trainer_cpu.py                      # CPU: small synthetic set, 1 and 2 processes
    python bench/trainer_cpu.py --device cuda --nproc 1 8      # a GPU node: the full-size synthetic set
    python bench/trainer_cpu.py --device cuda --nproc 1 --epochs 10 --cifar10 /data   # the real set

Runs trainer/train.py as the smoke-test Job does (a subprocess; torchrun for more than one process), on the
synthetic set unless --cifar10 names a data folder, and prints one Markdown table row per configuration for
docs/benchmarks.md. The trainer reports the first epoch apart (it pays for warm-up, cuDNN autotuning and
compilation): "steady" is the epochs after it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from provision.resources import TRAINER_DIR

TRAINER = TRAINER_DIR / "train.py"


def run(args: argparse.Namespace, nproc: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        launcher = [sys.executable] if nproc == 1 else [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
        options = ["--device", args.device, "--epochs", str(args.epochs), "--output-dir", f"{tmp}/out",
                   "--termination-log", f"{tmp}/absent"]
        if args.cifar10:
            options += ["--data-dir", str(args.cifar10), "--download"]
        else:
            options += ["--synthetic", "--data-dir", f"{tmp}/data"]
            if args.train_size:
                options += ["--synthetic-train-size", str(args.train_size), "--synthetic-test-size", str(args.test_size)]
        if args.batch_size:
            options += ["--batch-size", str(args.batch_size)]
        if args.compile:
            options.append("--compile")
        result = subprocess.run([*launcher, str(TRAINER), *options], capture_output=True, text=True, check=False,
                                env={k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"})
    if result.returncode != 0:
        raise SystemExit(f"trainer failed ({nproc} process(es)):\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu")
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2], help="process counts to measure")
    parser.add_argument("--train-size", type=int, default=0, help="synthetic training images (0: the trainer's "
                        "default for the device: 5000 on CPU, 50000 on GPU)")
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=0, help="0: the trainer's default for the device")
    parser.add_argument("--compile", action="store_true", help="pass --compile to the trainer")
    parser.add_argument("--cifar10", type=Path, default=None,
                        help="train on the real CIFAR-10 in this folder (downloaded there when missing)")
    args = parser.parse_args()
    print("| device | processes | data | train images | epochs | precision | test accuracy (ceiling) "
          "| train time (s) | first epoch (s) | later epochs (s) | images/s (all) | images/s (steady) | torch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for nproc in args.nproc:
        m = run(args, nproc)
        device = m["device"] if m["device_type"] == "cuda" else f"CPU, {os.cpu_count()} cores"
        precision = m["precision"] + (", compiled" if m["compiled"] else "")
        ceiling = f" ({m['accuracy_ceiling']:.2f})" if m["accuracy_ceiling"] else ""
        steady_epoch = f"{m['steady_epoch_time_s']:.2f}" if m["steady_epoch_time_s"] is not None else "-"
        steady = f"{m['steady_images_per_s']:.0f}" if m["steady_images_per_s"] is not None else "-"
        print(f"| {device} | {nproc} | {m['dataset']} | {m['train_images']} | {m['epochs']} | {precision} "
              f"| {m['test_accuracy']:.4f}{ceiling} | {m['train_time_s']:.2f} | {m['warmup_epoch_time_s']:.2f} "
              f"| {steady_epoch} | {m['images_per_s']:.0f} | {steady} | {m['torch_version']} |", flush=True)


if __name__ == "__main__":
    main()
