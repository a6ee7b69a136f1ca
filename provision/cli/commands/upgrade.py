"""`bootstrap upgrade --to 1.37`: the running cluster moved to a newer Kubernetes as kubeadm upgrades one, one
minor at a time. The plan is read from what the cluster runs and shown first (`--dry-run` stops there); every
refusal comes before any change; a failed or killed upgrade, re-run, goes on where it stopped."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from provision.cli.invocation import carry
from provision.cli.option_table import checked, options_of
from provision.cli.options import NodeOptions, Output, OutputOption, YesOption, node_options
from provision.errors import InputError

if TYPE_CHECKING:
    from provision.inputs.inventory import Cluster
    from provision.inputs.settings import Settings
    from provision.inputs.upgrade import UpgradeOptions, UpgradePlan


def plan_lines(plan: UpgradePlan, cluster: Cluster, settings: Settings, options: UpgradeOptions) -> list[str]:
    """The whole plan in order, for people: the checks, the snapshot, each step, the smoke test."""
    from provision.inputs.upgrade import describe_plan

    steps = describe_plan(plan, cluster.control_plane.name)
    if plan.nothing_to_do:
        return steps
    snapshot = ("skipped (--skip-etcd-snapshot: you took one)" if options.skip_etcd_snapshot
                else "from a healthy control plane, checked and kept on this machine")
    smoke = "the smoke test" if settings.smoke_test.enabled else "no smoke test (smoke_test.enabled is false)"
    return [steps[0], f"first, before anything changes: preflight (the rules of 1.{plan.target.minor} on every node: "
            f"containerd, cgroups), then the etcd snapshot {snapshot}", *steps[1:], f"last: {smoke}"]


def _closing(plan: UpgradePlan, settings: Settings, config: str) -> list[str]:
    lines = []
    if settings.kubernetes.minor_number != plan.target.minor:
        lines.append(f"set kubernetes.version: '1.{plan.target.minor}' in {config} now: `up` and `node add` refuse the "
                     "older version (their packages would move nodes back)")
    return lines


def _document(plan: UpgradePlan | None, versions: Any, *, dry_run: bool) -> dict[str, Any]:
    return {"dry_run": dry_run, "plan": plan.as_dict() if plan else None,
            "versions": versions.as_dict() if versions else None}


def register(app: typer.Typer) -> None:
    @app.command("upgrade")
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
        parallel: Annotated[int, options_of("upgrade").option(
            "--parallel", help="Workers drained and upgraded at a time.")] = 1,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Read the cluster, show the plan, change nothing.")] = False,
        skip_etcd_snapshot: Annotated[bool, typer.Option(
            "--skip-etcd-snapshot", help="You took an etcd snapshot yourself: do not take one first.")] = False,
        yes: YesOption = False,
        output: OutputOption = Output.text,
    ) -> None:
        """Upgrade the running cluster: control planes one at a time (kubeadm upgrade apply, then node), then each
        worker drained, upgraded and uncordoned; Calico, the device plugin and add-ons follow; verify and the smoke
        test close. See docs/upgrade.md."""
        from provision.cli.console import console, echo_json
        from provision.cli.support import load_inputs, new_context, show_result
        from provision.cli.views import PhaseView
        from provision.inputs.upgrade import UpgradeOptions, parse_target, step_settings
        from provision.kube.kubeconfig import admin_kubeconfig_path
        from provision.phases import PipelineResult, plan_upgrade_run, run_upgrade

        cluster, settings = load_inputs(nodes)
        config = str(nodes.config) if nodes.config else "cluster.yaml"
        target = parse_target(to, settings) if to is not None else parse_target(
            settings.kubernetes.version, settings, source=f"{config}: kubernetes.version")
        # An add-on or Calico release the docs say does not run on a minor the upgrade reaches is refused here,
        # before anything is read from the cluster or any play runs (each step checks its own again).
        for minor in range(min(settings.kubernetes.minor_number + 1, target.minor), target.minor + 1):
            step_settings(settings, f"1.{minor}")
        if not admin_kubeconfig_path(cluster).exists():
            raise InputError(f"no cluster formed from {nodes.inventory} on this machine (no admin kubeconfig): "
                             "`bootstrap up` forms one; upgrade is for a running cluster")
        options = UpgradeOptions(target, step=step, parallel=parallel, skip_etcd_snapshot=skip_etcd_snapshot)
        title = f"bootstrap upgrade --to {target}: {nodes.inventory}"
        view = PhaseView(nodes.verbose)
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
        if dry_run or plan.nothing_to_do:
            if output is Output.json:
                echo_json({"command": title, "ok": True} | _document(plan, versions, dry_run=dry_run))
            else:
                for line in lines:
                    typer.echo(line)
            return
        for line in lines:
            console.print(line, soft_wrap=True)
        if not yes:
            typer.confirm(f"Upgrade the cluster to {target} as planned?", abort=True, err=True)
        try:
            result = run_upgrade(ctx, plan)
        finally:
            view.stop()
        combined = PipelineResult(planned.outcomes + result.outcomes, result.error)
        show_result(combined, title, output, _document(plan, versions, dry_run=False))
        if result.error is not None:
            again = " ".join(["bootstrap upgrade", f"--to {target}", *(["--step"] if step else []),
                              *([f"--parallel {parallel}"] if parallel > 1 else []),
                              *(["--skip-etcd-snapshot"] if skip_etcd_snapshot else [])])
            # As printed, with the inventory, settings and state directory this run was given: the same run.
            console.print(carry(f"fix the cause, then re-run `{again}`: it reads what the cluster runs and goes on "
                                "from there"), style="yellow", soft_wrap=True)
            raise result.error
        for line in _closing(plan, settings, config):
            console.print(line, style="yellow", soft_wrap=True)
