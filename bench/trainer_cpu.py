"""Trainer throughput on whatever device this machine has: images/s and time, one process and torchrun.

    .venv/bin/python bench/trainer_cpu.py                      # CPU: small synthetic set, 1 and 2 processes
    python bench/trainer_cpu.py --device cuda --nproc 1 8      # a GPU node: the full-size synthetic set

Runs provision/trainer/train.py as the smoke-test Job does (a subprocess; torchrun for more than one process) on the
synthetic set, and prints one Markdown table row per configuration for docs/benchmarks.md. Steady-state
images/s is the median over the epochs after the first (the first pays for warm-up and cuDNN autotuning).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from provision.resources import TRAINER_DIR

TRAINER = TRAINER_DIR / "train.py"
EPOCH_LINE = re.compile(r"^epoch (\d+)/(\d+) .* images/s (\d+)")


def run(device: str, nproc: int, train_size: int, test_size: int, epochs: int, batch_size: int | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        launcher = [sys.executable] if nproc == 1 else [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
        args = ["--synthetic", "--device", device, "--epochs", str(epochs), "--data-dir", f"{tmp}/data",
                "--output-dir", f"{tmp}/out", "--termination-log", f"{tmp}/absent"]
        if train_size:
            args += ["--synthetic-train-size", str(train_size), "--synthetic-test-size", str(test_size)]
        if batch_size:
            args += ["--batch-size", str(batch_size)]
        result = subprocess.run([*launcher, str(TRAINER), *args], capture_output=True, text=True, check=False,
                                env={k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"})
    if result.returncode != 0:
        raise SystemExit(f"trainer failed ({nproc} process(es)):\n{result.stderr[-3000:]}")
    metrics = json.loads(result.stdout.strip().splitlines()[-1])
    per_epoch = [int(m.group(3)) for line in result.stderr.splitlines() if (m := EPOCH_LINE.match(line))]
    steady = per_epoch[1:] or per_epoch
    metrics["steady_images_per_s"] = statistics.median(steady)
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu")
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2], help="process counts to measure")
    parser.add_argument("--train-size", type=int, default=0, help="synthetic training images (0: the trainer's "
                        "default for the device: 5000 on CPU, 50000 on GPU)")
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=0, help="0: the trainer's default for the device")
    args = parser.parse_args()
    print("| device | processes | train images | epochs | test accuracy | train time (s) | epoch (s) "
          "| images/s (all) | images/s (steady) | torch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for nproc in args.nproc:
        m = run(args.device, nproc, args.train_size, args.test_size, args.epochs, args.batch_size or None)
        device = m["device"] if m["device_type"] == "cuda" else f"CPU, {os.cpu_count()} cores"
        print(f"| {device} | {nproc} | {m['train_images']} | {m['epochs']} | {m['test_accuracy']:.4f} "
              f"| {m['train_time_s']:.2f} | {m['epoch_time_s']:.2f} | {m['images_per_s']:.0f} "
              f"| {m['steady_images_per_s']:.0f} | {m['torch_version']} |", flush=True)


if __name__ == "__main__":
    main()
