"""Load a model saved by train.py and classify held-out images: proof that the saved file is usable.

    python infer.py out/model.pt --data-dir data          # the test batch of a cifar-10-batches-py folder
    python infer.py out/model.pt --data-dir d --limit 100 # the first 100 test images

Prints one JSON line: the accuracy, how many images, and the time they took.
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import cifar_data
import torch
import train


@dataclass(frozen=True)
class InferenceResult:
    accuracy: float
    images: int
    seconds: float
    predictions: list[str]  # class names of the first few images, for a human to eyeball


class ModelFileError(Exception):
    """The file is not a model saved by train.py."""


def load_model(path: Path, device: torch.device) -> tuple[torch.nn.Sequential, dict]:
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as exc:
        raise ModelFileError(f"{path}: cannot be read as a saved model ({exc})") from None
    if not isinstance(saved, dict) or "state_dict" not in saved or "meta" not in saved:
        raise ModelFileError(f"{path}: not a model saved by train.py (expected 'state_dict' and 'meta')")
    meta = saved["meta"]
    net = train.build_network(tuple(meta["widths"]), num_classes=len(meta["classes"]))
    net.load_state_dict(saved["state_dict"])
    return net.to(device).eval(), meta


def classify(net: torch.nn.Sequential, meta: dict, images_u8: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Predicted class indices for uint8 images (N x 3 x 32 x 32), normalised as in training."""
    mean = torch.tensor(meta["mean"], device=device).view(1, 3, 1, 1)
    std = torch.tensor(meta["std"], device=device).view(1, 3, 1, 1)
    images = (images_u8.to(device).float() - mean) / std
    return train.predict(net, images, device)


def evaluate(path: Path, split: cifar_data.Split, *, device: torch.device | None = None,
             limit: int | None = None) -> InferenceResult:
    device = device or torch.device("cpu")
    net, meta = load_model(path, device)
    images = torch.from_numpy(split.images[:limit])
    labels = torch.from_numpy(split.labels[:limit]).to(device)
    started = time.perf_counter()
    predicted = classify(net, meta, images, device)
    seconds = time.perf_counter() - started
    accuracy = (predicted == labels).float().mean().item() if len(labels) else 0.0
    names = [meta["classes"][i] for i in predicted[:8].tolist()]
    return InferenceResult(accuracy=round(accuracy, 4), images=len(labels), seconds=round(seconds, 3),
                           predictions=names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Classify held-out CIFAR-10 images with a saved model.")
    parser.add_argument("model", type=Path)
    parser.add_argument("--data-dir", type=Path, required=True, help="holds cifar-10-batches-py/ (or is it)")
    parser.add_argument("--limit", type=int, default=None, help="classify only the first N test images")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    try:
        folder = cifar_data.locate(args.data_dir)
        result = evaluate(args.model, cifar_data.read_batch(folder / cifar_data.TEST_FILE),
                          device=torch.device(args.device), limit=args.limit)
    except (cifar_data.DataError, ModelFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(result)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
