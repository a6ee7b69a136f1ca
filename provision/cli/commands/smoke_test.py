"""`bootstrap smoke-test`: train CIFAR-10 on the cluster and print a verdict; the exit code is the verdict."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from provision.cli import invocation
from provision.cli.option_table import checked, options_of
from provision.cli.options import ConfigOption
from provision.errors import InputError
from provision.smoke.kinds import Scheduler, Workload

if TYPE_CHECKING:
    from provision.inputs.settings import Settings
    from provision.smoke.driver import SmokeProgress
    from provision.smoke.observation import Mode
    from provision.smoke.verdict import Verdict

OPTIONS = options_of("smoke-test")

KubeconfigOption = Annotated[Path, OPTIONS.option(
    "--kubeconfig", help="Kubeconfig of the cluster to test.", envvar="KUBECONFIG")]


@contextmanager
def live_view() -> Iterator[Callable[[SmokeProgress], None]]:
    """Log lines scroll above a live table of the pods; without a terminal, the lines and stages only."""
    from rich.live import Live

    from provision.cli.console import console
    from provision.cli.views import smoke_log_lines, smoke_view

    if not console.is_terminal:
        last_stage = ""

        def plain(progress: SmokeProgress) -> None:
            nonlocal last_stage
            if progress.stage != last_stage:
                console.print(f"[{progress.elapsed:5.1f}s] {progress.stage}")
                last_stage = progress.stage
            for line in smoke_log_lines(progress):
                console.print(f"  {line}")
        yield plain
        return
    with Live(console=console, refresh_per_second=8, transient=True) as live:
        def update(progress: SmokeProgress) -> None:
            for line in smoke_log_lines(progress):
                live.console.print(f"  {line}")
            live.update(smoke_view(progress))
        yield update


def print_verdict(verdict: Verdict) -> None:
    from rich.table import Table
    from rich.text import Text

    from provision.cli.console import console
    from provision.smoke.manifests import RUN_LABEL
    from provision.smoke.serve import Served
    from provision.smoke.spec import CACHE_NAMESPACE

    colour = "green" if verdict.passed else "red"
    console.print(Text(verdict.summary, style=f"bold {colour}"), soft_wrap=True)
    metrics = verdict.metrics
    if metrics:
        table = Table(box=None, pad_edge=False, show_header=False)
        table.add_column(style="dim")
        table.add_column()
        rows = [
            ("test accuracy", f"{metrics.test_accuracy:.4f}"),
            ("saved model, re-read", f"{metrics.inference_accuracy}"),
            ("training time", f"{metrics.train_time_s:.2f}s ({metrics.epochs} epochs, {metrics.epoch_time_s:.2f}s each)"),
            ("images/s", f"{metrics.images_per_s:,.0f}"),
            ("device", f"{metrics.device} x{metrics.gpu_count or metrics.world_size} on {metrics.nodes} node(s)"),
            ("torch / CUDA", f"{metrics.torch_version} / {metrics.cuda_version or 'none'}"),
            ("dataset", metrics.dataset),
            ("workload", verdict.workload),
        ]
        bandwidth = verdict.bandwidth
        if bandwidth:
            link = f"{verdict.link_gbps:g} Gb/s" if verdict.link_gbps else "link speed unknown"
            rows.append(("all-reduce", f"{bandwidth.busbw_gbps:.2f} Gb/s bus bandwidth ({bandwidth.backend}, "
                                       f"{bandwidth.world_size} processes on {bandwidth.nodes} nodes; {link})"))
        for key, value in rows:
            table.add_row(key, value)
        console.print(table)
    if verdict.served is not None:
        console.print(Served(**verdict.served).line(), soft_wrap=True, markup=False)
    if verdict.gpu_utilisation:
        console.print(f"GPU utilisation while training: {verdict.gpu_utilisation['mean']:.0f}% mean, "
                      f"{verdict.gpu_utilisation['peak']:.0f}% peak (DCGM exporter, "
                      f"{verdict.gpu_utilisation['metric']})", markup=False)
    if verdict.pipeline_steps:
        for step in verdict.pipeline_steps:
            took = f" ({step['seconds']:.0f}s)" if "seconds" in step else ""
            console.print(f"  step {step['name']}: {step['state']}{took}", markup=False)
    for warning in verdict.warnings:
        console.print(Text.assemble(("warning:", "yellow"), f" {warning}"), soft_wrap=True)
    if not verdict.passed and verdict.log_tail:
        console.print(Text("last lines of the trainer's log:", style="dim"))
        for line in verdict.log_tail[-8:]:
            console.print(f"  {line}", markup=False)
    if verdict.kept and verdict.namespace == CACHE_NAMESPACE:
        console.print(f"kept: the run's objects in namespace {verdict.namespace}, which also holds the cache (kubectl "
                      f"-n {verdict.namespace} get all -l {RUN_LABEL}; delete them by that label when done)",
                      soft_wrap=True, markup=False)
    elif verdict.kept:
        console.print(f"kept: namespace {verdict.namespace} (kubectl -n {verdict.namespace} get pods; "
                      f"kubectl delete namespace {verdict.namespace} when done)")
    if verdict.cleanup_error:
        console.print(Text.assemble(("warning:", "yellow"), f" {verdict.cleanup_error}"))
    if verdict.saved:
        console.print(f"saved: {', '.join(verdict.saved)}", soft_wrap=True, markup=False)
    if verdict.save_error:
        console.print(Text.assemble(("not saved:", "red"), f" {verdict.save_error}"), soft_wrap=True)


def save_directory_problem(path: Path) -> str | None:
    """Why `--save` cannot hold the results (a file, or a place this user cannot create a folder in): said before
    training, not after it."""
    from provision.inputs.values import LOCAL_PATH, creatable_directory_problem

    problem = LOCAL_PATH.problem(str(path))
    if problem:
        return problem
    if path.exists() and not path.is_dir():
        return f"{path} is a file: name a folder (it is created if it does not exist)"
    return creatable_directory_problem(path.absolute())


@checked("smoke-test")
def smoke_test(
    kubeconfig: KubeconfigOption = Path("~/.kube/config"),
    config: ConfigOption = None,
    gpus: Annotated[int | None, OPTIONS.option("--gpus", help="GPUs per node (default: smoke_test.gpus).")] = None,
    nodes: Annotated[int | None, OPTIONS.option(
        "--nodes", help="Nodes to train on (default: smoke_test.nodes).")] = None,
    cpu: Annotated[bool, OPTIONS.option("--cpu", help="Train on CPU (for clusters without GPUs).")] = False,
    keep: Annotated[bool, OPTIONS.option("--keep", help="Leave the namespace, Job and pods for inspection.")] = False,
    image: Annotated[str | None, OPTIONS.option("--image", help="Trainer image (default: smoke_test.image).")] = None,
    epochs: Annotated[int | None, OPTIONS.option("--epochs", help="Training epochs.")] = None,
    timeout: Annotated[int | None, OPTIONS.option("--timeout", help="Seconds before the Job is stopped.")] = None,
    workload: Annotated[Workload | None, OPTIONS.option(
        "--workload", help="What runs the training (default: smoke_test.workload; auto: a TrainJob when Kubeflow "
                           "Trainer is installed, else a Job).")] = None,
    scheduler: Annotated[Scheduler | None, OPTIONS.option(
        "--scheduler", help="default, or volcano: the pods are one gang (default: smoke_test.scheduler; auto: "
                            "Volcano when installed).")] = None,
    save: Annotated[Path | None, OPTIONS.option(
        "--save", metavar="DIR", help="Copy the trained model and its metrics here, a new or empty folder (with the "
        "trainer's code, "
        "for `python -m trainer.infer --model DIR/model.pt --image PICTURE`). Not --output: that is the format.",
        show_default=False)] = None,
    serve: Annotated[bool, OPTIONS.option(
        "--serve", help="Then serve the trained model with KServe (an InferenceService; the kserve add-on), send "
        "it one picture over HTTP, report its class and score, and remove the service.")] = False,
    pipeline: Annotated[bool, OPTIONS.option(
        "--pipeline", help="Instead, run the smoke test as a Kubeflow pipeline (the pipelines add-on): prepare "
        "data, train, evaluate, and with KServe deploy; compiled with the kfp SDK, submitted, followed to the "
        "end, each step reported.")] = False,
    print_manifests: Annotated[Workload | None, OPTIONS.option(
        "--print-manifests", metavar="job|pytorchjob|trainjob",
        help="Print the objects the test would create (a Job, a Kubeflow PyTorchJob or TrainJob) and exit; "
             "with --scheduler volcano, as a gang.")] = None,
    output: Annotated[Literal["text", "json"], OPTIONS.option(
        "--output", "-o", help="text: the verdict for people; json: the verdict as one JSON document on stdout "
        "(the live view stays on stderr).")] = "text",
) -> None:
    """Train CIFAR-10 on the cluster's GPUs and judge the run: PASS with accuracy and time, or FAIL with
    the cause read from the API. Exit code 0 on PASS, 1 on FAIL (or when --save could not copy the model)."""
    invocation.remember(config=config, kubeconfig=kubeconfig)
    # Options that another one makes meaningless were refused by @checked (the option table's rules), before
    # any file is read.
    settings = _settings_with_options(config, image=image, gpus=gpus, nodes=nodes, epochs=epochs, timeout=timeout)
    if save is not None:
        problem = save_directory_problem(save.expanduser())
        if problem:
            raise InputError(f"--save {problem}")
    if print_manifests is not None:
        typer.echo(_manifests_yaml(settings, print_manifests, scheduler, cpu=cpu, gpus=gpus, nodes=nodes, image=image,
                                   epochs=epochs, timeout=timeout, keep_results=save is not None), nl=False)
        return
    if pipeline:
        from provision.smoke.pipeline import run_pipeline_smoke_test

        with live_view() as on_progress:
            verdict = run_pipeline_smoke_test(kubeconfig.expanduser(), settings, cpu=cpu, image=image,
                                              epochs=epochs, timeout_s=timeout, deploy=serve,
                                              on_progress=on_progress)
    else:
        from provision.smoke.driver import run_smoke_test

        with live_view() as on_progress:
            verdict = run_smoke_test(kubeconfig.expanduser(), settings, gpus=gpus, nodes=nodes, cpu=cpu,
                                     keep=keep, on_progress=on_progress, image=image, epochs=epochs,
                                     timeout_s=timeout, workload=workload, scheduler=scheduler,
                                     save_dir=save.expanduser() if save else None, serve=serve)
    _print_result(verdict, output)
    raise typer.Exit(verdict.exit_code)


def _settings_with_options(config: Path | None, *, image: str | None, gpus: int | None, nodes: int | None,
                           epochs: int | None, timeout: int | None) -> Settings:
    """The settings with the options that stand for settings laid over them."""
    from provision.inputs.settings import load_settings, with_overrides

    # Each option that stands for a setting is checked exactly as the setting is (an image with a fixed tag,
    # ...), before anything is rendered or any cluster is asked.
    return with_overrides(load_settings(config), {
        "smoke_test.image": ("--image", image), "smoke_test.gpus": ("--gpus", gpus),
        "smoke_test.nodes": ("--nodes", nodes), "smoke_test.epochs": ("--epochs", epochs),
        "smoke_test.timeout_s": ("--timeout", timeout)})


def _manifests_yaml(settings: Settings, workload: Workload, scheduler: Scheduler | None, *, cpu: bool,
                    gpus: int | None, nodes: int | None, image: str | None, epochs: int | None, timeout: int | None,
                    keep_results: bool) -> str:
    """`--print-manifests`: the objects the test would create, as YAML, chosen without a cluster to ask."""
    from provision.smoke.choices import assumed_offer, choose
    from provision.smoke.manifests import render, to_yaml
    from provision.smoke.spec import build_spec, new_namespace

    # Without a cluster to ask, "auto" means GPU unless --cpu or the settings say CPU.
    mode: Mode = "cpu" if cpu or settings.smoke_test.mode == "cpu" else "gpu"
    offer = assumed_offer(settings, workload=workload, scheduler=scheduler)
    chosen = choose(offer, settings, nodes=nodes or settings.smoke_test.nodes, save=keep_results,
                    workload=workload, scheduler=scheduler)
    spec = build_spec(settings, mode, namespace=new_namespace(), gpus=gpus, nodes=nodes, image=image,
                      epochs=epochs, timeout_s=timeout, choices=chosen, keep_results=keep_results)
    return to_yaml(render(spec))


def _print_result(verdict: Verdict, output: Literal["text", "json"]) -> None:
    """The verdict for people, or as one JSON document on stdout (--output json)."""
    if output == "json":
        typer.echo(json.dumps(asdict(verdict), indent=2))
    else:
        print_verdict(verdict)


def register(app: typer.Typer) -> None:
    app.command("smoke-test")(smoke_test)
