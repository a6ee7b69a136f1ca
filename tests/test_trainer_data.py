"""The trainer's data: the official on-disk format, the archive's md5, the download path (against a local
server), and an error that says what to do for each way the data can be missing or wrong."""
from __future__ import annotations

import hashlib
import io
import pickle
import socket
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from provision.resources import TRAINER_DIR

sys.path.insert(0, str(TRAINER_DIR))
import cifar_data


def make_archive(tmp_path: Path, train_size: int = 100, test_size: int = 20) -> tuple[Path, str]:
    """A small tarball laid out like cifar-10-python.tar.gz, and its md5."""
    source = tmp_path / "source"
    cifar_data.write_synthetic(source, train_size=train_size, test_size=test_size, seed=3)
    archive = tmp_path / "archive" / cifar_data.ARCHIVE_NAME
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source / cifar_data.FOLDER_NAME, arcname=cifar_data.FOLDER_NAME)
    return archive, hashlib.md5(archive.read_bytes()).hexdigest()


@pytest.fixture
def http_server() -> Iterator[tuple[str, dict[str, bytes]]]:
    """127.0.0.1 on an ephemeral port serving the bytes put into the returned dict, by path."""
    files: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", files
    server.shutdown()
    server.server_close()


def test_the_synthetic_set_is_written_in_the_official_format(tmp_path: Path) -> None:
    folder = cifar_data.write_synthetic(tmp_path, train_size=250, test_size=50, seed=1)
    assert folder == tmp_path / "cifar-10-batches-py"
    assert sorted(p.name for p in folder.iterdir()) == sorted([*cifar_data.TRAIN_FILES, "test_batch", "batches.meta"])
    with (folder / "data_batch_1").open("rb") as handle:
        raw = pickle.load(handle, encoding="latin1")
    # What torchvision and the CIFAR-10 page describe: uint8 rows of 3072 channel-major values, int labels.
    assert isinstance(raw["data"], np.ndarray) and raw["data"].dtype == np.uint8 and raw["data"].shape == (50, 3072)
    assert isinstance(raw["labels"], list) and all(isinstance(x, int) and 0 <= x < 10 for x in raw["labels"])
    data = cifar_data.read_folder(folder)
    assert data.train.images.shape == (250, 3, 32, 32) and len(data.test) == 50
    assert data.classes == cifar_data.CLASSES
    assert len(set(data.train.labels.tolist())) == 10


def test_a_synthetic_set_never_overwrites_a_real_one(tmp_path: Path) -> None:
    archive, md5 = make_archive(tmp_path)
    real = cifar_data.locate(archive.parent, md5=md5)
    (real / cifar_data.META_FILE).write_bytes(pickle.dumps({"label_names": list(cifar_data.CLASSES)}))  # as shipped
    before = (real / "test_batch").read_bytes()
    with pytest.raises(cifar_data.DataError, match="holds a real CIFAR-10 set; --synthetic will not overwrite it"):
        cifar_data.write_synthetic(archive.parent, train_size=20, test_size=10)
    assert (real / "test_batch").read_bytes() == before
    # A synthetic set is regenerated in place without complaint.
    cifar_data.write_synthetic(tmp_path / "synthetic", train_size=20, test_size=10)
    cifar_data.write_synthetic(tmp_path / "synthetic", train_size=30, test_size=10)
    assert len(cifar_data.read_folder(tmp_path / "synthetic" / cifar_data.FOLDER_NAME).train) == 30


def test_the_synthetic_set_is_the_same_for_the_same_seed_and_differs_between_splits(tmp_path: Path) -> None:
    a = cifar_data.synthetic_images(64, seed=5)
    b = cifar_data.synthetic_images(64, seed=5)
    c = cifar_data.synthetic_images(64, seed=6)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.labels, b.labels)
    assert not np.array_equal(a.images, c.images)


def test_missing_data_says_where_it_looked_and_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(cifar_data.DataError) as error:
        cifar_data.locate(tmp_path)
    message = str(error.value)
    assert str(tmp_path / "cifar-10-batches-py") in message and str(tmp_path / "cifar-10-python.tar.gz") in message
    assert "--download" in message and "--synthetic" in message


def test_an_unpacked_folder_is_found_directly_or_under_the_data_dir(tmp_path: Path) -> None:
    folder = cifar_data.write_synthetic(tmp_path, train_size=20, test_size=10)
    assert cifar_data.locate(tmp_path) == folder
    assert cifar_data.locate(folder) == folder


def test_the_official_tarball_in_the_data_dir_is_checked_and_unpacked(tmp_path: Path) -> None:
    archive, md5 = make_archive(tmp_path)
    data = cifar_data.load(archive.parent, md5=md5)
    assert len(data.train) == 100 and len(data.test) == 20
    assert (archive.parent / "cifar-10-batches-py" / "test_batch").is_file()


def test_a_tarball_with_the_wrong_md5_is_refused_before_unpacking(tmp_path: Path) -> None:
    archive, _ = make_archive(tmp_path)
    with pytest.raises(cifar_data.DataError, match=r"md5 [0-9a-f]{32} does not match the expected "
                                                   + cifar_data.CIFAR_MD5):
        cifar_data.locate(archive.parent)  # the official md5: a home-made archive cannot match it
    assert not (archive.parent / "cifar-10-batches-py").exists()


def test_a_tarball_that_escapes_its_folder_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / cifar_data.ARCHIVE_NAME
    with tarfile.open(archive, "w:gz") as tar:
        payload = b"owned"
        info = tarfile.TarInfo("../outside.txt")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    with pytest.raises(cifar_data.DataError, match="not a readable tar.gz archive"):
        cifar_data.locate(tmp_path, md5=md5)
    assert not (tmp_path.parent / "outside.txt").exists()


def test_download_fetches_the_archive_checks_its_md5_and_unpacks_it(tmp_path: Path, http_server) -> None:
    url, files = http_server
    archive, md5 = make_archive(tmp_path)
    files["/cifar-10-python.tar.gz"] = archive.read_bytes()
    data_dir = tmp_path / "data"
    data = cifar_data.load(data_dir, download_missing=True, url=f"{url}/cifar-10-python.tar.gz", md5=md5)
    assert len(data.train) == 100
    assert (data_dir / cifar_data.ARCHIVE_NAME).read_bytes() == archive.read_bytes()


def test_a_download_with_the_wrong_md5_leaves_nothing_behind(tmp_path: Path, http_server) -> None:
    url, files = http_server
    files["/cifar-10-python.tar.gz"] = b"not the archive you are looking for"
    data_dir = tmp_path / "data"
    with pytest.raises(cifar_data.DataError, match="the download is corrupt or not the CIFAR-10 python archive"):
        cifar_data.locate(data_dir, download_missing=True, url=f"{url}/cifar-10-python.tar.gz",
                          md5=cifar_data.CIFAR_MD5)
    assert list(data_dir.iterdir()) == []


def test_a_source_without_the_archive_fails_with_the_fix(tmp_path: Path, http_server) -> None:
    url, _ = http_server
    with pytest.raises(cifar_data.DataError, match=r"could not download .*: HTTP 404 Not Found; .*--download-url"):
        cifar_data.locate(tmp_path, download_missing=True, url=f"{url}/missing.tar.gz")


def test_an_unreachable_source_fails_at_once(tmp_path: Path) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: the connection is refused
    with pytest.raises(cifar_data.DataError, match="could not download .*Connection refused"):
        cifar_data.locate(tmp_path, download_missing=True, url=f"http://127.0.0.1:{port}/cifar-10-python.tar.gz")


def test_a_server_that_never_answers_is_abandoned_in_bounded_time(tmp_path: Path) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the connection, never sends a byte
    try:
        started = time.monotonic()
        with pytest.raises(cifar_data.DataError, match="could not download"):
            cifar_data.download(f"http://127.0.0.1:{silent.getsockname()[1]}/x.tar.gz", tmp_path / "x.tar.gz",
                                "0" * 32, stall_timeout_s=0.5)
        assert time.monotonic() - started < 5
    finally:
        silent.close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("content", "complaint"), [
    (b"\x00garbage", "unpickling failed"),
    (pickle.dumps({"labels": [1]}), "expected a dict with 'data' and 'labels'"),
    (pickle.dumps({"data": np.zeros((2, 100), np.uint8), "labels": [0, 1]}), "expected uint8 N x 3072"),
    (pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0]}), "1 labels for 2 images"),
    (pickle.dumps({"data": np.zeros((1, 3072), np.uint8), "labels": [10]}), "labels outside 0..9"),
])
def test_a_file_that_is_not_a_cifar_batch_is_named_with_what_is_wrong(tmp_path: Path, content: bytes,
                                                                      complaint: str) -> None:
    path = tmp_path / "data_batch_1"
    path.write_bytes(content)
    with pytest.raises(cifar_data.DataError, match=complaint) as error:
        cifar_data.read_batch(path)
    assert str(error.value).startswith(str(path))


def test_an_incomplete_folder_names_the_missing_file(tmp_path: Path) -> None:
    folder = cifar_data.write_synthetic(tmp_path, train_size=20, test_size=10)
    (folder / "data_batch_4").unlink()
    with pytest.raises(cifar_data.DataError, match="data_batch_4: missing"):
        cifar_data.read_folder(folder)


def official_looking_folder(tmp_path: Path) -> Path:
    """A folder laid out like the official one (its batches.meta as shipped, without the synthetic mark),
    whose files cannot have the official md5s."""
    folder = cifar_data.write_synthetic(tmp_path, train_size=20, test_size=10)
    (folder / cifar_data.META_FILE).write_bytes(pickle.dumps({"label_names": list(cifar_data.CLASSES)}))
    return folder


def test_an_unpacked_folder_is_checked_against_the_official_md5s_before_use(tmp_path: Path) -> None:
    folder = official_looking_folder(tmp_path)
    with pytest.raises(cifar_data.DataError) as error:
        cifar_data.locate(tmp_path)
    message = str(error.value)
    assert message.startswith(str(folder / cifar_data.TRAIN_FILES[0]))  # names the first file that differs
    assert "does not match the expected " + cifar_data.OFFICIAL_MD5["data_batch_1"] in message
    assert "delete" in message and "--download" in message
    assert cifar_data.locate(tmp_path, verify=False) == folder  # the check is what refuses it


def test_a_tampered_batch_in_a_synthetic_folder_is_refused_by_name(tmp_path: Path) -> None:
    folder = cifar_data.write_synthetic(tmp_path, train_size=50, test_size=10)
    assert cifar_data.locate(tmp_path) == folder  # as written: every md5 recorded in batches.meta matches
    raw = pickle.loads((folder / "data_batch_3").read_bytes(), encoding="latin1")
    raw["labels"][0] = (raw["labels"][0] + 1) % 10  # one label changed, the file still a valid batch
    (folder / "data_batch_3").write_bytes(pickle.dumps(raw, protocol=2))
    with pytest.raises(cifar_data.DataError, match=r"data_batch_3: md5 [0-9a-f]{32} does not match the expected"):
        cifar_data.locate(tmp_path)
    (folder / "data_batch_3").unlink()
    with pytest.raises(cifar_data.DataError, match="data_batch_3: missing"):
        cifar_data.locate(tmp_path)


def test_the_synthetic_sets_labels_are_wrong_in_exactly_5_percent_so_the_ceiling_is_known(tmp_path: Path) -> None:
    clean = cifar_data.synthetic_images(400, seed=2, label_noise=0.0)
    noisy = cifar_data.synthetic_images(400, seed=2)
    assert np.array_equal(clean.images, noisy.images)
    assert int((clean.labels != noisy.labels).sum()) == 20  # 5% of 400, each moved to another class
    folder = cifar_data.write_synthetic(tmp_path, train_size=20, test_size=10)
    assert cifar_data.accuracy_ceiling(folder) == 0.95
    assert cifar_data.accuracy_ceiling(official_looking_folder(tmp_path / "real")) is None


def test_no_linear_function_of_the_pixels_learns_the_synthetic_set() -> None:
    # Ridge regression on the raw pixels, the best linear classifier in closed form: near chance (0.10),
    # because each image shows its class pattern or its negative. A trainer must learn features to pass.
    train_split, test_split = cifar_data.synthetic_images(2000, seed=0), cifar_data.synthetic_images(500, seed=1)
    x = train_split.images.reshape(len(train_split), -1).astype(np.float64)
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-6
    x = (x - mean) / std
    weights = np.linalg.solve(x.T @ x + 100.0 * np.eye(x.shape[1]), x.T @ np.eye(10)[train_split.labels])
    x_test = (test_split.images.reshape(len(test_split), -1) - mean) / std
    assert ((x_test @ weights).argmax(axis=1) == test_split.labels).mean() < 0.2
