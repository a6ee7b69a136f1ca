"""Load a model saved by train.py and classify held-out images: proof that the saved file is usable.

    python infer.py out/model.pt --data-dir data          # the test batch of a cifar-10-batches-py folder
    python infer.py out/model.pt --data-dir d --limit 100 # the first 100 test images
    python infer.py --model model.pt --image cat.png      # one picture: its class and the model's score
    python -m trainer.infer --model model.pt --image cat.png   # the same, from the folder above trainer/

Prints one JSON line: the accuracy, how many images, and the time they took; for one image, its class, the
score (softmax probability) and the runner-up classes. PNG is read without extra packages; other formats
(JPEG, ...) need Pillow. A picture that is not 32x32 is scaled to it first.
"""
from __future__ import annotations

import argparse
import json
import struct
import sys
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__:  # `python -m trainer.infer`: its neighbours are plain modules, imported as the pod imports them
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import cifar_data
import numpy as np
import torch
import train


@dataclass(frozen=True)
class InferenceResult:
    accuracy: float
    images: int
    seconds: float
    predictions: list[str]  # class names of the first few images, for a human to eyeball


def evaluate(path: Path, split: cifar_data.Split, *, device: torch.device | None = None,
             limit: int | None = None) -> InferenceResult:
    device = device or torch.device("cpu")
    net, meta = train.load_model(path, device)
    images = torch.from_numpy(split.images[:limit])
    labels = torch.from_numpy(split.labels[:limit]).to(device)
    started = time.perf_counter()
    predicted = train.classify(net, meta, images, device)
    seconds = time.perf_counter() - started
    accuracy = (predicted == labels).float().mean().item() if len(labels) else 0.0
    names = [meta["classes"][i] for i in predicted[:8].tolist()]
    return InferenceResult(accuracy=round(accuracy, 4), images=len(labels), seconds=round(seconds, 3),
                           predictions=names)


class ImageFileError(Exception):
    """The picture cannot be read."""


def _png_pixels(data: bytes) -> np.ndarray:
    """An 8-bit, non-interlaced PNG as H x W x channels uint8 (gray, gray+alpha, RGB, RGBA or palette)."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ImageFileError("not a PNG file")
    position, chunks, palette = 8, [], None
    width = height = depth = color = interlace = 0
    while position + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"PLTE":
            palette = np.frombuffer(body, dtype=np.uint8).reshape(-1, 3)
        elif kind == b"IDAT":
            chunks.append(body)
        elif kind == b"IEND":
            break
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(color)
    if depth != 8 or interlace or channels is None or not width or not height:
        raise ImageFileError(f"PNG with bit depth {depth}, colour type {color}, interlace {interlace}: only 8-bit "
                             "non-interlaced PNGs are read without Pillow (pip install pillow reads the rest)")
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    rows = np.zeros((height, stride), dtype=np.uint8)
    previous = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        row = np.zeros(stride, dtype=np.int32)
        for x in range(stride):
            left = row[x - channels] if x >= channels else 0
            up = previous[x]
            corner = previous[x - channels] if x >= channels else 0
            if kind == 0:
                predictor = 0
            elif kind == 1:
                predictor = left
            elif kind == 2:
                predictor = up
            elif kind == 3:
                predictor = (left + up) // 2
            else:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                predictor = left if pa <= pb and pa <= pc else up if pb <= pc else corner
            row[x] = (line[x] + predictor) & 0xFF
        rows[y], previous = row, row
    pixels = rows.reshape(height, width, channels)
    if color == 3:
        if palette is None:
            raise ImageFileError("palette PNG without a palette")
        return palette[pixels[:, :, 0]]
    return pixels


def read_image(path: Path) -> np.ndarray:
    """The picture as 3 x 32 x 32 uint8 RGB (alpha dropped, gray repeated, scaled to 32 x 32 when it is not)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImageFileError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        from PIL import Image  # optional: any format, and a better scaling filter
    except ImportError:
        try:
            pixels = _png_pixels(data)
        except (ImageFileError, zlib.error, struct.error, ValueError) as exc:
            raise ImageFileError(f"{path}: {exc}") from None
    else:
        try:
            with Image.open(path) as picture:
                pixels = np.asarray(picture.convert("RGB").resize((32, 32), Image.BILINEAR))
        except OSError as exc:
            raise ImageFileError(f"{path}: not a picture Pillow reads ({exc})") from None
    if pixels.shape[2] in (1, 2):
        pixels = np.repeat(pixels[:, :, :1], 3, axis=2)
    pixels = pixels[:, :, :3]
    height, width = pixels.shape[:2]
    if (height, width) != (32, 32):
        # Nearest neighbour (without Pillow): rows and columns sampled evenly.
        pixels = pixels[(np.arange(32) * height) // 32][:, (np.arange(32) * width) // 32]
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))


@torch.no_grad()
def rank_classes(net: torch.nn.Sequential, meta: dict, pixels_u8: np.ndarray, device: torch.device) -> dict:
    """One 3 x 32 x 32 uint8 picture: its class, the model's score for it (softmax) and the next two classes
    (also what trainer/serve.py answers over HTTP)."""
    pixels = torch.from_numpy(np.ascontiguousarray(pixels_u8, dtype=np.uint8)).unsqueeze(0).to(device).float()
    mean = torch.tensor(meta["mean"], device=device).view(1, 3, 1, 1)
    std = torch.tensor(meta["std"], device=device).view(1, 3, 1, 1)
    scores = torch.softmax(net((pixels - mean) / std).float(), dim=1)[0]
    ranked = scores.argsort(descending=True).tolist()
    classes = meta["classes"]
    return {"class": classes[ranked[0]], "score": round(float(scores[ranked[0]]), 4),
            "next": [{"class": classes[i], "score": round(float(scores[i]), 4)} for i in ranked[1:3]]}


def classify_image(model: Path, image: Path, device: torch.device | None = None) -> dict:
    """The picture's class, the model's score for it (softmax) and the next two classes."""
    device = device or torch.device("cpu")
    net, meta = train.load_model(model, device)
    return {"image": str(image), **rank_classes(net, meta, read_image(image), device)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Classify held-out CIFAR-10 images, or one picture, with a saved "
                                                 "model.")
    parser.add_argument("model", type=Path, nargs="?")
    parser.add_argument("--model", dest="model_path", type=Path, help="the saved model (or give it first)")
    parser.add_argument("--image", type=Path, help="classify this one picture (PNG; others need Pillow)")
    parser.add_argument("--data-dir", type=Path, help="holds cifar-10-batches-py/ (or is it)")
    parser.add_argument("--limit", type=int, default=None, help="classify only the first N test images")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    model = args.model_path or args.model
    if model is None or (args.image is None) == (args.data_dir is None):
        parser.error("give a model (--model PATH) and either --image PICTURE or --data-dir FOLDER")
    try:
        if args.image is not None:
            print(json.dumps(classify_image(model, args.image, torch.device(args.device))), flush=True)
            return 0
        folder = cifar_data.locate(args.data_dir)
        result = evaluate(model, cifar_data.read_batch(folder / cifar_data.TEST_FILE),
                          device=torch.device(args.device), limit=args.limit)
    except (cifar_data.DataError, train.ModelFileError, ImageFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(result)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
