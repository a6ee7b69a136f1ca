"""upgrade_workers (`bootstrap upgrade`, each step): the workers in groups (one at a time; `--parallel N` or `N%`
together; with `--canary` the first one alone before the others), each cordoned and drained, `kubeadm upgrade
node`, its kubelet and kubectl, the kubelet back on the release and Ready, uncordoned. `--pause-after N` stops for
the operator's confirmation once N workers were upgraded in this run (a re-run of the same command goes on)."""
from __future__ import annotations

from provision.inputs.upgrade import Batch, UpgradePaused, worker_batches
from provision.phases.engine import Phase, PhaseContext
from provision.phases.node_upgrade import finish_left_behind, nothing_to_do, running, upgrade_nodes


def skip_reason(ctx: PhaseContext) -> str | None:
    step, _, _ = running(ctx)
    return nothing_to_do(ctx, [n.name for n in ctx.cluster.workers], step.workers, "worker")


def _canary_done(ctx: PhaseContext) -> bool:
    """Whether a worker of this step is back in service at its release already (a canary was, in an earlier run)."""
    _, release, record = running(ctx)
    workers = {node.name for node in ctx.cluster.workers}
    return any(stage.release == release and stage.stage == "done" for name, stage in record.nodes.items()
               if name in workers)


def check(ctx: PhaseContext) -> str:
    step, release, _ = running(ctx)
    options = ctx.upgrade
    batch = options.parallel if options else Batch()
    canary = bool(options and options.canary) and not _canary_done(ctx)
    pause_after = options.pause_after if options else None
    back = finish_left_behind(ctx, [n.name for n in ctx.cluster.workers])
    groups = worker_batches(step.workers, batch, canary=canary)
    since_pause = 0
    for index, group in enumerate(groups):
        upgrade_nodes(ctx, group)
        since_pause += len(group)
        left = [name for later in groups[index + 1:] for name in later]
        if pause_after is not None and since_pause >= pause_after and left:
            done = [name for earlier in groups[:index + 1] for name in earlier]
            question = (f"{', '.join(done)} at {release}{' (the canary first)' if canary else ''}; "
                        f"{', '.join(left)} left")
            if options is None or options.confirm is None or not options.confirm(f"{question}: go on?"):
                raise UpgradePaused(f"paused after {question} (--pause-after {pause_after}): check the upgraded "
                                    "workers, then run the same command again to go on")
            since_pause = 0
    parts = []
    if step.workers:
        at_a_time = "one at a time" if batch.size(len(step.workers)) == 1 else f"{batch} at a time"
        parts.append(f"{', '.join(step.workers)} at {release}, "
                     + (f"{groups[0][0]} first (canary), then " if canary else "") + at_a_time)
    if back:
        parts.append(f"{', '.join(back)} (already at {release})")
    return "; ".join(parts)


PHASE = Phase("upgrade_workers", "each worker: drain, kubeadm upgrade node, kubelet, uncordon", check,
              needs=("kubeconfig",), skip_reason=skip_reason)
