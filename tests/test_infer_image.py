"""Single-image inference, like the seeds' test.py: `python infer.py --model model.pt --image cat.png` (or
`python -m trainer.infer ...` from the folder above trainer/) prints the picture's class and the model's
score. Tested on pictures generated here: a model trained on the synthetic set classifies PNGs of that set's
classes, written with every PNG row filter, in gray, RGBA and larger sizes."""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from provision.resources import TRAINER_DIR

pytest.importorskip("torch", reason="the trainer needs torch: run in the environment that has it (.venv)")
sys.path.insert(0, str(TRAINER_DIR))
import cifar_data  # the trainer's own module, as the pods import it

SMALL = ["--synthetic", "--synthetic-train-size", "1024", "--synthetic-test-size", "300", "--epochs", "2",
         "--batch-size", "128", "--device", "cpu"]


def write_png(path: Path, pixels: np.ndarray, *, filters: tuple[int, ...] = (0, 1, 2, 3, 4)) -> Path:
    """An 8-bit PNG (H x W x 1, 2, 3 or 4 channels), its rows filtered with each of `filters` in turn."""
    height, width, channels = pixels.shape
    color = {1: 0, 2: 4, 3: 2, 4: 6}[channels]
    rows = pixels.reshape(height, width * channels).astype(np.int32)
    raw = bytearray()
    previous = np.zeros(width * channels, dtype=np.int32)
    for y, row in enumerate(rows):
        kind = filters[y % len(filters)]
        left = np.concatenate([np.zeros(channels, np.int32), row[:-channels]])
        corner = np.concatenate([np.zeros(channels, np.int32), previous[:-channels]])
        if kind == 0:
            predictor = np.zeros_like(row)
        elif kind == 1:
            predictor = left
        elif kind == 2:
            predictor = previous
        elif kind == 3:
            predictor = (left + previous) // 2
        else:
            p = left + previous - corner
            pa, pb, pc = abs(p - left), abs(p - previous), abs(p - corner)
            predictor = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, previous, corner))
        raw += bytes([kind]) + ((row - predictor) % 256).astype(np.uint8).tobytes()
        previous = row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b""))
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("infer")
    result = subprocess.run([sys.executable, str(TRAINER_DIR / "train.py"), *SMALL, "--data-dir", str(tmp_path / "data"),
                             "--output-dir", str(tmp_path / "out"), "--termination-log", str(tmp_path / "tl")],
                            capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return tmp_path / "out" / "model.pt"


def pictures(count: int, seed: int = 77) -> tuple[np.ndarray, np.ndarray]:
    """Pictures of the synthetic set's classes (H x W x 3), with less noise than training saw."""
    split = cifar_data.synthetic_images(count, seed, pixel_noise=16.0, label_noise=0.0)
    return split.images.transpose(0, 2, 3, 1), split.labels


def classify(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_a_png_is_read_back_pixel_for_pixel_whatever_its_row_filters(tmp_path: Path) -> None:
    sys.path.insert(0, str(TRAINER_DIR))
    import infer

    rng = np.random.default_rng(3)
    for channels in (1, 2, 3, 4):
        pixels = rng.integers(0, 256, size=(32, 32, channels), dtype=np.uint8)
        read = infer.read_image(write_png(tmp_path / f"c{channels}.png", pixels))
        expected = np.repeat(pixels[:, :, :1], 3, axis=2) if channels < 3 else pixels[:, :, :3]
        assert read.shape == (3, 32, 32) and (read == expected.transpose(2, 0, 1)).all(), channels
    large = infer.read_image(write_png(tmp_path / "large.png", rng.integers(0, 256, (64, 48, 3), dtype=np.uint8)))
    assert large.shape == (3, 32, 32)


def test_one_picture_gets_its_class_and_score_like_the_seeds_test_py(model: Path, tmp_path: Path) -> None:
    images, labels = pictures(1)
    picture = write_png(tmp_path / "picture.png", images[0])
    result = classify(str(TRAINER_DIR / "infer.py"), "--model", str(model), "--image", str(picture), "--device", "cpu")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["class"] == cifar_data.CLASSES[labels[0]]
    assert 0.1 < answer["score"] <= 1.0 and answer["image"] == str(picture)
    assert len(answer["next"]) == 2 and all(n["score"] <= answer["score"] for n in answer["next"])


def test_python_dash_m_trainer_infer_works_from_the_folder_above_trainer(model: Path, tmp_path: Path) -> None:
    """What `smoke-test --save DIR` leaves: DIR/model.pt and DIR/trainer/, run as `python -m trainer.infer`."""
    shutil.copytree(TRAINER_DIR, tmp_path / "trainer", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(model, tmp_path / "model.pt")
    images, labels = pictures(1, seed=5)
    write_png(tmp_path / "cat.png", images[0])
    result = classify("-m", "trainer.infer", "--model", "model.pt", "--image", "cat.png", "--device", "cpu",
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["class"] == cifar_data.CLASSES[labels[0]]


def test_generated_pictures_of_every_class_are_mostly_recognised(model: Path, tmp_path: Path) -> None:
    images, labels = pictures(30)
    paths = [write_png(tmp_path / f"{i}.png", image) for i, image in enumerate(images)]
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import infer\n"
            "for path in sys.argv[3:]:\n"
            "    print(json.dumps(infer.classify_image(__import__('pathlib').Path(sys.argv[2]),"
            " __import__('pathlib').Path(path))))")
    result = classify("-c", code, str(TRAINER_DIR), str(model), *map(str, paths))
    assert result.returncode == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    right = sum(a["class"] == cifar_data.CLASSES[label] for a, label in zip(answers, labels, strict=True))
    assert right >= 27, answers


def test_a_file_that_is_no_picture_is_refused_in_one_line(model: Path, tmp_path: Path) -> None:
    bogus = tmp_path / "notes.png"
    bogus.write_text("not a picture")
    result = classify(str(TRAINER_DIR / "infer.py"), "--model", str(model), "--image", str(bogus))
    assert result.returncode == 2
    # Pillow (which the kserve package brings into the test environment) reads any format; without it, PNG only.
    try:
        import PIL  # noqa: F401
        why = f"not a picture Pillow reads (cannot identify image file '{bogus}')"
    except ImportError:
        why = "not a PNG file"
    assert result.stderr.strip() == f"error: {bogus}: {why}"
    usage = classify(str(TRAINER_DIR / "infer.py"), "--model", str(model))
    assert usage.returncode == 2 and "either --image PICTURE or --data-dir FOLDER" in usage.stderr
