"""One node's part of an upgrade step, shared by upgrade_control_planes and upgrade_workers: cordoned and drained
through the API (what a PodDisruptionBudget holds back is waited for, never forced), moved to the step's release
by playbooks/upgrade_node.yml, its kubelet seen back on that release and Ready, then uncordoned (unless it was
cordoned before the upgrade). Every stage is recorded in the cluster's state before the next begins, so a re-run
after a failure or a kill goes on from it; a node a killed run left cordoned, and that is there already, is
uncordoned."""
from __future__ import annotations

from collections.abc import Sequence

from kubernetes import client

from provision.errors import BootstrapError
from provision.inputs.state import NodeStage, UpgradeRecord
from provision.inputs.upgrade import Step
from provision.kube.drain import Blocked, cordon, drain_for_upgrade, uncordon
from provision.kube.kubeconfig import fetched_kubeconfig_path, refresh_admin_credentials
from provision.kube.upgrade import wait_for_kubelet
from provision.nodes.runner import PlaybookResult, failure_line, failure_mark, nodes_error, run_playbook
from provision.phases.common import api
from provision.phases.engine import PhaseContext
from provision.render.playbook_vars import upgrade_node_vars

PLAYBOOK = "upgrade_node.yml"


def running(ctx: PhaseContext) -> tuple[Step, str, UpgradeRecord]:
    """The step, its release (chosen by upgrade_repositories), and the upgrade's record."""
    step, record = ctx.step, ctx.state.upgrade
    release = record.releases.get(f"1.{step.minor}") if step and record else None
    if step is None or record is None or release is None:
        raise BootstrapError("internal: a node's upgrade runs inside a step whose release is chosen")
    return step, release, record


def _stage(ctx: PhaseContext, name: str, stage: str) -> None:
    record = ctx.state.upgrade
    assert record is not None
    record.nodes[name].stage = stage
    ctx.state.save(ctx.cluster)


def _back_in_service(ctx: PhaseContext, api_client: client.ApiClient, name: str) -> None:
    record = ctx.state.upgrade
    assert record is not None
    if not record.nodes[name].was_unschedulable:
        uncordon(api_client, name)
    _stage(ctx, name, "done")


def nothing_to_do(ctx: PhaseContext, names: Sequence[str], pending: Sequence[str], what: str) -> str | None:
    """Why an upgrade phase for `names` (the control planes, or the workers) is skipped: none of them pending in the
    step, and none left out of service by a stopped run; else None."""
    _, release, record = running(ctx)
    left = [name for name in names if name in record.nodes and record.nodes[name].stage != "done"]
    if pending or left:
        return None
    return f"every {what} runs {release}" if names else f"no {what}s"


def finish_left_behind(ctx: PhaseContext, names: Sequence[str]) -> list[str]:
    """The nodes of `names` that a stopped run left out of service although they need nothing more: uncordoned
    (unless they were cordoned before the upgrade). Returns them."""
    step, release, record = running(ctx)
    left = [name for name in names if name not in step.nodes and name in record.nodes
            and record.nodes[name].stage != "done"]
    if left:
        api_client = api(ctx)
        for name in left:
            ctx.say(f"{name} is at {release} but a stopped run left it out of service: uncordoning it")
            _back_in_service(ctx, api_client, name)
    return left


def upgrade_nodes(ctx: PhaseContext, names: Sequence[str]) -> PlaybookResult:
    """Drain `names` (one by one), upgrade them in one run of the playbook, and put back in service those it
    upgraded; raises BootstrapError naming each node it could not upgrade (they stay cordoned)."""
    _, release, record = running(ctx)
    api_client = api(ctx)
    timeout = ctx.settings.upgrade.drain_timeout_s
    for name in names:
        known = record.nodes.get(name)
        was = cordon(api_client, name)
        if known is None or known.release != release:
            record.nodes[name] = NodeStage(release, "cordoned", was_unschedulable=was)
        ctx.state.save(ctx.cluster)
        ctx.say(f"{name}: cordoned; evicting its pods (disruption budgets respected, up to {timeout} s)")

        def waiting(blocked: Blocked, node: str = name) -> None:
            ctx.say(f"waiting: {node}: {blocked.pod} held back: {blocked.reason}")
        drain_for_upgrade(api_client, name, timeout_s=timeout, on_wait=waiting)
        _stage(ctx, name, "drained")
    ctx.say(f"{', '.join(names)}: upgrading to {release}")
    result = run_playbook(PLAYBOOK, ctx.cluster, ctx.settings, phase="upgrade_node",
                          limit=ctx.cluster.hosts(names),
                          extra_vars=upgrade_node_vars(fetched_kubeconfig_path(ctx.cluster)),
                          pythons=ctx.state.pythons, on_progress=ctx.on_progress, verbose=ctx.verbose,
                          become_password=ctx.become_password)
    ctx.playbook_results.append(result)
    name_of: dict[str, str] = {node.host: node.name for node in ctx.cluster.nodes}
    failed = {name_of.get(host, host): failure for host, failure in result.failed_hosts.items()}
    if not result.ok and not failed:
        result.raise_for_failure()
    for name in names:
        if name in failed:
            continue
        _stage(ctx, name, "upgraded")
        if name == ctx.cluster.control_plane.name:
            refresh_admin_credentials(fetched_kubeconfig_path(ctx.cluster), ctx.cluster, ctx.settings)
            api_client = api(ctx)
        wait_for_kubelet(api_client, name, f"v{release}", timeout_s=ctx.settings.verify.timeout_s,
                         on_message=ctx.say)
        _back_in_service(ctx, api_client, name)
    if failed:
        lines = {name: failure_line(failure) for name, failure in failed.items()}
        marks = {name: failure_mark(failure) for name, failure in failed.items()}
        raise nodes_error(result.phase, lines, marks, len(names), result.run_dir / "run.log")
    return result


def certificates_note(names: Sequence[str]) -> str:
    """What an upgrade did to the certificates, as kubeadm does it: `kubeadm upgrade apply` and `node` renew the
    certificates they manage on each control plane."""
    return (f"kubeadm renewed the certificates on {', '.join(names)} (its default; `bootstrap certs check` "
            "lists them)")


