"""upgrade_plan (`bootstrap upgrade`, and all of `--dry-run`): every node's Kubernetes versions read (the
cb_kube_versions module: kubeadm, kubelet, kubectl, the control plane's static pods; the first control plane's
repository's kubeadm releases), the API server's version and every kubelet that runs from the API, then the plan
to the version asked for, or the refusal of what kubeadm would not do; and what `kubeadm upgrade apply` last finished
(the kubeadm-config ConfigMap's kubernetesVersion, kube-proxy's image). Only reads."""
from __future__ import annotations

from collections.abc import Mapping

from provision.errors import BootstrapError
from provision.inputs.inventory import Cluster
from provision.inputs.upgrade import ClusterVersions, NodeVersions, Release, plan_upgrade, settings_for_steps
from provision.kube.upgrade import AppliedConfig, NodeStatus, api_server_version, applied_config, node_statuses
from provision.nodes.upgrade import KubeVersions, read_kube_versions
from provision.phases.common import api
from provision.phases.engine import Phase, PhaseContext


def versions_from(cluster: Cluster, reports: Mapping[str, KubeVersions], server: str,
                  statuses: Mapping[str, NodeStatus], applied: AppliedConfig | None = None) -> ClusterVersions:
    """The cluster's versions from what was read: each node's report (node name -> the cb_kube_versions document),
    the API server's version, the Nodes' statuses (a node of the inventory without one has not joined), and what
    `kubeadm upgrade apply` last finished."""
    release = Release.parse(server)
    if release is None:
        raise BootstrapError(f"upgrade_plan: the API server reports version {server!r}, which is no Kubernetes "
                             "release this tool can upgrade")
    nodes = []
    for node in cluster.nodes:
        report = reports[node.name]
        status = statuses.get(node.name)
        nodes.append(NodeVersions(node.name, node.is_control_plane,
                                  kubelet=Release.parse(status.kubelet) if status else None,
                                  kubeadm=Release.parse(report.kubeadm),
                                  static_pods=report.static_pods_release if node.is_control_plane else None,
                                  containerd=report.containerd_release))
    finished = None
    if applied is not None:
        parts = [Release.parse(applied.kubernetes_version),
                 *([Release.parse(applied.kube_proxy)] if applied.kube_proxy_installed else [])]
        finished = min(parts) if all(p is not None for p in parts) else None  # type: ignore[type-var]
    return ClusterVersions(release, tuple(nodes), reports[cluster.control_plane.name].offered, applied=finished)


def read_versions(ctx: PhaseContext) -> ClusterVersions:
    reports = read_kube_versions(ctx.playbook_results[-1], ctx.cluster)
    client = api(ctx)
    return versions_from(ctx.cluster, reports, api_server_version(client), node_statuses(client),
                         applied_config(client))


def resolved_releases(ctx: PhaseContext) -> dict[int, str]:
    """The releases an unfinished upgrade chose for its minors (a re-run keeps them)."""
    record = ctx.state.upgrade
    if record is None or record.finished:
        return {}
    return {int(minor.split(".")[1]): release for minor, release in record.releases.items()}


def check(ctx: PhaseContext) -> str:
    if ctx.upgrade is None:
        raise BootstrapError("internal: upgrade_plan runs for `bootstrap upgrade` only")
    found = read_versions(ctx)
    ctx.results.versions = found
    plan = plan_upgrade(found, ctx.upgrade.target, step=ctx.upgrade.step, resolved=resolved_releases(ctx))
    # Each step's settings (Calico's pairing, the add-ons' stated Kubernetes ranges) are refused here, in the plan,
    # not when the step before them has already moved the cluster; the add-ons' tested ranges are its warnings.
    plan = settings_for_steps(plan, ctx.settings)
    ctx.results.upgrade = plan
    if plan.nothing_to_do:
        return f"every node runs {found.control_plane}: nothing to upgrade"
    steps = ", ".join(step.version for step in plan.steps)
    return f"{found.control_plane} -> {ctx.upgrade.target}: {len(plan.steps)} step{'s' * (len(plan.steps) > 1)} ({steps})"


PHASE = Phase("upgrade_plan", "read every node's versions and plan the upgrade", check,
              playbook="upgrade_versions.yml", needs=("kubeconfig",), read_only=True)
