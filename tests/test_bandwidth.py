"""The all-reduce bandwidth step the multi-node smoke test runs before training, run here for real: torchrun
starts gloo processes on CPU (two in one "node", and two "nodes" meeting at a c10d rendezvous on this
machine, as the Indexed Job's pods do), and rank 0 prints one JSON line the verdict reads."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from provision.resources import TRAINER_DIR
from provision.smoke.verdict import Bandwidth

pytest.importorskip("torch", reason="the step needs torch: run in the environment that has it (.venv)")
SMALL = ["--device", "cpu", "--size-mb", "4", "--iterations", "3", "--warmup", "1"]


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args, str(TRAINER_DIR / "bandwidth.py"), *SMALL]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "NCCL_SOCKET_IFNAME")} | \
        {"OMP_NUM_THREADS": "1"}


def test_two_gloo_processes_report_their_bus_bandwidth_as_one_json_line() -> None:
    result = subprocess.run(torchrun("--standalone", "--nproc-per-node", "2"), capture_output=True, text=True,
                            timeout=180, env=env())
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1  # rank 0 only
    report = json.loads(lines[0])["allreduce"]
    assert (report["backend"], report["device"], report["world_size"], report["nodes"]) == ("gloo", "cpu", 2, 1)
    assert report["size_bytes"] == 4 * 2**20 and report["iterations"] == 3 and report["seconds"] > 0
    # nccl-tests' definition for an all-reduce over n ranks: busbw = algbw * 2(n-1)/n.
    assert report["busbw_gbps"] == pytest.approx(report["algbw_gbps"], rel=0.01)
    assert "bus bandwidth" in result.stderr
    # What the verdict makes of it.
    bandwidth = Bandwidth.parse(lines[0])
    assert bandwidth is not None and bandwidth.busbw_gbps == report["busbw_gbps"] and bandwidth.world_size == 2


def test_two_nodes_meet_at_a_c10d_rendezvous_like_the_indexed_jobs_pods(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
              f"127.0.0.1:{port}", "--rdzv-id", "bw-test", "--max-restarts", "0"]
    nodes = [subprocess.Popen(torchrun(*common, "--rdzv-conf", f"is_host={1 if i == 0 else 0}"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
             for i in range(2)]
    outputs = [node.communicate(timeout=240) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], [err for _, err in outputs]
    reports = [json.loads(line)["allreduce"] for out, _ in outputs for line in out.splitlines() if line.startswith("{")]
    assert len(reports) == 1
    assert (reports[0]["world_size"], reports[0]["nodes"]) == (2, 2)


def test_outside_torchrun_it_says_how_to_run_it() -> None:
    result = subprocess.run([sys.executable, str(TRAINER_DIR / "bandwidth.py")], capture_output=True, text=True,
                            timeout=60, env={k: v for k, v in env().items() if k != "RANK"})
    assert result.returncode == 2 and "run under torchrun" in result.stderr
