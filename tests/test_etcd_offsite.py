"""Snapshots off the nodes (provision/nodes/etcd/offsite.py): the certificates sealed with the operator's key
(AES-256-GCM, scrypt), refused when the key, the file or the snapshot it belongs to is not theirs; the store's
URL and the key file judged before anything runs; and a snapshot's objects sent to, and brought back from, a real
S3 server run here (moto's, from the test extras), byte for byte."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provision.errors import BootstrapError, InputError
from provision.nodes.etcd.offsite import (
    PKI_SUFFIX,
    S3Location,
    Store,
    download,
    object_names,
    read_passphrase,
    seal,
    unseal,
    upload,
)

PASSPHRASE = b"correct horse battery staple"
NAME = "cp1-20261125T101500Z-r48213.db"


def test_sealed_certificates_open_only_with_their_key_and_their_snapshot() -> None:
    archive = os.urandom(3000)
    blob = seal(archive, PASSPHRASE, NAME)
    assert archive not in blob and unseal(blob, PASSPHRASE, NAME) == archive
    with pytest.raises(BootstrapError, match="does not open with etcd.pki_key_file's key"):
        unseal(blob, b"another passphrase, long enough", NAME)
    with pytest.raises(BootstrapError, match="belongs to another snapshot"):
        unseal(blob, PASSPHRASE, "cp1-20261126T101500Z-r50000.db")
    with pytest.raises(BootstrapError, match="not an archive of certificates sealed by this tool"):
        unseal(b"PK\x03\x04" + blob, PASSPHRASE, NAME)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 3040), st.integers(0, 255))
def test_any_changed_or_cut_byte_is_refused_never_unpacked(position: int, flip: int) -> None:
    blob = bytearray(seal(b"x" * 3000, PASSPHRASE, NAME))
    index = position % len(blob)
    changed = bytes(blob[:index] + bytes([blob[index] ^ (flip or 1)]) + blob[index + 1:])
    for candidate in (changed, bytes(blob[:index])):
        with pytest.raises(BootstrapError):
            unseal(candidate, PASSPHRASE, NAME)


def test_the_key_file_is_the_operators_alone(tmp_path: Path) -> None:
    key = tmp_path / "pki.key"
    with pytest.raises(InputError, match="No such file"):
        read_passphrase(key)
    key.write_bytes(PASSPHRASE + b"\n")
    key.chmod(0o644)
    with pytest.raises(InputError, match=r"readable by others \(mode 644\): `chmod 600"):
        read_passphrase(key)
    key.chmod(0o600)
    assert read_passphrase(key) == PASSPHRASE
    key.write_bytes(b"short\n")
    with pytest.raises(InputError, match="16 characters or more"):
        read_passphrase(key)


@pytest.mark.parametrize("url", ["s3://", "s3://B/x", "s3://ab", "s3://bucket/../etc", "https://bucket/x",
                                 "s3://bucket/a b", "s3://bucket/{{ x }}", "s3://bucket/x\n"])
def test_an_s3_url_that_is_not_one_is_refused_in_one_line(url: str) -> None:
    with pytest.raises(InputError) as refused:
        S3Location.parse(url)
    message = str(refused.value)
    assert message.startswith("etcd.snapshot_target: ") and "\n" not in message
    assert "is not an s3:// URL" in message or "'.' or '..' segment" in message


def test_a_location_names_its_bucket_and_prefix() -> None:
    assert S3Location.parse("s3://etcd-backups/prod/cluster-a/") == S3Location("etcd-backups", "prod/cluster-a")
    assert S3Location.parse("s3://etcd-backups").child("x.db") == "x.db"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1, a bucket in it, and credentials for it in the environment."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    Store(S3Location("backups", ""), endpoint).client().create_bucket(Bucket="backups")
    try:
        yield endpoint
    finally:
        server.stop()


def test_a_snapshot_goes_to_a_real_s3_server_and_comes_back_byte_for_byte(s3: str, tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    files = [here / name for name in object_names(NAME)]
    contents = {files[0].name: os.urandom(200_000), files[1].name: b'{"name": "%s"}' % NAME.encode(),
                files[2].name: seal(b"pki", PASSPHRASE, NAME)}
    for path in files:
        path.write_bytes(contents[path.name])
    store = Store(S3Location.parse("s3://backups/prod/a"), s3)
    assert upload(store, files) == [f"prod/a/{p.name}" for p in files]
    brought = download(store, NAME, there)
    assert [p.name for p in brought] == [p.name for p in files]
    assert all(p.read_bytes() == contents[p.name] and oct(p.stat().st_mode & 0o777) == "0o600" for p in brought)
    assert unseal((there / (NAME.removesuffix(".db") + PKI_SUFFIX)).read_bytes(), PASSPHRASE, NAME) == b"pki"
    with pytest.raises(BootstrapError, match=r"s3://backups/prod/a/cp1-20991231T000000Z-r1.db: (404|NoSuchKey)"):
        download(store, "cp1-20991231T000000Z-r1.db", there)
    assert not list(there.glob("*.part"))


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.0.0.1\ncp2 ansible_host=10.0.0.2\ncp3 ansible_host=10.0.0.3\n")
    return hosts


@pytest.mark.parametrize(("arguments", "names"), [
    ((), ("name the snapshot", "or --from s3://")),
    (("snap.db", "--from", "s3://backups/x.db"), ("one of the two",)),
    (("--from", "s3://Backups/x.db"), ("'--from'", "is not an s3:// URL")),
    (("--from", "s3://backups/prod/"), ("--from:", "does not end with a snapshot's name")),
    (("--from", "s3://backups/prod/../x.db"), ("'--from'", "'.' or '..' segment")),
])
def test_restore_from_a_store_refuses_a_bad_source_before_any_connection(
        inventory: Path, arguments: tuple[str, ...], names: tuple[str, ...]) -> None:
    from tests.support.refusal import assert_refused, run_main

    assert_refused(run_main("etcd", "restore", *arguments, "--yes", "--inventory", str(inventory)), *names)


def test_a_snapshot_sent_off_refuses_a_key_file_others_can_read_before_any_node(
        inventory: Path, tmp_path: Path) -> None:
    from tests.support.refusal import assert_refused, run_main

    key = tmp_path / "pki.key"
    key.write_bytes(PASSPHRASE + b"\n")
    key.chmod(0o640)
    config = tmp_path / "cluster.yaml"
    config.write_text(f"etcd:\n  snapshot_target: s3://backups/prod\n  pki_key_file: {key}\n")
    assert_refused(run_main("etcd", "snapshot", "--inventory", str(inventory), "--config", str(config)),
                   "etcd.pki_key_file", "readable by others", "chmod 600")
    config.write_text("etcd:\n  snapshot_target: s3://backups/prod\n")
    assert_refused(run_main("etcd", "snapshot", "--inventory", str(inventory), "--config", str(config)),
                   "set pki_key_file too")


def test_the_sealed_payload_holds_one_archive_per_control_plane_and_nothing_else() -> None:
    from provision.phases.etcd_pki import node_archives

    assert node_archives(b'{"nodes": {"cp1": "H4sIAAAA", "cp2": "H4sI+/=="}}') == {"cp1": "H4sIAAAA", "cp2": "H4sI+/=="}
    for payload in (b"not json", b'{"nodes": []}', b'{"nodes": {"cp1": "$(reboot)"}}', b'{"nodes": {"cp1": 1}}'):
        with pytest.raises(BootstrapError, match="hold no archive per control plane"):
            node_archives(payload)
