"""upgrade_repositories (`bootstrap upgrade`, each step): the Kubernetes repository of the step's minor on every
node of the step (the mirror or offline source the settings name, in the pkgs.k8s.io layout), nothing installed
yet; then the step's release chosen once, from the kubeadm releases the first control plane's repository offers
(the newest, or the one asked for), and recorded in the cluster's state for every later node and re-run."""
from __future__ import annotations

from provision.errors import BootstrapError
from provision.inputs.sources import resolve_sources
from provision.inputs.upgrade import Release, Step
from provision.nodes.upgrade import read_kube_versions
from provision.phases.engine import Phase, PhaseContext


def _step(ctx: PhaseContext) -> Step:
    if ctx.step is None or ctx.state.upgrade is None:
        raise BootstrapError("internal: upgrade phases run inside `bootstrap upgrade`'s steps")
    return ctx.step


def limit(ctx: PhaseContext) -> list[str]:
    step = _step(ctx)
    first = ctx.cluster.control_plane.name
    # The first control plane says which releases there are, also when it is past this step already.
    return [first, *(name for name in step.nodes if name != first)]


def choose(step: Step, offered: tuple[Release, ...], repository: str) -> str:
    """The step's release: the one asked for if the repository has it, else the newest it has of the minor."""
    mine = sorted(r for r in offered if r.minor == step.minor)
    wanted = step.release
    if wanted is not None:
        if offered and wanted not in offered:
            shown = ", ".join(str(r) for r in reversed(mine)) or "none of 1." + str(step.minor)
            raise BootstrapError(f"upgrade_repositories: kubeadm {wanted} is not in the Kubernetes repository "
                                 f"{repository} (it offers {shown}): ask for one of those with --to, or check the "
                                 "mirror (mirrors.kubernetes_repo, offline.source)")
        return str(wanted)
    if not mine:
        raise BootstrapError(f"upgrade_repositories: the Kubernetes repository {repository} offers no kubeadm "
                             f"1.{step.minor}: check the mirror or offline source (mirrors.kubernetes_repo, "
                             "offline.source; docs/offline.md)")
    return str(mine[-1])


def check(ctx: PhaseContext) -> str:
    step = _step(ctx)
    record = ctx.state.upgrade
    assert record is not None
    first = ctx.cluster.control_plane.name
    reports = read_kube_versions(ctx.playbook_results[-1], ctx.cluster, [first])
    repository = f"{resolve_sources(ctx.settings).kubernetes_repo}/v1.{step.minor}/"
    release = choose(step, reports[first].offered, repository)
    record.releases[f"1.{step.minor}"] = release
    ctx.state.save(ctx.cluster)
    how = "asked for" if step.release else "the newest it offers"
    return f"v1.{step.minor} repository on {len(limit(ctx))} nodes; release {release} ({how})"


PHASE = Phase("upgrade_repositories", "the Kubernetes repository of the step's minor on its nodes", check,
              playbook="upgrade_repositories.yml", limit=limit)
