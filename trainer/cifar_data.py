"""CIFAR-10 on disk: find it, fetch it, read it, or write a synthetic set in its format; md5-checked throughout.

The on-disk format is the official `cifar-10-batches-py` folder: Python pickles `data_batch_1..5` and
`test_batch`, each a dict with `data` (uint8, N x 3072, channel-major: 1024 red, 1024 green, 1024 blue
values per image) and `labels` (N ints in 0..9), plus `batches.meta` with the class names. The archive's
md5 is checked before unpacking, and every batch file's md5 before use, also in a folder found unpacked.

Only the standard library and numpy: no torchvision, so this module is importable everywhere.
"""
from __future__ import annotations

import hashlib
import pickle
import tarfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR_MD5 = "c58f30108f718f92721af3b95e74349a"
ARCHIVE_NAME = "cifar-10-python.tar.gz"
FOLDER_NAME = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
META_FILE = "batches.meta"
# The official folder's files (as published with the archive, and checked by torchvision alike).
OFFICIAL_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
    "batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
}
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
IMAGE_SHAPE = (3, 32, 32)
IMAGE_BYTES = 3 * 32 * 32

# The synthetic set (see synthetic_images): how noisy its pixels are, and the share of its labels that are wrong.
SYNTHETIC_PIXEL_NOISE = 20.0
SYNTHETIC_LABEL_NOISE = 0.05
SYNTHETIC_CHUNK = 10_000   # images generated at a time, to bound memory

# A download that stalls is abandoned after this long without a byte, and the whole fetch after the total.
DOWNLOAD_STALL_TIMEOUT_S = 30
DOWNLOAD_TOTAL_TIMEOUT_S = 900


class DataError(Exception):
    """The data set is missing, corrupt or in the wrong format; the message says what to do."""


@dataclass(frozen=True)
class Split:
    images: np.ndarray  # uint8, N x 3 x 32 x 32
    labels: np.ndarray  # int64, N

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class Cifar10:
    train: Split
    test: Split
    classes: tuple[str, ...]
    folder: Path


def file_md5(path: Path) -> str:
    digest = hashlib.md5()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(url: str, dest: Path, md5: str, *, stall_timeout_s: float = DOWNLOAD_STALL_TIMEOUT_S,
             total_timeout_s: float = DOWNLOAD_TOTAL_TIMEOUT_S) -> Path:
    """Fetch `url` to `dest` (through a .part file) and check its md5; never leaves a bad archive behind."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".part")
    deadline = time.monotonic() + total_timeout_s
    try:
        with urllib.request.urlopen(url, timeout=stall_timeout_s) as response, partial.open("wb") as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
                if time.monotonic() > deadline:
                    raise DataError(f"download of {url} took longer than {total_timeout_s:.0f}s; fetch "
                                    f"{ARCHIVE_NAME} by other means and put it in {dest.parent}")
    except (urllib.error.URLError, OSError) as exc:
        partial.unlink(missing_ok=True)
        reason = f"HTTP {exc.code} {exc.reason}" if isinstance(exc, urllib.error.HTTPError) else getattr(exc, "reason", exc)
        raise DataError(f"could not download {url}: {reason}; put {ARCHIVE_NAME} in {dest.parent} "
                        "or pass --download-url with a reachable mirror") from None
    except DataError:
        partial.unlink(missing_ok=True)
        raise
    actual = file_md5(partial)
    if actual != md5:
        partial.unlink()
        raise DataError(f"{url}: md5 {actual} does not match the expected {md5}; the download is corrupt "
                        "or not the CIFAR-10 python archive")
    partial.replace(dest)
    return dest


def extract(archive: Path, into: Path, md5: str) -> Path:
    """Check the archive's md5, unpack it, and return the batches folder inside."""
    actual = file_md5(archive)
    if actual != md5:
        raise DataError(f"{archive}: md5 {actual} does not match the expected {md5}; delete it and fetch "
                        f"the archive again (--download)")
    try:
        with tarfile.open(archive, "r:gz") as tar:
            # The 'data' filter refuses absolute paths, links out of the tree and device files.
            tar.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise DataError(f"{archive}: not a readable tar.gz archive ({exc})") from None
    folder = into / FOLDER_NAME
    if not folder.is_dir():
        raise DataError(f"{archive}: has no {FOLDER_NAME}/ folder inside; it is not the CIFAR-10 python archive")
    return folder


def _is_batches_folder(path: Path) -> bool:
    return path.is_dir() and (path / TEST_FILE).is_file()


def expected_md5(folder: Path) -> dict[str, str]:
    """The md5 every file of the folder must have: the official ones, or for a synthetic set those
    recorded in its batches.meta when it was written."""
    if is_synthetic(folder):
        with (folder / META_FILE).open("rb") as handle:
            return dict(pickle.load(handle, encoding="latin1").get("md5") or {})
    return dict(OFFICIAL_MD5)


def verify_folder(folder: Path) -> Path:
    """Check every batch file's md5 before anything is read from it: a folder found unpacked may be
    incomplete, corrupt or changed since. A wrong file is named, with the way out."""
    expected = expected_md5(folder)
    if not expected:
        raise DataError(f"{folder}: a synthetic set without recorded md5s (written by an older trainer); "
                        "delete the folder and run with --synthetic again")
    for name, md5 in expected.items():
        path = folder / name
        if not path.is_file():
            raise DataError(f"{path}: missing; the {FOLDER_NAME} folder is incomplete: delete {folder} and "
                            "unpack the archive again (or pass --download)")
        actual = file_md5(path)
        if actual != md5:
            raise DataError(f"{path}: md5 {actual} does not match the expected {md5}; the file is corrupt or "
                            f"was changed after unpacking: delete {folder} and unpack the archive again "
                            "(or pass --download)")
    return folder


def locate(data_dir: Path, *, download_missing: bool = False, url: str = CIFAR_URL, md5: str = CIFAR_MD5,
           verify: bool = True) -> Path:
    """The `cifar-10-batches-py` folder under data_dir: already unpacked, unpacked from the archive there,
    or downloaded first when asked; every file md5-checked unless `verify` is False."""
    for candidate in (data_dir / FOLDER_NAME, data_dir):
        if _is_batches_folder(candidate):
            return verify_folder(candidate) if verify else candidate
    archive = data_dir / ARCHIVE_NAME
    if not archive.is_file():
        if not download_missing:
            raise DataError(f"no CIFAR-10 in {data_dir}: expected {data_dir / FOLDER_NAME}/ or "
                            f"{archive}; pass --download to fetch it, or --synthetic for a generated set")
        download(url, archive, md5)
    folder = extract(archive, data_dir, md5)
    return verify_folder(folder) if verify else folder


def read_batch(path: Path) -> Split:
    """One batch file, checked for the format so that a wrong file fails with its name, not a shape error."""
    if not path.is_file():
        raise DataError(f"{path}: missing; the {FOLDER_NAME} folder is incomplete (expected "
                        f"{', '.join(TRAIN_FILES)}, {TEST_FILE})")
    try:
        with path.open("rb") as handle:
            batch = pickle.load(handle, encoding="latin1")
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError) as exc:
        raise DataError(f"{path}: not a CIFAR-10 batch file (unpickling failed: {exc})") from None
    if not isinstance(batch, dict) or "data" not in batch or "labels" not in batch:
        raise DataError(f"{path}: not a CIFAR-10 batch file (expected a dict with 'data' and 'labels')")
    data = np.asarray(batch["data"])
    labels = np.asarray(batch["labels"], dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != IMAGE_BYTES:
        raise DataError(f"{path}: 'data' is {data.dtype} {tuple(data.shape)}, expected uint8 N x {IMAGE_BYTES}")
    if labels.shape != (data.shape[0],):
        raise DataError(f"{path}: {len(labels)} labels for {data.shape[0]} images")
    if len(labels) and (labels.min() < 0 or labels.max() >= len(CLASSES)):
        raise DataError(f"{path}: labels outside 0..{len(CLASSES) - 1}")
    return Split(images=data.reshape(-1, *IMAGE_SHAPE), labels=labels)


def read_classes(folder: Path) -> tuple[str, ...]:
    names = _meta(folder).get("label_names")
    return tuple(names) if names else CLASSES


def read_folder(folder: Path) -> Cifar10:
    parts = [read_batch(folder / name) for name in TRAIN_FILES]
    train = Split(images=np.concatenate([p.images for p in parts]), labels=np.concatenate([p.labels for p in parts]))
    return Cifar10(train=train, test=read_batch(folder / TEST_FILE), classes=read_classes(folder), folder=folder)


def load(data_dir: Path, *, download_missing: bool = False, url: str = CIFAR_URL, md5: str = CIFAR_MD5) -> Cifar10:
    return read_folder(locate(data_dir, download_missing=download_missing, url=url, md5=md5))


def _write_pickle(path: Path, payload: dict) -> None:
    partial = path.with_name(path.name + ".part")
    with partial.open("wb") as handle:
        pickle.dump(payload, handle, protocol=2)
    partial.replace(path)


def synthetic_images(count: int, seed: int, *, pixel_noise: float = SYNTHETIC_PIXEL_NOISE,
                     label_noise: float = SYNTHETIC_LABEL_NOISE) -> Split:
    """A set that only a working trainer learns. Each class is a fixed smooth colour pattern, shown shifted
    by up to 4 pixels, with random brightness, random contrast and random polarity (the pattern or its
    negative), under per-pixel noise. The polarity makes every class's mean image flat, so no linear function
    of the pixels tells the classes apart: it takes learned convolutional features. Exactly `label_noise` of
    the labels name another class, so the best accuracy possible is 1 - label_noise (accuracy_ceiling)."""
    rng = np.random.default_rng(seed)
    pattern_rng = np.random.default_rng(1234)  # the same class patterns for every split and seed
    coarse = pattern_rng.normal(size=(len(CLASSES), 3, 5, 5))
    patterns = coarse.repeat(8, axis=2).repeat(8, axis=3)[:, :, :36, :36]  # 36x36 so shifts stay inside
    patterns = (patterns - patterns.mean(axis=(1, 2, 3), keepdims=True)) / patterns.std(axis=(1, 2, 3), keepdims=True)
    patterns = patterns.astype(np.float32)
    labels = rng.integers(0, len(CLASSES), size=count)
    shifts = rng.integers(0, 5, size=(count, 2))
    contrast = rng.uniform(20.0, 50.0, size=count) * rng.choice([-1.0, 1.0], size=count)
    brightness = rng.uniform(90.0, 160.0, size=count)
    images = np.empty((count, *IMAGE_SHAPE), dtype=np.uint8)
    for start in range(0, count, SYNTHETIC_CHUNK):
        rows = slice(start, min(count, start + SYNTHETIC_CHUNK))
        chunk = np.empty((rows.stop - rows.start, *IMAGE_SHAPE), dtype=np.float32)
        for dy in range(5):
            for dx in range(5):
                chosen = (shifts[rows, 0] == dy) & (shifts[rows, 1] == dx)
                chunk[chosen] = patterns[labels[rows][chosen], :, dy:dy + 32, dx:dx + 32]
        chunk *= contrast[rows].astype(np.float32).reshape(-1, 1, 1, 1)
        chunk += brightness[rows].astype(np.float32).reshape(-1, 1, 1, 1)
        chunk += pixel_noise * rng.standard_normal(size=chunk.shape, dtype=np.float32)
        images[rows] = np.clip(chunk, 0, 255).round().astype(np.uint8)
    wrong = rng.permutation(count)[:round(label_noise * count)]
    labels[wrong] = (labels[wrong] + rng.integers(1, len(CLASSES), size=len(wrong))) % len(CLASSES)
    return Split(images=images, labels=labels.astype(np.int64))


def _meta(folder: Path) -> dict:
    """batches.meta's content; empty when it is missing or unreadable (the md5 check then names it)."""
    try:
        with (folder / META_FILE).open("rb") as handle:
            loaded = pickle.load(handle, encoding="latin1")
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def is_synthetic(folder: Path) -> bool:
    return bool(_meta(folder).get("synthetic"))


def accuracy_ceiling(folder: Path) -> float | None:
    """The best test accuracy the set allows: 1 - its label noise for a synthetic set; None for the real one."""
    meta = _meta(folder)
    return round(1.0 - float(meta.get("label_noise", 0.0)), 4) if meta.get("synthetic") else None


def write_synthetic(into: Path, *, train_size: int = 50_000, test_size: int = 10_000, seed: int = 0) -> Path:
    """Write a generated set as a `cifar-10-batches-py` folder under `into`, its files' md5s recorded in
    batches.meta; returns the folder."""
    folder = into / FOLDER_NAME
    if _is_batches_folder(folder) and not is_synthetic(folder):
        raise DataError(f"{folder} holds a real CIFAR-10 set; --synthetic will not overwrite it: pass another "
                        "--data-dir")
    folder.mkdir(parents=True, exist_ok=True)
    train = synthetic_images(train_size, seed)
    test = synthetic_images(test_size, seed + 1)
    bounds = np.linspace(0, train_size, len(TRAIN_FILES) + 1).astype(int)
    for index, name in enumerate(TRAIN_FILES):
        rows = slice(bounds[index], bounds[index + 1])
        _write_pickle(folder / name, {
            "batch_label": f"synthetic training batch {index + 1} of {len(TRAIN_FILES)}",
            "labels": train.labels[rows].tolist(),
            "data": train.images[rows].reshape(-1, IMAGE_BYTES),
            "filenames": [f"synthetic_{i}.png" for i in range(bounds[index], bounds[index + 1])],
        })
    _write_pickle(folder / TEST_FILE, {
        "batch_label": "synthetic testing batch 1 of 1",
        "labels": test.labels.tolist(),
        "data": test.images.reshape(-1, IMAGE_BYTES),
        "filenames": [f"synthetic_test_{i}.png" for i in range(test_size)],
    })
    _write_pickle(folder / META_FILE, {
        "label_names": list(CLASSES), "num_cases_per_batch": int(bounds[1]), "num_vis": IMAGE_BYTES,
        "synthetic": True, "label_noise": SYNTHETIC_LABEL_NOISE,
        "md5": {name: file_md5(folder / name) for name in (*TRAIN_FILES, TEST_FILE)},
    })
    return folder
