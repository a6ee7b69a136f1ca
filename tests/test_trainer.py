"""The trainer as the smoke-test Job runs it, on CPU: it learns the synthetic set within a bounded number of
steps, reports its metrics as one JSON line and in the termination log, saves a model that inference can
reload, and runs the same under torchrun with two gloo processes. Run as subprocesses, like a pod does."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from provision.kube.smoke_verdict import TrainerMetrics
from provision.resources import TRAINER_DIR

# Small enough for two CPU cores in seconds: 1024 images, batch 128, 2 epochs = 16 optimizer steps.
SMALL = ["--synthetic", "--synthetic-train-size", "1024", "--synthetic-test-size", "300", "--epochs", "2",
         "--batch-size", "128", "--device", "cpu"]
MAX_STEPS = 16


@dataclass
class Run:
    returncode: int
    metrics: dict[str, Any] | None
    stderr: str
    termination_log: str
    output_dir: Path


def run_trainer(tmp_path: Path, args: list[str], *, launcher: list[str] | None = None) -> Run:
    termination_log = tmp_path / "termination-log"
    termination_log.write_text("")  # present, as Kubernetes provides it
    output_dir = tmp_path / "out"
    command = [*(launcher or [sys.executable]), str(TRAINER_DIR / "train.py"), *args,
               "--output-dir", str(output_dir), "--termination-log", str(termination_log)]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    stdout_lines = result.stdout.strip().splitlines()
    metrics = json.loads(stdout_lines[-1]) if result.returncode == 0 and stdout_lines else None
    return Run(result.returncode, metrics, result.stderr, termination_log.read_text(), output_dir)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp_path = tmp_path_factory.mktemp("train")
    run = run_trainer(tmp_path, [*SMALL, "--data-dir", str(tmp_path / "data")])
    assert run.returncode == 0, run.stderr
    return run


def test_the_trainer_learns_the_synthetic_set_to_90_percent_within_bounded_steps(trained: Run) -> None:
    metrics = trained.metrics
    assert metrics is not None
    assert metrics["steps"] <= MAX_STEPS
    assert metrics["test_accuracy"] >= 0.90, trained.stderr
    assert metrics["dataset"] == "synthetic" and metrics["train_images"] == 1024 and metrics["test_images"] == 300
    assert metrics["device_type"] == "cpu" and metrics["gpu_count"] == 0 and metrics["world_size"] == 1
    assert metrics["images_per_s"] > 0 and metrics["epoch_time_s"] > 0 and metrics["torch_version"]
    assert 1_500_000 < metrics["parameters"] < 2_500_000  # the airbench-class network, about 2M


def test_progress_is_one_line_per_epoch_on_stderr(trained: Run) -> None:
    epochs = [line for line in trained.stderr.splitlines() if line.startswith("epoch ")]
    assert [line.split()[1] for line in epochs] == ["1/2", "2/2"]
    assert all("loss" in line and "images/s" in line for line in epochs)


def test_the_metrics_reach_the_termination_log_in_the_drivers_format(trained: Run) -> None:
    assert json.loads(trained.termination_log) == trained.metrics
    parsed = TrainerMetrics.parse(trained.termination_log)
    assert parsed is not None and parsed.test_accuracy == trained.metrics["test_accuracy"]
    assert len(trained.termination_log) <= 4096  # Kubernetes truncates longer termination messages


def test_the_saved_model_reloads_and_classifies_held_out_images(trained: Run, tmp_path: Path) -> None:
    model = trained.output_dir / "model.pt"
    assert trained.metrics["model_path"] == str(model)
    # Inside training: the reloaded model's accuracy agrees with the test accuracy (both flip-averaged).
    assert trained.metrics["inference_accuracy"] == pytest.approx(trained.metrics["test_accuracy"], abs=0.01)
    data_dir = Path(trained.metrics["model_path"]).parent.parent / "data"
    result = subprocess.run([sys.executable, str(TRAINER_DIR / "infer.py"), str(model), "--data-dir", str(data_dir),
                             "--limit", "150", "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["images"] == 150 and report["accuracy"] >= 0.90
    assert set(report["predictions"]) <= {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                                          "ship", "truck"}


def test_inference_refuses_a_file_that_is_not_a_saved_model(trained: Run, tmp_path: Path) -> None:
    bogus = tmp_path / "model.pt"
    bogus.write_bytes(b"not a model")
    data_dir = trained.output_dir.parent / "data"
    result = subprocess.run([sys.executable, str(TRAINER_DIR / "infer.py"), str(bogus), "--data-dir", str(data_dir),
                             "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert f"error: {bogus}: cannot be read as a saved model" in result.stderr


def test_torchrun_with_two_gloo_processes_reports_the_same_metrics(trained: Run, tmp_path: Path) -> None:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    # No --data-dir: both ranks must agree on the default one (local rank 0 writes it, rank 1 reads it).
    run = run_trainer(tmp_path, SMALL, launcher=launcher)
    assert run.returncode == 0, run.stderr
    assert run.metrics is not None and set(run.metrics) == set(trained.metrics)
    assert run.metrics["world_size"] == 2 and run.metrics["nodes"] == 1
    assert run.metrics["steps"] == trained.metrics["steps"]  # the global batch is split, not doubled
    assert run.metrics["test_accuracy"] >= 0.90 and run.metrics["inference_accuracy"] >= 0.90
    # One JSON line and one progress stream, from the local rank 0 only.
    assert len([line for line in run.stderr.splitlines() if line.startswith("epoch 2/2")]) == 1
    assert (tmp_path / "data-synthetic" / "cifar-10-batches-py" / "test_batch").is_file()


def test_missing_data_fails_with_the_fix_in_the_termination_log(tmp_path: Path) -> None:
    run = run_trainer(tmp_path, ["--device", "cpu", "--data-dir", str(tmp_path / "empty")])
    assert run.returncode == 2
    assert "error: no CIFAR-10 in" in run.stderr
    assert "--download" in json.loads(run.termination_log)["error"]


def test_asking_for_cuda_without_a_gpu_fails_loudly_instead_of_training_on_cpu(tmp_path: Path) -> None:
    run = run_trainer(tmp_path, ["--device", "cuda", "--synthetic"])
    assert run.returncode == 2
    assert json.loads(run.termination_log)["error"].startswith("CUDA is not available in this container")
