"""A bundle is untrusted input and a closed world: its manifest comes from a disk or another machine, and its folder
may hold anything a file system can.

- bundle.json, whatever its bytes or structure, is a checked document or one line in the tool's words (never a
  Python exception, never pydantic's text), quickly;
- `bundle verify` names every symbolic link, hard link with a name outside, named pipe or socket, and every path
  the manifest lists outside the bundle; a file changed to the same size is caught by its sha256; sizes are
  compared before any sha256 is computed;
- `bundle serve` answers only the files the manifest lists, found without following a link, inside the root;
- `bundle build` refuses before it writes anything.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provision.bundle import manifest as manifest_module
from provision.bundle.document import ManifestDocument, read_manifest
from provision.bundle.manifest import MANIFEST, Contents, ensure_key, verify_directory, write_manifest
from provision.bundle.serve import _Handler, servable
from provision.errors import InputError
from tests.support.refusal import assert_refused, run_main

pytestmark = pytest.mark.skipif(shutil.which("gpg") is None or shutil.which("gpgv") is None,
                                reason="signing needs gpg and gpgv")

FILES = {"kubernetes/v1.36/deb/InRelease": "signed index\n", "os/debian/pool/main/c/chrony.deb": "deb\n",
         "calico/v3.31.3/manifests/calico.yaml": "kind: List\n"}
CONTENTS = Contents(platforms=("debian-12",), gpu=False, kubernetes_minor="1.36", kubernetes_version="1.36.4",
                    calico="v3.31.3", addons={"volcano": "v1.15.2"},
                    images={"registry.k8s.io/pause:3.10.1": "pause:3.10.1"}, cifar10=False)


@pytest.fixture(scope="module")
def key_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("key") / "gnupg"
    ensure_key(home)
    return home


@pytest.fixture
def bundle(tmp_path: Path, key_home: Path) -> Path:
    root = tmp_path / "bundle"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    write_manifest(root, CONTENTS, key_home)
    return root


def _document(**changes: Any) -> dict[str, Any]:
    base = {"format": 1, "contents": CONTENTS.as_dict(), "signed_by": "A" * 40,
            "files": {"os/a.deb": {"size": 4, "sha256": "0" * 64}}}
    return base | changes


# --- the manifest as untrusted input -------------------------------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(document=JSON | st.fixed_dictionaries({"format": st.just(1), "contents": JSON, "files": JSON,
                                               "signed_by": JSON}))
def test_any_json_is_a_manifest_or_one_line(document: Any) -> None:
    _one_line_or_document(json.dumps(document).encode())


@settings(max_examples=200, deadline=None)
@given(path=st.text(max_size=40), size=st.integers() | st.booleans() | st.text(max_size=5),
       digest=st.text(max_size=70))
def test_any_file_entry_is_checked_field_by_field(path: str, size: Any, digest: str) -> None:
    document = _one_line_or_document(json.dumps(_document(files={path: {"size": size, "sha256": digest}})).encode())
    if document is not None:
        (name, entry), = document.files.items()
        assert not name.startswith("/") and ".." not in name.split("/") and "" not in name.split("/")
        assert isinstance(entry.size, int) and entry.size >= 0 and len(entry.sha256) == 64


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=200))
def test_any_bytes_are_a_manifest_or_one_line(data: bytes) -> None:
    _one_line_or_document(data)


def _one_line_or_document(data: bytes) -> ManifestDocument | None:
    started = time.monotonic()
    try:
        return read_manifest(data)
    except InputError as exc:
        line = str(exc)
        assert "\n" not in line and line.startswith("bundle.json"), line
        assert "pydantic" not in line and "http" not in line and "Input should" not in line, line
        return None
    finally:
        assert time.monotonic() - started < 2


@pytest.mark.parametrize(("data", "says"), [
    (b"[" * 200_000 + b"]" * 200_000, "nested more than"),
    (b'{"format": 1, "x": ' + b"9" * 5000 + b"}", "not JSON"),
    (b'{"format": NaN}', "not JSON"),
    (json.dumps(_document(format=True)).encode(), "format 'True'"),
    (json.dumps(_document(files={"../../etc/passwd": {"size": 1, "sha256": "0" * 64}})).encode(),
     "not a path inside the bundle"),
    (json.dumps(_document(files={"/etc/passwd": {"size": 1, "sha256": "0" * 64}})).encode(), "inside the bundle"),
    (json.dumps(_document(files={"os//a": {"size": 1, "sha256": "0" * 64}})).encode(), "inside the bundle"),
    (json.dumps(_document(files={"os/a": {"size": -1, "sha256": "0" * 64}})).encode(), "below its least value"),
    (json.dumps(_document(files={"os/a": {"size": True, "sha256": "0" * 64}})).encode(), "must be a whole number"),
    (json.dumps(_document(files={"os/a": {"size": 1, "sha256": "Z" * 64}})).encode(), "not a sha256"),
    (json.dumps(_document(files=[])).encode(), "files: '[]' must be a mapping"),
    (json.dumps(_document(extra=1)).encode(), "extra: is not a field"),
    (json.dumps(_document(contents={**CONTENTS.as_dict(), "calico": "{{ lookup('pipe', 'id') }}"})).encode(),
     "contents.calico"),
    (json.dumps(_document(contents={**CONTENTS.as_dict(), "images": {"a\nb:1": "x:1"}})).encode(), "contents.images"),
    (json.dumps(_document(contents={**CONTENTS.as_dict(), "gpu": "yes"})).encode(), "contents.gpu"),
], ids=["deep", "huge-number", "nan", "format-true", "climbing-path", "absolute-path", "double-slash",
        "negative-size", "bool-size", "bad-sha256", "files-list", "unknown-field", "template", "newline-image",
        "gpu-text"])
def test_a_hostile_manifest_is_one_line_naming_the_field(data: bytes, says: str) -> None:
    with pytest.raises(InputError) as refused:
        read_manifest(data)
    assert says in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


def test_an_offline_source_with_a_hostile_manifest_is_refused_in_one_line_before_any_node(
        bundle: Path, tmp_path: Path) -> None:
    (bundle / MANIFEST).write_text(json.dumps(_document(files={"../x": {"size": 1, "sha256": "0" * 64}})))
    inventory, config = tmp_path / "hosts.ini", tmp_path / "cluster.yaml"
    inventory.write_text("[control_plane]\ncp1 ansible_host=10.0.0.1\n")
    config.write_text(f"offline:\n  source: {bundle}\n")
    assert_refused(run_main("up", "-i", str(inventory), "-c", str(config)), "does not verify",
                   "not a path inside the bundle")


def test_an_oversized_manifest_is_refused_by_its_size_before_it_is_read(
        bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest_module, "MAX_MANIFEST_BYTES", 64)
    verdict = verify_directory(bundle)
    size = (bundle / MANIFEST).stat().st_size
    assert any(f"bundle.json is {size} bytes, more than the 64" in p for p in verdict.problems), verdict.problems


# --- verify: a closed world, cheap checks first -----------------------------------------------------------------


def test_a_file_tampered_to_the_same_size_is_caught_by_its_sha256(bundle: Path) -> None:
    """35.6: the mutation audit's case. Same size, same modification time: only the sha256 tells."""
    target = bundle / "os/debian/pool/main/c/chrony.deb"
    times = target.stat()
    target.write_text("DEB\n")
    os.utime(target, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert target.stat().st_size == len(FILES["os/debian/pool/main/c/chrony.deb"])
    problems = verify_directory(bundle).problems
    assert problems == ("changed: os/debian/pool/main/c/chrony.deb (its sha256 is not the manifest's)",)
    outcome = run_main("bundle", "verify", str(bundle))
    assert outcome.code == 2 and "changed: os/debian/pool/main/c/chrony.deb" in outcome.stderr + outcome.stdout


def test_sizes_are_compared_before_any_sha256_is_computed(bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hashed: list[Path] = []
    real = manifest_module.sha256_file
    monkeypatch.setattr(manifest_module, "sha256_file", lambda path: hashed.append(path) or real(path))
    (bundle / "kubernetes/v1.36/deb/InRelease").write_text("a much longer index than before\n")
    problems = verify_directory(bundle).problems
    assert problems == ("changed: kubernetes/v1.36/deb/InRelease (its size is not the manifest's)",)
    assert hashed == []
    assert verify_directory(bundle.parent / "bundle").problems  # still refused on a second look
    (bundle / "kubernetes/v1.36/deb/InRelease").write_text(FILES["kubernetes/v1.36/deb/InRelease"])
    assert verify_directory(bundle).ok and len(hashed) == len(FILES)


@pytest.mark.parametrize("harm", ["symlink-out", "symlink-in", "symlink-dir", "fifo", "socket", "hard-link-out"])
def test_verify_refuses_anything_but_the_bundles_own_files(bundle: Path, tmp_path: Path, harm: str) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("deb\n")
    target = bundle / "os/debian/pool/main/c/chrony.deb"
    expected = {"symlink-out": "link: os/debian/pool/main/c/chrony.deb", "symlink-in": "link: os/debian/pool/main/c/chrony.deb",
                "symlink-dir": "link: os/debian/pool/main/c", "fifo": "not a file: os/debian/pool/main/c/chrony.deb",
                "socket": "not a file: os/debian/pool/main/c/chrony.deb",
                "hard-link-out": "hard link: os/debian/pool/main/c/chrony.deb"}[harm]
    if harm in ("symlink-out", "symlink-in", "fifo", "socket", "hard-link-out"):
        target.unlink()
    if harm == "symlink-out":
        target.symlink_to(outside)
    elif harm == "symlink-in":
        target.symlink_to(bundle / "kubernetes/v1.36/deb/InRelease")
    elif harm == "symlink-dir":
        shutil.move(bundle / "os/debian/pool/main/c", tmp_path / "c")
        (bundle / "os/debian/pool/main/c").symlink_to(tmp_path / "c")
    elif harm == "fifo":
        os.mkfifo(target)
    elif harm == "socket":
        # Bound by its name from inside its folder: a socket's path is limited to 108 bytes, and a test's
        # temporary folder under xdist can be longer than that.
        here = Path.cwd()
        os.chdir(target.parent)
        try:
            with socket.socket(socket.AF_UNIX) as server:
                server.bind(target.name)
        finally:
            os.chdir(here)
    else:
        os.link(outside, target)
    verdict = verify_directory(bundle)
    assert any(p.startswith(expected) for p in verdict.problems), verdict.problems
    outcome = run_main("bundle", "verify", str(bundle))
    assert outcome.code == 2 and expected in outcome.stdout + outcome.stderr


def test_the_bundles_own_hard_links_to_its_build_store_are_its_own(bundle: Path, key_home: Path) -> None:
    store = bundle / ".build" / "store"
    store.mkdir(parents=True)
    os.link(bundle / "os/debian/pool/main/c/chrony.deb", store / "chrony")
    assert verify_directory(bundle).ok, verify_directory(bundle).problems


def test_a_symlinked_manifest_is_refused(bundle: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_bytes((bundle / MANIFEST).read_bytes())
    (bundle / MANIFEST).unlink()
    (bundle / MANIFEST).symlink_to(tmp_path / "elsewhere.json")
    assert not verify_directory(bundle).ok


# --- serve: only the manifest's files, inside the root ------------------------------------------------------------

LISTED = frozenset([*FILES, MANIFEST])


@pytest.mark.parametrize("request_path", [
    "/../outside.txt", "/%2e%2e/outside.txt", "/os/../../outside.txt", "/os/debian/../../../outside.txt",
    "//etc/passwd", "/etc/passwd", "/.build/store/x", "/registry/docker/x", "/os/", "/", "/os/debian/pool/main/c",
    "/%00", "/%ff", "/kubernetes/v1.36/deb/InRelease/..", "/./", "/os/./../outside.txt", "/os/.//debian",
])
def test_serve_never_answers_outside_the_manifest(bundle: Path, request_path: str) -> None:
    (bundle.parent / "outside.txt").write_text("secret\n")
    assert servable(bundle, LISTED, request_path) is None


def test_serve_answers_a_listed_file_and_refuses_it_once_it_is_a_link(bundle: Path, tmp_path: Path) -> None:
    name = "os/debian/pool/main/c/chrony.deb"
    assert servable(bundle, LISTED, f"/{name}") == bundle / name
    assert servable(bundle, LISTED, "/os/debian/pool/main/c/chrony%2Edeb?x=1") == bundle / name
    # apt's request for a flat repository's `Filename: ./chrony.deb`: a "." segment names its own folder.
    assert servable(bundle, LISTED, "/os/debian/pool/main/c/./chrony.deb") == bundle / name
    assert servable(bundle, LISTED, "/./bundle.json") == bundle / MANIFEST
    (bundle / name).unlink()
    (bundle / name).symlink_to("/etc/passwd")
    assert servable(bundle, LISTED, f"/{name}") is None
    (bundle / name).unlink()
    (bundle / name).write_text(FILES[name])
    shutil.move(bundle / "os/debian", tmp_path / "debian")
    (bundle / "os/debian").symlink_to(tmp_path / "debian")
    assert (bundle / name).is_file() and servable(bundle, LISTED, f"/{name}") is None


@pytest.fixture
def http_server(bundle: Path) -> Iterator[str]:
    import functools
    import http.server

    handler = type("Handler", (_Handler,), {"root": bundle, "listed": LISTED})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(bundle)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_http_server_answers_listed_files_and_404_for_the_rest(http_server: str, bundle: Path) -> None:
    (bundle.parent / "outside.txt").write_text("secret\n")
    with urllib.request.urlopen(f"{http_server}/os/debian/pool/main/c/chrony.deb", timeout=5) as answer:
        assert answer.read() == b"deb\n"
    for path in ("/../outside.txt", "/%2e%2e/outside.txt", "/os/", "/.build/x"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{http_server}{path}", timeout=5)
        assert refused.value.code == 404, path


# --- build: nothing written before everything that can refuse has -------------------------------------------------

def test_a_build_refused_for_its_platform_writes_nothing(tmp_path: Path) -> None:
    from provision.bundle.build import BuildRequest, build_bundle
    from provision.inputs.platforms import platform_named
    from provision.inputs.settings import parse_settings

    rocky = platform_named("rocky-9")
    out = tmp_path / "out"
    with pytest.raises(InputError, match="mirrors.os_repo"):
        build_bundle(parse_settings({}), BuildRequest(platforms=(rocky,), gpu=False, output=out,  # type: ignore[arg-type]
                                                      key_home=tmp_path / "key"))
    assert not out.exists() and not (tmp_path / "key").exists()


@pytest.mark.parametrize("where", ["full", "home", "etc"])
def test_bundle_build_refuses_a_folder_that_is_not_its_own_before_writing(tmp_path: Path, where: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "thesis.tex").write_text("years of work\n")
    out = {"full": tmp_path / "full", "home": tmp_path / "home", "etc": Path("/etc")}[where]
    before = sorted(p.name for p in out.iterdir())
    outcome = run_main("bundle", "build", "--for", "debian-12", "-o", str(out))
    assert outcome.code == 2 and len(outcome.lines) == 1 and "--out" in outcome.lines[0], outcome
    assert sorted(p.name for p in out.iterdir()) == before
