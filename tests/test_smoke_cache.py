"""The data cache and the copy-back, run for real where they can run here: the init container's fetch script
fills a cache directory once even when two pods of a node start together, and stops at its own deadline; the
collector pod's server lists and serves a run's files and removes them when stopped; the driver copies them
through the API server's pod proxy (the stand-in's) into `smoke-test --save DIR`, from which
`python -m trainer.infer` runs."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from provision.cli.app import app
from provision.inputs.settings import parse_settings
from provision.resources import TRAINER_DIR
from provision.smoke.driver import Timings, run_smoke_test
from provision.smoke.manifests import DATA_DIR, SmokeSpec, collector_pod, fetch_command
from tests.support.apiserver import FakeApiServer, RecordedRequest, Response
from tests.support.kube_objects import pod
from tests.support.smoke_run import EPOCH_LOG, IMAGE, JOB, METRICS, NS, Cluster, job, succeeded
from tests.support.smoke_run import spec as smoke_spec

sys.path.insert(0, str(TRAINER_DIR))
import cifar_data  # the trainer's own module, as the pods import it

FAST = Timings(poll_s=0.0, unschedulable_grace_s=0.0, image_pull_grace_s=0.0, deadline_margin_s=5.0,
               request_timeout_s=5.0, collect_timeout_s=5.0)


@pytest.fixture
def archive_server(tmp_path: Path) -> Iterator[tuple[str, str, list[str]]]:
    """A small archive in CIFAR-10's layout served on 127.0.0.1 (URL, md5, the paths requested); /stall hangs."""
    source = tmp_path / "source"
    cifar_data.write_synthetic(source, train_size=50, test_size=20, seed=3)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source / cifar_data.FOLDER_NAME, arcname=cifar_data.FOLDER_NAME)
    body, requested = archive.read_bytes(), []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requested.append(self.path)
            if self.path == "/stall":
                time.sleep(30)
                return
            time.sleep(0.5)  # long enough for a second pod to arrive while the first fetches
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", hashlib.md5(body).hexdigest(), requested
    server.shutdown()
    server.server_close()


def fetch(spec: SmokeSpec, cache: Path) -> subprocess.Popen[str]:
    """The init container's command, on this machine: the cache at `cache` instead of the pod's /cache."""
    command = fetch_command(spec).replace(DATA_DIR, str(cache / "cifar10"))
    return subprocess.Popen(["/bin/sh", "-c", command], cwd=TRAINER_DIR, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_pods_of_a_node_fetch_the_archive_once_and_the_next_run_not_at_all(archive_server, tmp_path: Path) -> None:
    url, md5, requested = archive_server
    spec = smoke_spec(dataset="cifar10", cache="hostpath", cifar10_url=f"{url}/cifar.tgz",
                     cifar10_md5=md5, data_timeout_s=60)
    pods = [fetch(spec, tmp_path / "cache") for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in pods]
    assert [p.returncode for p in pods] == [0, 0], outputs
    assert all(f"CIFAR-10 ready in {tmp_path / 'cache' / 'cifar10' / 'cifar-10-batches-py'}" in out for out, _ in outputs)
    assert requested == ["/cifar.tgz"]
    again = fetch(spec, tmp_path / "cache")
    assert again.wait(timeout=60) == 0 and requested == ["/cifar.tgz"]
    # What the trainer then reads (--data-dir /cache/cifar10).
    assert len(cifar_data.read_folder(cifar_data.locate(tmp_path / "cache" / "cifar10")).test) == 20


def test_a_fetch_that_stalls_is_stopped_at_its_own_deadline(archive_server, tmp_path: Path) -> None:
    url, md5, _ = archive_server
    spec = smoke_spec(dataset="cifar10", cache="hostpath", cifar10_url=f"{url}/stall",
                     cifar10_md5=md5, data_timeout_s=2)
    started = time.monotonic()
    stalled = fetch(spec, tmp_path / "cache")
    assert stalled.wait(timeout=60) == 124  # what the verdict reads as a data-fetch timeout
    assert time.monotonic() - started < 20


def test_a_wrong_md5_fails_the_fetch_with_the_trainers_own_words(archive_server, tmp_path: Path) -> None:
    url, _, _ = archive_server
    spec = smoke_spec(dataset="cifar10", cache="hostpath", cifar10_url=f"{url}/x",
                     cifar10_md5="0" * 32, data_timeout_s=60)
    process = fetch(spec, tmp_path / "cache")
    _, err = process.communicate(timeout=60)
    assert process.returncode == 1 and "does not match the expected 00000000" in err


def test_the_collector_serves_a_runs_files_and_removes_them_when_stopped(tmp_path: Path) -> None:
    spec = smoke_spec(cache="hostpath", keep_results=True)
    container = collector_pod(spec, "gpu-1")["spec"]["containers"][0]
    results = tmp_path / "runs" / JOB
    results.mkdir(parents=True)
    (results / "model.pt").write_bytes(b"\x80weights")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-c", container["args"][0], str(results), str(port)])
    try:
        for _ in range(100):
            try:
                index = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/index.json", timeout=2).read())
                break
            except OSError:
                time.sleep(0.1)
        assert index == ["model.pt"]
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/model.pt", timeout=2).read() == b"\x80weights"
    finally:
        os.kill(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    assert not results.exists()


# --- the copy-back, through the stand-in API server ------------------------------------------------------------

def serve_collector(api: FakeApiServer, files: dict[str, bytes]) -> list[dict[str, Any]]:
    """The collector pod: created, Running and ready, serving `files` through the pod proxy."""
    created: list[dict[str, Any]] = []

    def create(request: RecordedRequest) -> Response:
        created.append(request.json)
        return Response(201, request.json)

    ready = pod(f"{JOB}-collect", "gpu-1", {}, namespace=NS, container="collect", image=IMAGE)
    api.add("POST", "/api/v1/namespaces/{ns}/pods", create)
    api.add("GET", "/api/v1/namespaces/{ns}/pods/{name}", ready)
    api.add("DELETE", "/api/v1/namespaces/{ns}/pods/{name}", ready)
    api.add("GET", "/api/v1/namespaces/{ns}/pods/{name}/proxy/index.json", json.dumps(sorted(files)).encode())
    for name, body in files.items():
        api.add("GET", f"/api/v1/namespaces/{{ns}}/pods/{{name}}/proxy/{name}", body)
    return created


def trained_cluster() -> Cluster:
    return Cluster(steps=[(job(("Complete", "", "")), [succeeded(METRICS)], EPOCH_LOG + json.dumps(METRICS) + "\n")])


def test_save_copies_the_model_and_metrics_back_and_the_code_to_use_them(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        trained_cluster().serve(api)
        created = serve_collector(api, {"model.pt": b"\x80weights"})
        verdict = run_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), parse_settings({}), namespace=NS,
                                 timings=FAST, sleep=lambda _: None, save_dir=tmp_path / "results")
        proxied = [r.path for r in api.requests_to("GET") if "/proxy/" in r.path]
        job_pod = next(r.json for r in api.requests_to("POST", "/apis/batch/v1/"))["spec"]["template"]["spec"]
        deleted = [r.path for r in api.requests_to("DELETE")]
    assert verdict.passed and verdict.exit_code == 0 and verdict.save_error is None, verdict
    saved = tmp_path / "results"
    assert (saved / "model.pt").read_bytes() == b"\x80weights"
    assert json.loads((saved / "metrics.json").read_text()) == METRICS  # every field the trainer wrote
    assert json.loads((saved / "verdict.json").read_text())["passed"] is True
    assert {p.name for p in (saved / "trainer").iterdir()} == {p.name for p in TRAINER_DIR.glob("*.py")}
    assert set(verdict.saved) >= {"model.pt", "metrics.json", "verdict.json", "trainer/infer.py"}
    # The collector ran where rank 0 wrote, and was read through the API server's pod proxy.
    assert created[0]["spec"]["nodeName"] == "gpu-1"
    assert proxied == [f"/api/v1/namespaces/{NS}/pods/{JOB}-collect%3A8000/proxy/index.json",
                       f"/api/v1/namespaces/{NS}/pods/{JOB}-collect%3A8000/proxy/model.pt"]
    assert f"/api/v1/namespaces/{NS}/pods/{JOB}-collect" in deleted
    # Rank 0 left its output in the node's cache for it.
    assert {"name": "cache", "hostPath": {"path": "/var/lib/cluster-bootstrap/cache", "type": "DirectoryOrCreate"}} \
        in job_pod["volumes"]
    assert f"cp -p /work/out/* /cache/runs/{JOB}/" in job_pod["containers"][0]["args"][0]


def test_a_run_without_a_model_to_copy_says_so_and_exits_1(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        trained_cluster().serve(api)
        serve_collector(api, {"metrics.json": b"{}"})
        verdict = run_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), parse_settings({}), namespace=NS,
                                 timings=FAST, sleep=lambda _: None, save_dir=tmp_path / "results")
    assert verdict.passed and verdict.exit_code == 1
    assert verdict.save_error is not None and "rank 0 left no model.pt in the cache" in verdict.save_error
    assert (tmp_path / "results" / "verdict.json").is_file()


def test_the_cli_saves_with_save_not_output_which_is_the_format(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        trained_cluster().serve(api)
        serve_collector(api, {"model.pt": b"\x80weights"})
        result = CliRunner().invoke(app, ["smoke-test", "--kubeconfig", str(api.write_kubeconfig(tmp_path / "kc")),
                                          "--save", str(tmp_path / "out"), "--output", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["passed"] and "model.pt" in document["saved"]
    assert (tmp_path / "out" / "model.pt").is_file()


def test_when_rank_0_ran_on_another_node_the_collector_looks_there_too(tmp_path: Path) -> None:
    metrics = METRICS | {"world_size": 2, "nodes": 2}
    first = succeeded(metrics)
    second = succeeded(metrics)
    second["metadata"]["name"], second["spec"]["nodeName"] = f"{JOB}-1-xyz", "gpu-2"
    for index, made in enumerate((first, second)):
        made["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = str(index)
    cluster = Cluster(steps=[(job(("Complete", "", "")), [first, second], EPOCH_LOG)])
    with FakeApiServer() as api:
        cluster.serve(api)
        created = serve_collector(api, {})
        # What the collector lists depends on the node it runs on: only gpu-2's cache holds the model.
        api.add("GET", "/api/v1/namespaces/{ns}/pods/{name}/proxy/index.json",
                lambda _: json.dumps(["model.pt"] if created[-1]["spec"]["nodeName"] == "gpu-2" else []).encode())
        api.add("GET", "/api/v1/namespaces/{ns}/pods/{name}/proxy/model.pt", b"\x80weights")
        verdict = run_smoke_test(api.write_kubeconfig(tmp_path / "kubeconfig"), parse_settings({}), namespace=NS,
                                 timings=FAST, sleep=lambda _: None, save_dir=tmp_path / "results")
    assert [c["spec"]["nodeName"] for c in created] == ["gpu-1", "gpu-2"]
    assert verdict.save_error is None and (tmp_path / "results" / "model.pt").read_bytes() == b"\x80weights"
