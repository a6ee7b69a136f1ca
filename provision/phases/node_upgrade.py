"""One node's part of an upgrade, shared by upgrade_control_planes, upgrade_workers and upgrade_gpu_driver: what
kubectl drain refuses refused before the node is touched, then cordoned and drained through the API (what a
PodDisruptionBudget holds back is waited for, never forced), its work done by a playbook (upgrade_node.yml: the
step's release; upgrade_gpu_driver.yml: the NVIDIA driver), the node seen back (its kubelet on the release and
Ready; its GPUs allocatable again), then uncordoned (unless it was cordoned before the upgrade). Every stage is
recorded in the cluster's state before the next begins, so a re-run after a failure or a kill goes on from it; a
node a killed run left cordoned, and that is there already, is uncordoned once it is back."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes import client

from provision.errors import BootstrapError
from provision.inputs.state import NodeStage, UpgradeRecord
from provision.inputs.upgrade import Step
from provision.kube.drain import Blocked, cordon, drain_for_upgrade, drain_refusal, is_unschedulable, uncordon
from provision.kube.kubeconfig import fetched_kubeconfig_path, refresh_admin_credentials
from provision.kube.upgrade import applied_config, wait_for_kubelet
from provision.nodes.runner import PlaybookResult, failure_line, failure_mark, nodes_error, run_playbook
from provision.phases.common import api
from provision.phases.engine import PhaseContext
from provision.render.playbook_vars import prepare_vars, upgrade_node_vars

PLAYBOOK = "upgrade_node.yml"


def running(ctx: PhaseContext) -> tuple[Step, str, UpgradeRecord]:
    """The step, its release (chosen by upgrade_repositories), and the upgrade's record."""
    step, record = ctx.step, ctx.state.upgrade
    release = record.releases.get(f"1.{step.minor}") if step and record else None
    if step is None or record is None or release is None:
        raise BootstrapError("internal: a node's upgrade runs inside a step whose release is chosen")
    return step, release, record


Book = Literal["nodes", "gpu_driver"]


@dataclass(frozen=True)
class NodeWork:
    """What a group of drained nodes goes through: the playbook and its variables, what they move to (a release, a
    driver branch: the key of each node's stage), the record the stages are kept in, and what says a node is back."""

    what: str
    key: str
    playbook: str
    phase: str
    extra_vars: dict[str, Any]
    # Waits until the node may go back in service; BootstrapError past the timeout (it stays cordoned).
    back: Callable[[client.ApiClient, str], None]
    book: Book = "nodes"
    # Runs after the playbook for each node it did not fail on, before the node is back (may raise).
    after: Callable[[str], client.ApiClient | None] | None = None


def _stages(ctx: PhaseContext, book: Book) -> dict[str, NodeStage]:
    record = ctx.state.upgrade
    assert record is not None
    return record.nodes if book == "nodes" else record.gpu_driver


def _stage(ctx: PhaseContext, name: str, stage: str, book: Book = "nodes") -> None:
    _stages(ctx, book)[name].stage = stage
    ctx.state.save(ctx.cluster)


def _back_in_service(ctx: PhaseContext, api_client: client.ApiClient, name: str, back: Callable[[client.ApiClient, str],
                     None], book: Book = "nodes") -> bool:
    """Uncordon `name` once `back` says it is (never before: kubeadm's upgrade guide uncordons a node only after its
    kubelet restarted on the new release), unless the operator had cordoned it before the upgrade: that cordon is
    theirs and stays."""
    back(api_client, name)
    kept = _stages(ctx, book)[name].was_unschedulable
    if not kept:
        uncordon(api_client, name)
    _stage(ctx, name, "done", book)
    return not kept


def _kubelet_back(ctx: PhaseContext, release: str) -> Callable[[client.ApiClient, str], None]:
    """Its kubelet reports `release` and the node is Ready."""
    def back(api_client: client.ApiClient, name: str) -> None:
        wait_for_kubelet(api_client, name, f"v{release}", timeout_s=ctx.settings.verify.timeout_s, on_message=ctx.say)
    return back


def _take_out(ctx: PhaseContext, api_client: client.ApiClient, name: str, key: str, book: Book = "nodes") -> None:
    """Cordon `name` for its work (`key`), with whether the operator had cordoned it recorded first: read before our
    own cordon is sent, and kept by a re-run (which finds the node cordoned by us), so a run killed between the two
    never takes our cordon for the operator's."""
    stages = _stages(ctx, book)
    known = stages.get(name)
    if known is None or known.release != key:
        stages[name] = NodeStage(key, "cordoning", was_unschedulable=is_unschedulable(api_client, name))
        ctx.state.save(ctx.cluster)
    cordon(api_client, name)
    if stages[name].stage == "cordoning":
        _stage(ctx, name, "cordoned", book)


def nothing_to_do(ctx: PhaseContext, names: Sequence[str], pending: Sequence[str], what: str) -> str | None:
    """Why an upgrade phase for `names` (the control planes, or the workers) is skipped: none of them pending in the
    step, and none left out of service by a stopped run; else None."""
    _, release, record = running(ctx)
    left = [name for name in names if name in record.nodes and record.nodes[name].stage != "done"]
    if pending or left:
        return None
    return f"every {what} runs {release}" if names else f"no {what}s"


def finish_left_behind(ctx: PhaseContext, names: Sequence[str]) -> list[str]:
    """The nodes of `names` that a stopped run left out of service although they need nothing more: back in service
    once their kubelet reports the release and is Ready (uncordoned, unless they were cordoned before the upgrade).
    Returns what became of each ("w1 uncordoned", "w2 left cordoned as it was before the upgrade")."""
    step, release, record = running(ctx)
    left = [name for name in names if name not in step.nodes and name in record.nodes
            and record.nodes[name].stage != "done"]
    done = []
    if left:
        api_client = api(ctx)
        for name in left:
            ctx.say(f"{name} is at {release} but a stopped run left it out of service: back in service once its "
                    "kubelet reports it and is Ready")
            uncordoned = _back_in_service(ctx, api_client, name, _kubelet_back(ctx, release))
            done.append(f"{name} uncordoned" if uncordoned else f"{name} left cordoned as it was before the upgrade")
    return done


def drained(ctx: PhaseContext, names: Sequence[str], work: NodeWork) -> PlaybookResult:
    """Drain `names` (one by one), do `work` on them in one run of its playbook, and put back in service those it
    did; raises BootstrapError naming each node it failed on (they stay cordoned)."""
    api_client = api(ctx)
    timeout = ctx.settings.upgrade.drain_timeout_s
    emptydir = bool(ctx.upgrade and ctx.upgrade.delete_emptydir_data)
    for name in names:
        # What kubectl drain refuses is refused before the node is cordoned: it is left as it was.
        refusal = drain_refusal(api_client, name, delete_emptydir_data=emptydir)
        if refusal:
            raise BootstrapError(f"{refusal} ({name} was not cordoned)")
        _take_out(ctx, api_client, name, work.key, work.book)
        ctx.say(f"{name}: cordoned; evicting its pods (disruption budgets respected, up to {timeout} s)")

        def waiting(blocked: Blocked, node: str = name) -> None:
            ctx.say(f"waiting: {node}: {blocked.pod} held back: {blocked.reason}")
        drain_for_upgrade(api_client, name, timeout_s=timeout, on_wait=waiting, delete_emptydir_data=emptydir)
        _stage(ctx, name, "drained", work.book)
    ctx.say(f"{', '.join(names)}: {work.what}")
    result = run_playbook(work.playbook, ctx.cluster, ctx.settings, phase=work.phase, limit=ctx.cluster.hosts(names),
                          extra_vars=work.extra_vars, pythons=ctx.state.pythons, on_progress=ctx.on_progress,
                          verbose=ctx.verbose, become_password=ctx.become_password)
    ctx.playbook_results.append(result)
    name_of: dict[str, str] = {node.host: node.name for node in ctx.cluster.nodes}
    failed = {name_of.get(host, host): failure for host, failure in result.failed_hosts.items()}
    if not result.ok and not failed:
        result.raise_for_failure()
    for name in names:
        if name in failed:
            continue
        _stage(ctx, name, "upgraded", work.book)
        if work.after is not None:
            api_client = work.after(name) or api_client
        _back_in_service(ctx, api_client, name, work.back, work.book)
    if failed:
        lines = {name: failure_line(failure) for name, failure in failed.items()}
        marks = {name: failure_mark(failure) for name, failure in failed.items()}
        raise nodes_error(result.phase, lines, marks, len(names), result.run_dir / "run.log")
    return result


def upgrade_nodes(ctx: PhaseContext, names: Sequence[str], *, apply: bool = False) -> PlaybookResult:
    """The step's release on `names` (drained, playbooks/upgrade_node.yml, the kubelet back on the release and
    Ready, uncordoned). `apply`: the first control plane runs `kubeadm upgrade plan` and `apply` (decided by the
    caller from the cluster's configuration), checked in the cluster before it goes back in service."""
    step, release, _ = running(ctx)
    containerd = [ctx.cluster.node(name).host for name, _ in step.containerd if name in names]

    def after(name: str) -> client.ApiClient | None:
        if name != ctx.cluster.control_plane.name:
            return None
        refresh_admin_credentials(fetched_kubeconfig_path(ctx.cluster), ctx.cluster, ctx.settings)
        fresh = api(ctx)
        left = applied_config(fresh).behind(f"v{release}") if apply else []
        if left:
            raise BootstrapError(f"`kubeadm upgrade apply v{release}` on {name} ended, but {'; '.join(left)}: see "
                                 f"its output in the run's log, then re-run the upgrade with the same --to (it "
                                 f"applies again before any other control plane moves; {name} stays cordoned)")
        return fresh
    work = NodeWork(f"upgrading to {release}", release, PLAYBOOK, "upgrade_node",
                    upgrade_node_vars(fetched_kubeconfig_path(ctx.cluster), apply=apply, containerd=containerd)
                    # A GPU node's nvidia runtime goes into containerd's new configuration again.
                    | (prepare_vars(ctx.cluster, ctx.state.gpus or {}, ctx.state.gpu_generations) if containerd else {}),
                    _kubelet_back(ctx, release),
                    after=after)
    return drained(ctx, names, work)


def certificates_note(names: Sequence[str]) -> str:
    """What an upgrade did to the certificates, as kubeadm does it: `kubeadm upgrade apply` and `node` renew the
    certificates they manage on each control plane."""
    return (f"kubeadm renewed the certificates on {', '.join(names)} (its default; `bootstrap certs check` "
            "lists them)")


