"""`bootstrap upgrade --to 1.37`: the running cluster moved to a newer Kubernetes as kubeadm upgrades one, one
minor at a time. The plan is read from what the cluster runs and shown first (`--dry-run` stops there); every
refusal comes before any change; a failed or killed upgrade, re-run, goes on where it stopped."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from provision.cli.invocation import carry
from provision.cli.option_table import checked, options_of
from provision.cli.options import NodeOptions, Output, OutputOption, YesOption, node_options
from provision.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Callable

    from provision.cli.views import PhaseView
    from provision.errors import BootstrapError
    from provision.inputs.inventory import Cluster
    from provision.inputs.settings import Settings
    from provision.inputs.upgrade import Target, UpgradeOptions, UpgradePlan
    from provision.phases import PipelineResult


def plan_lines(plan: UpgradePlan, cluster: Cluster, settings: Settings, options: UpgradeOptions) -> list[str]:
    """The whole plan in order, for people: the checks, the snapshot, each step, the smoke test."""
    from provision.inputs.upgrade import describe_plan

    steps = describe_plan(plan, cluster.control_plane.name)
    driver = ([f"then the NVIDIA driver {options.gpu_driver} and container toolkit "
               f"{settings.gpu.container_toolkit_version} on every GPU node that runs another, each drained, its GPUs "
               "allocatable again before it is uncordoned"] if options.gpu_driver else [])
    if plan.nothing_to_do:
        return steps + driver
    snapshot = ("skipped (--skip-etcd-snapshot: you took one)" if options.skip_etcd_snapshot
                else "from a healthy control plane, checked and kept on this machine")
    smoke = "the smoke test" if settings.smoke_test.enabled else "no smoke test (smoke_test.enabled is false)"
    workers = f"workers {options.parallel} at a time" if str(options.parallel) != "1" else "workers one at a time"
    if options.canary:
        workers = f"the first worker of each step alone (--canary), then {workers.removeprefix('workers ')}"
    if options.pause_after is not None:
        workers += f", pausing for your confirmation after every {options.pause_after} (--pause-after)"
    return [steps[0], f"first, before anything changes: preflight (the rules of 1.{plan.target.minor} on every node: "
            f"containerd, cgroups); before each step the etcd snapshot {snapshot}; {workers}", *steps[1:], *driver,
            f"last: {smoke}"]


def _closing(plan: UpgradePlan, settings: Settings, config: str, gpu_driver: str | None) -> list[str]:
    lines = []
    if settings.kubernetes.minor_number != plan.target.minor:
        lines.append(f"set kubernetes.version: '1.{plan.target.minor}' in {config} now: `up` and `node add` refuse the "
                     "older version (their packages would move nodes back)")
    if gpu_driver is not None:
        lines.append(f"set gpu.driver_branch: '{gpu_driver}' in {config} now: `up` and `node add` would install the "
                     "older branch on a new GPU node")
    return lines


def _document(plan: UpgradePlan | None, versions: Any, *, dry_run: bool) -> dict[str, Any]:
    return {"dry_run": dry_run, "plan": plan.as_dict() if plan else None,
            "versions": versions.as_dict() if versions else None}


@checked("upgrade")
@node_options
def upgrade(
    nodes: NodeOptions,
    to: Annotated[str | None, options_of("upgrade").option(
        "--to", help="The Kubernetes version to move to: a minor (1.37: its newest patch) or a release (1.37.1). "
                     "Default: kubernetes.version in cluster.yaml.", show_default=False)] = None,
    step: Annotated[bool, typer.Option(
        "--step", help="Reach a target more than one minor ahead through each minor between (kubeadm upgrades "
                       "one minor at a time; without --step such a target is refused).")] = False,
    parallel: Annotated[str, options_of("upgrade").option(
        "--parallel", metavar="N|N%",
        help="Workers drained and upgraded at a time: a number, or a percentage of the step's workers.")] = "1",
    canary: Annotated[bool, options_of("upgrade").option(
        "--canary", help="Upgrade the first worker of each step alone before the others.")] = False,
    pause_after: Annotated[int | None, options_of("upgrade").option(
        "--pause-after", metavar="N",
        help="Stop for your confirmation once N workers were upgraded (with --yes, or without a terminal: "
             "stop there; the same command goes on).", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Read the cluster, show the plan, change nothing.")] = False,
    skip_etcd_snapshot: Annotated[bool, typer.Option(
        "--skip-etcd-snapshot", help="You took an etcd snapshot yourself: do not take one first.")] = False,
    gpu_driver: Annotated[str | None, options_of("upgrade").option(
        "--gpu-driver", metavar="BRANCH",
        help="Also move the NVIDIA driver to this branch (and the container toolkit to gpu.container_toolkit_"
             "version) on every GPU node that runs another, under drain, after the Kubernetes steps.",
        show_default=False)] = None,
    delete_emptydir_data: Annotated[bool, options_of("upgrade").option(
        "--delete-emptydir-data", help="Evict pods with emptyDir volumes while draining, deleting their data "
                                       "(as kubectl drain's flag); without it such pods stop the drain by "
                                       "name.")] = False,
    yes: YesOption = False,
    output: OutputOption = Output.text,
) -> None:
    """Upgrade the running cluster: control planes one at a time (kubeadm upgrade apply, then node), then each
    worker drained, upgraded and uncordoned; Calico, the device plugin and add-ons follow; verify and the smoke
    test close. See docs/upgrade.md."""
    from provision.cli.support import new_context, show_result
    from provision.cli.views import PhaseView
    from provision.inputs.upgrade import Batch, UpgradeOptions
    from provision.phases import PipelineResult, plan_upgrade_run, run_upgrade

    config = str(nodes.config) if nodes.config else "cluster.yaml"
    cluster, settings, target = _judged_inputs(nodes, config, to, gpu_driver)
    batch = Batch.parse(parallel)
    view = PhaseView(nodes.verbose)
    options = UpgradeOptions(target, step=step, parallel=batch, skip_etcd_snapshot=skip_etcd_snapshot,
                             delete_emptydir_data=delete_emptydir_data, canary=canary, pause_after=pause_after,
                             confirm=None if yes or not sys.stdin.isatty() else _asker(view), gpu_driver=gpu_driver)
    title = f"bootstrap upgrade --to {target}: {nodes.inventory}"
    ctx = new_context(cluster, settings, nodes, view)
    ctx.upgrade = options
    try:
        planned = plan_upgrade_run(ctx)
    finally:
        view.stop()
    plan, versions = ctx.results.upgrade, ctx.results.versions
    if planned.error is not None or plan is None:
        show_result(planned, title, output, _document(plan, versions, dry_run=dry_run))
        if planned.error is not None:
            raise planned.error
        return
    lines = plan_lines(plan, cluster, settings, options)
    if dry_run or (plan.nothing_to_do and gpu_driver is None):
        _print_plan_only(lines, title, output, _document(plan, versions, dry_run=dry_run))
        return
    _show_plan_and_confirm(lines, plan, options, yes=yes)
    try:
        result = run_upgrade(ctx, plan)
    finally:
        view.stop()
    _report(PipelineResult(planned.outcomes + result.outcomes, result.error), title, output,
            _document(plan, versions, dry_run=False), options, _closing(plan, settings, config, gpu_driver))


def _judged_inputs(nodes: NodeOptions, config: str, to: str | None,
                   gpu_driver: str | None) -> tuple[Cluster, Settings, Target]:
    """The inventory, the settings (with `--gpu-driver`'s branch) and the target: every refusal the inputs and
    this machine decide is made here, before the cluster is asked anything."""
    from provision.cli.support import load_inputs
    from provision.inputs.upgrade import gpu_driver_settings, parse_target, step_settings
    from provision.kube.kubeconfig import admin_kubeconfig_path

    cluster, settings = load_inputs(nodes)
    target = parse_target(to, settings) if to is not None else parse_target(
        settings.kubernetes.version, settings, source=f"{config}: kubernetes.version")
    # An add-on or Calico release the docs say does not run on a minor the upgrade reaches is refused here,
    # before anything is read from the cluster or any play runs (each step checks its own again).
    for minor in range(min(settings.kubernetes.minor_number + 1, target.minor), target.minor + 1):
        step_settings(settings, f"1.{minor}")
    if gpu_driver is not None:
        # The run's settings carry the new branch: preflight holds every GPU against it before anything moves.
        settings = gpu_driver_settings(settings, gpu_driver)
    if not admin_kubeconfig_path(cluster).exists():
        raise InputError(f"no cluster formed from {nodes.inventory} on this machine (no admin kubeconfig): "
                         "`bootstrap up` forms one; upgrade is for a running cluster")
    return cluster, settings, target


def _asker(view: PhaseView) -> Callable[[str], bool]:
    """The prompt at a `--pause-after` pause, asked with the live view stopped."""
    def ask(question: str) -> bool:
        view.stop()  # the live view starts again with the next progress
        return typer.confirm(question, default=False, err=True)
    return ask


def _print_plan_only(lines: list[str], title: str, output: Output, document: dict[str, Any]) -> None:
    """`--dry-run`, or nothing to do: the plan, plain (or the JSON document), and nothing run."""
    from provision.cli.console import echo_json

    if output is Output.json:
        echo_json({"command": title, "ok": True} | document)
    else:
        for line in lines:
            typer.echo(line)


def _show_plan_and_confirm(lines: list[str], plan: UpgradePlan, options: UpgradeOptions, *, yes: bool) -> None:
    """The plan shown before anything changes, then the user's yes (unless --yes): a no aborts the command."""
    from provision.cli.console import console

    for line in lines:
        console.print(line, soft_wrap=True)
    if not yes:
        what = f"the NVIDIA driver to {options.gpu_driver}" if plan.nothing_to_do else f"the cluster to {options.target}"
        typer.confirm(f"Upgrade {what} as planned?", abort=True, err=True)


def _again_command(options: UpgradeOptions) -> str:
    """The same upgrade as a command line, to run again after a pause or a failure: it goes on where this one
    stopped."""
    return " ".join(["bootstrap upgrade", f"--to {options.target}", *(["--step"] if options.step else []),
                     *([f"--parallel {options.parallel}"] if str(options.parallel) != "1" else []),
                     *(["--canary"] if options.canary else []),
                     *([f"--pause-after {options.pause_after}"] if options.pause_after is not None else []),
                     *(["--skip-etcd-snapshot"] if options.skip_etcd_snapshot else []),
                     *(["--delete-emptydir-data"] if options.delete_emptydir_data else []),
                     *([f"--gpu-driver {options.gpu_driver}"] if options.gpu_driver else [])])


def _report(result: PipelineResult, title: str, output: Output, document: dict[str, Any], options: UpgradeOptions,
            closing: list[str]) -> None:
    """The run's summary; then, stopped, the command that goes on from there, or, finished, what to set now."""
    from provision.cli.console import console
    from provision.cli.support import show_result

    show_result(result, title, output, document)
    if result.error is not None:
        _say_how_to_go_on(result.error, options)
        raise result.error
    for line in closing:
        console.print(line, style="yellow", soft_wrap=True)


def _say_how_to_go_on(error: BootstrapError, options: UpgradeOptions) -> None:
    """After a pause or a failure: the command that goes on from where the upgrade stopped."""
    from provision.cli.console import console
    from provision.inputs.upgrade import UpgradePaused

    again = _again_command(options)
    if isinstance(error, UpgradePaused):
        console.print(carry(f"paused: run `{again}` to go on"), style="yellow", soft_wrap=True)
        return
    # As printed, with the inventory, settings and state directory this run was given: the same run.
    console.print(carry(f"fix the cause, then re-run `{again}`: it reads what the cluster runs and goes on "
                        "from there"), style="yellow", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("upgrade")(upgrade)
