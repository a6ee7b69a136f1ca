"""Serve a model saved by train.py over HTTP as a KServe custom predictor (the `kserve` package's ModelServer):
what `smoke-test --serve` runs in an InferenceService.

    python serve.py --model /cache/runs/NAME/model.pt --name cifar10

KServe's v1 protocol: POST /v1/models/cifar10:predict with {"instances": [PICTURE, ...]}, each picture 32 x 32
RGB as nested lists of 0-255 (rows, columns, channels: the shape an image library gives); the answer is
{"predictions": [{"class": "cat", "score": 0.91, "next": [...]}, ...]}. The model runs on the CPU unless the pod
was given a GPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import infer
import kserve
import numpy as np
import torch
import train


class Cifar10Predictor(kserve.Model):
    def __init__(self, name: str, path: Path) -> None:
        super().__init__(name)
        self.path = path
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.load()

    def load(self) -> bool:
        self.net, self.meta = train.load_model(self.path, self.device)
        self.ready = True
        return self.ready

    def predict(self, payload: dict, headers: dict | None = None) -> dict:
        pictures = payload.get("instances") if isinstance(payload, dict) else None
        if not isinstance(pictures, list) or not pictures:
            raise kserve.errors.InvalidInput('give {"instances": [PICTURE]}, each 32 x 32 x 3 values 0-255')
        answers = []
        for picture in pictures:
            pixels = np.asarray(picture, dtype=np.int64)
            if pixels.shape != (32, 32, 3) or pixels.min() < 0 or pixels.max() > 255:
                raise kserve.errors.InvalidInput(f"a picture is 32 x 32 x 3 values 0-255, not {pixels.shape}")
            answers.append(infer.rank_classes(self.net, self.meta, pixels.astype(np.uint8).transpose(2, 0, 1),
                                              self.device))
        return {"predictions": answers}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a saved CIFAR-10 model as a KServe predictor.")
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--name", default="cifar10")
    parser.add_argument("--http-port", type=int, default=8080)
    args = parser.parse_args(argv)
    kserve.ModelServer(http_port=args.http_port).start([Cifar10Predictor(args.name, args.model)])


if __name__ == "__main__":
    main()
