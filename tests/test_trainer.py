"""The trainer as the smoke-test Job runs it, on CPU: it learns the synthetic set within a bounded number of
steps while a broken run does not, reports its metrics as one JSON line and in the termination log, saves a
model that inference can reload, and under torchrun ends with one model on every rank and reports any
rank's failure. Then the recipe's pieces one by one, in-process, on tiny tensors."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from provision.resources import TRAINER_DIR
from provision.smoke.verdict import TrainerMetrics

sys.path.insert(0, str(TRAINER_DIR))
import distributed
import faults
import termination
import train

# In-process training must not meet the sys.intern Ansible installs when other tests load inventories.
pytestmark = pytest.mark.usefixtures("builtin_sys_intern")

# Small enough for two CPU cores in well under a minute: 1024 images, batch 64, 2 epochs = 32 optimizer steps.
SMALL = ["--synthetic", "--synthetic-train-size", "1024", "--synthetic-test-size", "300", "--epochs", "2",
         "--batch-size", "64", "--device", "cpu"]
MAX_STEPS = 32
THRESHOLD = 0.90  # the smoke test's default min_accuracy
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


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
    # The timeout only bounds a hung run: on a machine shared by other work 32 CPU steps can take minutes.
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=1200, env=env, cwd=tmp_path)
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
    # 5% of the labels are wrong on purpose: 0.95 is the best any model can do, and a healthy one gets close.
    assert metrics["accuracy_ceiling"] == 0.95
    assert THRESHOLD <= metrics["test_accuracy"] <= metrics["accuracy_ceiling"] + 0.005, trained.stderr
    assert metrics["dataset"] == "synthetic" and metrics["train_images"] == 1024 and metrics["test_images"] == 300
    assert metrics["device_type"] == "cpu" and metrics["gpu_count"] == 0 and metrics["world_size"] == 1
    assert metrics["precision"] == "fp32" and metrics["gpu_capability"] is None and metrics["compiled"] is False
    assert metrics["tta_views"] == 6
    assert 1_500_000 < metrics["parameters"] < 2_500_000  # the airbench-class network, about 2M


def test_steady_state_speed_is_reported_apart_from_the_warm_up_epoch(trained: Run) -> None:
    m = trained.metrics
    assert m["train_time_s"] == pytest.approx(m["warmup_epoch_time_s"] + m["steady_epoch_time_s"], abs=0.01)
    assert m["steady_images_per_s"] == pytest.approx(m["steps"] // m["epochs"] * m["batch_size"]
                                                     / m["steady_epoch_time_s"], rel=0.01)
    assert m["images_per_s"] > 0 and m["epoch_time_s"] > 0 and m["torch_version"]


def test_a_broken_numeric_path_stays_under_the_threshold_that_the_healthy_one_passes(trained: Run,
                                                                                    tmp_path: Path) -> None:
    # The convolutions never learn (their gradients are zeroed): only the biases and the last layer do, on
    # the features the network started with. The same steps on the same data end far under the threshold.
    run = run_trainer(tmp_path, [*SMALL, "--data-dir", str(tmp_path / "data"), "--fault", "frozen-convs"])
    assert run.returncode == 0, run.stderr
    assert run.metrics["steps"] == trained.metrics["steps"]
    assert run.metrics["test_accuracy"] <= 0.75 < THRESHOLD <= trained.metrics["test_accuracy"]


def test_a_run_that_learns_nothing_stays_near_chance(tmp_path: Path) -> None:
    # Every gradient zeroed: no parameter moves, so one epoch of a smaller set tells as much as many. Chance is 0.10.
    run = run_trainer(tmp_path, [*SMALL, "--synthetic-train-size", "256", "--synthetic-test-size", "100", "--epochs",
                                 "1", "--data-dir", str(tmp_path / "data"), "--fault", "zero-grads"])
    assert run.returncode == 0, run.stderr
    assert run.metrics["test_accuracy"] <= 0.25


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
    saved = torch.load(model, weights_only=True)
    assert distributed.model_digest(saved["state_dict"]) == trained.metrics["model_sha256"]
    # Inside training: the reloaded model's accuracy is the test accuracy (both with the same 6 views).
    assert trained.metrics["inference_accuracy"] == pytest.approx(trained.metrics["test_accuracy"], abs=0.004)
    data_dir = Path(trained.metrics["model_path"]).parent.parent / "data"
    result = subprocess.run([sys.executable, str(TRAINER_DIR / "infer.py"), str(model), "--data-dir", str(data_dir),
                             "--limit", "150", "--device", "cpu"], check=False, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["images"] == 150 and report["accuracy"] >= 0.85
    assert set(report["predictions"]) <= {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                                          "ship", "truck"}


def test_inference_refuses_a_file_that_is_not_a_saved_model(trained: Run, tmp_path: Path) -> None:
    bogus = tmp_path / "model.pt"
    bogus.write_bytes(b"not a model")
    data_dir = trained.output_dir.parent / "data"
    result = subprocess.run([sys.executable, str(TRAINER_DIR / "infer.py"), str(bogus), "--data-dir", str(data_dir),
                             "--device", "cpu"], check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert f"error: {bogus}: cannot be read as a saved model" in result.stderr


def test_torchrun_with_two_gloo_ranks_ends_with_one_model_that_the_metrics_describe(trained: Run,
                                                                                     tmp_path: Path) -> None:
    # No --data-dir: both ranks must agree on the default one (local rank 0 writes it, rank 1 waits for it).
    run = run_trainer(tmp_path, SMALL, launcher=TORCHRUN)
    assert run.returncode == 0, run.stderr
    assert run.metrics is not None and set(run.metrics) == set(trained.metrics)
    assert run.metrics["world_size"] == 2 and run.metrics["nodes"] == 1
    assert run.metrics["steps"] == trained.metrics["steps"]  # the global batch is split, not doubled
    # Each rank trained on its own shard with its own batch-norm statistics; they are averaged before
    # evaluation, so both ranks hold the same weights and buffers: the model rank 0 saved.
    # Not anchored to the line: two ranks share the stream, and a library's own output may precede a line.
    digests = dict(re.findall(r"rank (\d)/2: model sha256 ([0-9a-f]{64})", run.stderr))
    saved = torch.load(run.output_dir / "model.pt", weights_only=True)["state_dict"]
    assert digests == {"0": distributed.model_digest(saved), "1": distributed.model_digest(saved)}, run.stderr[-3000:]
    assert run.metrics["model_sha256"] == distributed.model_digest(saved)
    # The test accuracy (each rank on half the test set) and the reloaded model's (all of it) are one model's.
    assert run.metrics["inference_accuracy"] == pytest.approx(run.metrics["test_accuracy"], abs=0.004)
    assert run.metrics["test_accuracy"] >= THRESHOLD
    # One JSON line and one progress stream, from the local rank 0 only.
    assert len([line for line in run.stderr.splitlines() if line.startswith("epoch 2/2")]) == 1
    assert (tmp_path / "data-synthetic" / "cifar-10-batches-py" / "test_batch").is_file()


def test_a_failing_rank_other_than_0_puts_its_error_in_the_termination_log(tmp_path: Path) -> None:
    run = run_trainer(tmp_path, [*SMALL, "--fault", "error@1"], launcher=TORCHRUN)
    assert run.returncode != 0
    assert len(run.termination_log) <= 4096
    reported = json.loads(run.termination_log)  # valid JSON: what the driver reads, not torchrun's banner
    assert reported["error"].startswith("rank 1 of 2 (local rank 1 on ")
    assert "RuntimeError: injected fault on rank 1 at step 1" in reported["error"]
    assert reported["rank"] == 1 and TrainerMetrics.parse(run.termination_log) is None
    # The rank's error file (TORCHELASTIC_ERROR_FILE) reached torchrun's own failure summary too.
    summary = run.stderr[run.stderr.rindex("Root Cause"):]
    assert "rank      : 1" in summary and "injected fault on rank 1" in summary


def test_missing_data_fails_with_the_fix_in_the_termination_log(tmp_path: Path) -> None:
    run = run_trainer(tmp_path, ["--device", "cpu", "--data-dir", str(tmp_path / "empty")])
    assert run.returncode == 2
    assert "error: no CIFAR-10 in" in run.stderr
    assert "--download" in json.loads(run.termination_log)["error"]


def test_asking_for_cuda_without_a_gpu_fails_loudly_instead_of_training_on_cpu(tmp_path: Path) -> None:
    run = run_trainer(tmp_path, ["--device", "cuda", "--synthetic"])
    assert run.returncode == 2
    assert json.loads(run.termination_log)["error"].startswith("CUDA is not available in this container")


# ---------------------------------------------------------------------------------------------------
# The recipe, piece by piece (in-process, tiny tensors)
# ---------------------------------------------------------------------------------------------------
def correlated_images(count: int = 64, seed: int = 0) -> torch.Tensor:
    """Smooth colour images with some grain: neighbouring pixels and channels strongly correlated, as in
    photographs, and no direction without variance (the whitening's epsilon would show there)."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.randn(count, 3, 8, 8, generator=generator)
    mixed = torch.einsum("nchw,dc->ndhw", coarse, torch.tensor([[1.0, 0.8, 0.6], [0.8, 1.0, 0.8], [0.6, 0.8, 1.0]]))
    smooth = nn.functional.interpolate(mixed, size=32, mode="bilinear", align_corners=False)
    return smooth + 0.3 * torch.randn(smooth.shape, generator=generator)


def test_the_whitening_layer_is_computed_from_data_patches_and_frozen() -> None:
    net = train.build_network()
    images = correlated_images()
    train.init_whitening(net[0], images)
    # Its first half of filters decorrelates 2x2 patches: unit variance in every direction, no covariance.
    out = nn.functional.conv2d(images, net[0].weight[:12]).permute(0, 2, 3, 1).reshape(-1, 12)
    covariance = out.T @ out / len(out)
    assert torch.allclose(covariance, torch.eye(12), atol=0.05)
    assert not net[0].weight.requires_grad
    optimizer = train.make_optimizer(net, batch_size=32)
    assert all(p is not net[0].weight for group in optimizer.param_groups for p in group["params"])
    before, bias_before = net[0].weight.clone(), net[0].bias.clone()
    for _ in range(2):
        optimizer.zero_grad()
        nn.functional.cross_entropy(net(images[:16]), torch.arange(16) % 10).backward()
        optimizer.step()
    assert torch.equal(net[0].weight, before) and not torch.equal(net[0].bias, bias_before)


def test_convolutions_start_as_identity_and_batch_norm_has_the_recipes_epsilon() -> None:
    net = train.build_network()
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3)]
    assert len(convs) == 6
    for conv in convs:
        x = torch.randn(2, conv.in_channels, 9, 9)
        assert torch.allclose(conv(x)[:, :conv.in_channels], x, atol=1e-5)  # dirac: passes its input through
    norms = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    assert {m.eps for m in norms} == {1e-12} and {m.momentum for m in norms} == {0.4}
    assert not any(m.weight.requires_grad for m in norms)


def test_batch_norm_biases_learn_64_times_faster_and_the_whitening_bias_at_the_plain_rate() -> None:
    net = train.build_network()
    groups = {g["name"]: g for g in train.make_optimizer(net, batch_size=1024).param_groups}
    assert groups["weights"]["lr"] == train.LR
    assert groups["norm_biases"]["lr"] == 64 * train.LR
    assert groups["whiten_bias"]["lr"] == train.LR
    # Decoupled: the decay per step (lr x weight_decay) is the same for every group.
    assert {round(g["lr"] * g["weight_decay"], 9) for g in groups.values()} == {train.WEIGHT_DECAY}


def test_flips_alternate_so_every_image_is_seen_both_ways_in_every_two_epochs(monkeypatch) -> None:
    monkeypatch.setattr(train, "TRANSLATE_PX", 0)
    images = torch.arange(8 * 3 * 4 * 4, dtype=torch.float32).view(8, 3, 4, 4)  # no image is its own mirror
    generator = torch.Generator().manual_seed(0)
    mask = torch.rand(8, generator=generator) < 0.5
    seen = [train.augment(images, train.epoch_flips(mask, epoch), generator) for epoch in range(1, 5)]
    mirrored = [(view == images.flip(-1)).flatten(1).all(1) for view in seen]
    assert 0 < int(mirrored[0].sum()) < 8  # a random part, not all or none
    assert torch.equal(mirrored[0], mask) and torch.equal(mirrored[1], ~mask)
    assert torch.equal(mirrored[2], mirrored[0]) and torch.equal(mirrored[3], mirrored[1])
    unflipped = [~m for m in mirrored]
    assert torch.equal(unflipped[0] | unflipped[1], torch.ones(8, dtype=torch.bool))


def test_test_time_augmentation_averages_six_views_with_the_recipes_weights() -> None:
    images = torch.randn(5, 3, 8, 8)
    views = train.tta_views(images)
    assert len(views) == 6 and [w for w, _ in views] == [0.25, 0.25, 0.125, 0.125, 0.125, 0.125]
    (_, plain), (_, mirror), (_, down), (_, down_mirror), (_, up), (_, up_mirror) = views
    assert torch.equal(plain, images) and torch.equal(mirror, images.flip(-1))
    assert torch.equal(down[..., 1:, 1:], images[..., :-1, :-1])  # shifted one pixel down and right
    assert torch.equal(up[..., :-1, :-1], images[..., 1:, 1:])    # and one pixel up and left
    assert torch.equal(down_mirror, down.flip(-1)) and torch.equal(up_mirror, up.flip(-1))
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10))
    expected = sum(w * net(v) for w, v in views)
    assert torch.allclose(train.tta_logits(net, images), expected, atol=1e-6)
    assert torch.equal(train.predict(net, images, torch.device("cpu")), expected.argmax(1))


def test_lookahead_pulls_weights_and_statistics_towards_their_average() -> None:
    net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    lookahead = train.Lookahead(net)
    start = {k: v.clone() for k, v in net.state_dict().items()}
    with torch.no_grad():
        net[0].weight.add_(1.0)
        net[1].running_mean.add_(2.0)
    moved = {k: v.clone() for k, v in net.state_dict().items()}
    lookahead.update(net, decay=0.75)
    for name in ("0.weight", "0.bias", "1.running_mean", "1.running_var"):
        assert torch.allclose(net.state_dict()[name], 0.75 * start[name] + 0.25 * moved[name])
    assert "1.num_batches_tracked" not in lookahead.average  # counters are not averaged
    with torch.no_grad():
        net[0].weight.add_(5.0)
    lookahead.update(net, decay=1.0)  # the end of an epoch: the network takes the average as it is
    assert torch.allclose(net[0].weight, 0.75 * start["0.weight"] + 0.25 * moved["0.weight"])
    # Early pulls barely hold the weights back; the last ones average over the last stretch of training.
    decays = [train.lookahead_decay(step, 100) for step in (10, 50, 100)]
    assert decays == sorted(decays) and decays[0] < 0.001 and decays[-1] == pytest.approx(0.95 ** 5)


def test_the_numeric_format_follows_the_gpus_compute_capability() -> None:
    assert train.precision_for(None) == train.Precision("fp32", None, torch.float32, loss_scaling=False)
    for capability in ((8, 0), (8, 9), (9, 0), (10, 0)):  # A100, L4, H100, B200
        precision = train.precision_for(capability)
        assert (precision.name, precision.autocast_dtype, precision.loss_scaling) == ("bf16", torch.bfloat16, False)
    for capability in ((6, 0), (7, 0), (7, 5)):  # P100, V100, T4: no bfloat16 tensor cores
        precision = train.precision_for(capability)
        assert (precision.name, precision.autocast_dtype, precision.loss_scaling) == ("fp16", torch.float16, True)
    assert train.precision_for((9, 0)).data_dtype == torch.float16  # the data set is kept in half precision


# ---------------------------------------------------------------------------------------------------
# The termination message
# ---------------------------------------------------------------------------------------------------
def test_a_huge_error_still_yields_valid_json_within_4096_bytes() -> None:
    head, tail = "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error", "Last error: peer gone"
    huge = head + ' "quoted" \\ back\nslash ünïcödé ' * 5000 + tail
    text = termination.fit_json({"error": huge, "rank": 3, "hostname": "gpu-7"})
    assert len(text.encode()) <= 4096
    document = json.loads(text)
    assert document["rank"] == 3 and document["hostname"] == "gpu-7"  # short fields untouched
    assert document["error"].startswith(head) and document["error"].endswith(tail)  # both ends of the story
    assert "characters cut to fit" in document["error"]


def test_the_longest_fields_are_cut_first_and_a_message_that_fits_is_left_alone() -> None:
    small = {"error": "short", "n": 1}
    assert termination.fit_json(small) == json.dumps(small, separators=(",", ":"))
    text = termination.fit_json({"a": "x" * 3000, "b": "y" * 3000, "c": "keep me"}, limit=1000)
    document = json.loads(text)
    assert len(text) <= 1000 and document["c"] == "keep me"
    assert len(document["a"]) > 100 and len(document["b"]) > 100  # both cut, neither emptied
    nested = termination.fit_json({"outer": {"inner": ["z" * 5000]}}, limit=300)
    assert len(nested) <= 300 and json.loads(nested)["outer"]["inner"][0].startswith("zzz")


def test_the_first_rank_to_fail_keeps_the_termination_log(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    log.write_text("")
    assert termination.write_termination_log({"error": "rank 1: the root cause"}, log, only_if_empty=True)
    assert not termination.write_termination_log({"error": "rank 0: connection closed by peer"}, log, only_if_empty=True)
    assert json.loads(log.read_text())["error"] == "rank 1: the root cause"
    assert not termination.write_termination_log({"error": "x"}, tmp_path / "absent")  # outside Kubernetes: nothing


def test_other_local_ranks_wait_for_the_data_without_a_process_group(tmp_path: Path) -> None:
    marker = tmp_path / ".ready-run"
    with pytest.raises(termination.TrainerError, match=r"local rank 0 did not have the data ready within 0s"):
        distributed.wait_for_data(marker, timeout_s=0.05, poll_s=0.01)
    marker.write_text(str(tmp_path / "cifar-10-batches-py"))
    assert distributed.wait_for_data(marker, timeout_s=0.05) == tmp_path / "cifar-10-batches-py"
    # The wait for another node's download is bounded by the process group's timeout, which outlasts it.
    assert train.PROCESS_GROUP_TIMEOUT_S > train.DATA_WAIT_TIMEOUT_S > train.cifar_data.DOWNLOAD_TOTAL_TIMEOUT_S


def test_an_unknown_fault_is_refused() -> None:
    assert faults.parse_fault("error@3") == faults.Fault("error", 3)
    with pytest.raises(SystemExit):
        train.parse_args(["--fault", "melt"])
