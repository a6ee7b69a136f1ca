"""Upgrading a running cluster: the versions read from it, the version asked for, and the plan between them, one
minor at a time as kubeadm upgrades, or the one-line refusal of what upstream does not support.

Pure: the versions come in as data (read from the nodes and the API by the upgrade_plan phase), the plan or an
InputError comes out, so every refusal happens before anything changes. kubeadm's own rules, as its
cmd/kubeadm/app/phases/upgrade/policy.go states them: the control plane moves one minor at a time
(MaximumAllowedMinorVersionUpgradeSkew = 1), never down a minor in an upgrade, and only while every kubelet is at
most three minors older than the version it moves to (MaximumAllowedMinorVersionKubeletSkew = 3 since kubeadm 1.29,
kubernetes/kubernetes#120825, following the version-skew policy: "kubelet may be up to three minor versions older
than kube-apiserver"; https://kubernetes.io/releases/version-skew-policy/#kubelet).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from provision.errors import BootstrapError, InputError
from provision.inputs import versions
from provision.inputs.settings import KubernetesSettings, Settings
from provision.inputs.validation import addon_warnings
from provision.inputs.values import parse_batch_size

# kubeadm's policy (above): how far one upgrade moves the control plane, and how far a kubelet may lag the control
# plane. A kubelet that lags is upgraded in place (drained first: the version-skew policy supports no in-place minor
# kubelet upgrade without a drain) in the step at the control plane's own minor, before any step moves the control
# plane on, so every kubelet is within the skew of each `kubeadm upgrade apply`.
UPGRADE_SKEW = 1
KUBELET_SKEW = 3
# A release as a cluster reports it: the API server's gitVersion, `kubeadm version -o short`, a kubelet's version,
# a static pod's image tag (v1.36.4, 1.36.4, v1.36.4+vendor, v1.36.4-rc.1).
RELEASE_RE = re.compile(r"v?1\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,3})(?:[-+][0-9A-Za-z.+-]*)?", re.ASCII)


@dataclass(frozen=True, order=True)
class Release:
    """A Kubernetes release: 1.<minor>.<patch>."""

    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str | None) -> Release | None:
        """The release a version string names; None for anything else (nothing read, another product)."""
        match = RELEASE_RE.fullmatch(text.strip()) if isinstance(text, str) else None
        return cls(int(match.group(1)), int(match.group(2))) if match else None

    def __str__(self) -> str:
        return f"1.{self.minor}.{self.patch}"


@dataclass(frozen=True)
class Target:
    """The version asked for: a minor (its newest patch, as its repository offers it) or a release."""

    minor: int
    patch: int | None = None

    def __str__(self) -> str:
        return f"1.{self.minor}" if self.patch is None else f"1.{self.minor}.{self.patch}"


def parse_target(text: str, settings: Settings, *, source: str = "--to") -> Target:
    """`--to` (or kubernetes.version) read as kubernetes.version is: the same format and the same versions table,
    so a minor past its end of life or newer than the table is refused the same way."""
    try:
        checked = KubernetesSettings.model_validate(
            {"version": text, "allow_untested_versions": settings.kubernetes.allow_untested_versions})
    except ValidationError as exc:
        raise InputError(f"{source}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    parts = checked.version.split(".")
    return Target(int(parts[1]), int(parts[2]) if len(parts) == 3 else None)


def gpu_driver_settings(settings: Settings, text: str, *, source: str = "--gpu-driver") -> Settings:
    """The settings with gpu.driver_branch moved to `text`, checked as cluster.yaml's would be (the branch's shape,
    the versions table, the smoke image's CUDA against it); InputError naming `source` otherwise."""
    document = settings.model_dump(mode="json", by_alias=True, exclude_unset=False)
    document["gpu"]["driver_branch"] = text
    try:
        return Settings.model_validate(document)
    except ValidationError as exc:
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise InputError(f"{source}: {message}") from None


def step_settings(settings: Settings, version: str) -> Settings:
    """The settings a step runs with: kubernetes.version moved to the step's version, and Calico to the release
    the versions table pairs with it where calico.version was the pairing of the minor the settings named (a
    version the user chose is kept, and checked against the step's minor). Refused (InputError) where the step's
    minor is outside what the chosen Calico or an enabled add-on states it supports."""
    kube = settings.kubernetes
    paired = versions.kubernetes_release(kube.minor_number).calico
    minor = int(version.split(".")[1])
    calico = settings.calico.version
    if calico == paired:
        calico = versions.kubernetes_release(minor).calico
    problem = versions.calico_problem(calico, minor)
    if problem:
        raise InputError(f"calico.version: {problem} (the upgrade moves the cluster to Kubernetes 1.{minor})")
    moved = settings.model_copy(update={
        "kubernetes": kube.model_copy(update={"version": version}),
        "calico": settings.calico.model_copy(update={"version": calico})})
    problem = moved.addons_kubernetes_problem()
    if problem:
        raise InputError(f"{problem} (the upgrade moves the cluster to Kubernetes 1.{minor})")
    return moved


@dataclass(frozen=True)
class Batch:
    """How many workers are drained and upgraded together: a number of nodes, or a percentage of the step's
    workers (rounded up: at least one)."""

    count: int = 1
    percent: int | None = None

    @classmethod
    def parse(cls, text: str, *, source: str = "--parallel") -> Batch:
        """`2` or `25%` (values.BATCH_SIZE); InputError naming `source` otherwise."""
        try:
            checked = parse_batch_size(text)
        except ValueError as exc:
            raise InputError(f"{source}: {exc}") from None
        return cls(percent=int(checked[:-1])) if checked.endswith("%") else cls(count=int(checked))

    def size(self, workers: int) -> int:
        if self.percent is None:
            return self.count
        return max(1, math.ceil(workers * self.percent / 100))

    def __str__(self) -> str:
        return f"{self.percent}%" if self.percent is not None else str(self.count)


def worker_batches(workers: Sequence[str], batch: Batch, *, canary: bool = False) -> list[tuple[str, ...]]:
    """The workers of a step in the groups they are drained and upgraded in, in order: with `canary` the first one
    alone, then groups of `batch` (a percentage counts all of `workers`)."""
    names = list(workers)
    groups: list[tuple[str, ...]] = []
    if canary and names:
        groups.append((names.pop(0),))
    size = batch.size(len(workers))
    groups += [tuple(names[start:start + size]) for start in range(0, len(names), size)]
    return groups


class UpgradePaused(BootstrapError):
    """`--pause-after` stopped the upgrade between two groups of workers, as asked: nothing failed, and the same
    command goes on from there."""

    exit_code = 3


@dataclass(frozen=True)
class UpgradeOptions:
    """What `bootstrap upgrade` was asked."""

    target: Target
    # Reach a target more than one minor ahead one minor at a time (else refused).
    step: bool = False
    # Workers upgraded at a time.
    parallel: Batch = Batch()
    # The operator took the etcd snapshot themselves.
    skip_etcd_snapshot: bool = False
    # Evict pods with emptyDir volumes (their data is lost), as `kubectl drain --delete-emptydir-data`.
    delete_emptydir_data: bool = False
    # The first worker of a step alone, before the others.
    canary: bool = False
    # Stop for confirmation once this many workers were upgraded in this run (then after as many again).
    pause_after: int | None = None
    # Asks the operator whether to go on at a pause (the CLI's prompt); None: stop there (UpgradePaused).
    confirm: Callable[[str], bool] | None = field(default=None, compare=False)
    # `--gpu-driver BRANCH`: the NVIDIA driver (and the container toolkit of the settings) moved to this branch on
    # every GPU node, under drain, after the Kubernetes steps.
    gpu_driver: str | None = None


def settings_behind(settings: Settings, cluster_release: str | None) -> str | None:
    """Why settings whose kubernetes.version is an older minor than the cluster runs (the state's record: what
    prepare installed, or a finished upgrade moved it to) cannot be used to prepare or join nodes (their packages
    would move nodes back), or None."""
    release = Release.parse(cluster_release)
    if release is None or settings.kubernetes.minor_number >= release.minor:
        return None
    # No command in backticks: printed, it would be completed as a command to run, and an upgrade run with these
    # settings would aim at the older version.
    return (f"kubernetes.version is {settings.kubernetes.version}, but the cluster runs {release} (an upgrade moved "
            f"it forward): set kubernetes.version: '1.{release.minor}' in cluster.yaml (older packages would move its "
            "nodes back)")


@dataclass(frozen=True)
class NodeVersions:
    """What one node runs, as the upgrade_plan phase read it."""

    name: str
    control_plane: bool
    # The kubelet that runs, as its Node object reports it; None: no Node of that name in the cluster.
    kubelet: Release | None
    # The kubeadm installed on the node; None: none found.
    kubeadm: Release | None = None
    # A control plane: the oldest of its control-plane static pods (kube-apiserver, -controller-manager,
    # -scheduler), by their images; None where there are none.
    static_pods: Release | None = None
    # The node's containerd (1, 7, 28); None: not read.
    containerd: tuple[int, ...] | None = None

    def at(self, release: Release) -> bool:
        """Whether the node is done at `release`: its kubelet runs it, its kubeadm is it, and for a control plane
        its static pods run it."""
        return (self.kubelet == release and self.kubeadm == release
                and (not self.control_plane or self.static_pods == release))

    def releases(self) -> list[Release]:
        return [r for r in (self.kubelet, self.kubeadm, self.static_pods) if r is not None]


@dataclass(frozen=True)
class ClusterVersions:
    """The running cluster's versions: the API server's, and every node's of the inventory (inventory order)."""

    api_server: Release
    nodes: tuple[NodeVersions, ...]
    # The kubeadm releases the first control plane's Kubernetes repository offers (its current minor's).
    available: tuple[Release, ...] = ()
    # What `kubeadm upgrade apply` last finished in the cluster: the older of the kubeadm-config ConfigMap's
    # kubernetesVersion and kube-proxy's image (apply's upload-config and, near its end, kube-proxy phases); None
    # where neither names a release. A first control plane at a release whose apply did not finish (a run killed in
    # it) is not done: `kubeadm upgrade node` on the others reads the version from that ConfigMap.
    applied: Release | None = None

    @property
    def control_plane(self) -> Release:
        """The control plane's release: the oldest of the API server's and every control plane's static pods (a
        control plane left behind by an interrupted upgrade holds the cluster there)."""
        found = [n.static_pods for n in self.nodes if n.control_plane and n.static_pods is not None]
        return min([self.api_server, *found])

    def node(self, name: str) -> NodeVersions:
        return next(n for n in self.nodes if n.name == name)

    def as_dict(self) -> dict[str, Any]:
        def text(release: Release | None) -> str | None:
            return str(release) if release else None
        return {"api_server": str(self.api_server), "control_plane": str(self.control_plane),
                "nodes": {n.name: {"role": "control_plane" if n.control_plane else "worker",
                                   "kubelet": text(n.kubelet), "kubeadm": text(n.kubeadm),
                                   "static_pods": text(n.static_pods)} for n in self.nodes},
                "available": [str(r) for r in self.available], "applied": text(self.applied)}


@dataclass(frozen=True)
class Step:
    """One `kubeadm upgrade` of the cluster: to one minor, every node not there yet, control planes first (the
    first control plane applies), then the workers."""

    minor: int
    # The release ("1.36.4"), or the minor ("1.36") whose newest patch the first control plane's repository
    # offers, decided once its repository is in place and recorded in the cluster's state.
    version: str
    control_planes: tuple[str, ...]
    workers: tuple[str, ...]
    # What the step's minor is for the enabled add-ons whose pinned release was tested with other minors: they are
    # installed anyway (settings_for_steps).
    warnings: tuple[str, ...] = ()
    # The nodes whose containerd cannot run the step's minor (1.x under 1.36 and later): moved to containerd 2 from
    # their source under drain, before their kubelet (node name -> the containerd they run).
    containerd: tuple[tuple[str, str], ...] = ()

    @property
    def nodes(self) -> tuple[str, ...]:
        return (*self.control_planes, *self.workers)

    @property
    def release(self) -> Release | None:
        return Release.parse(self.version)

    def as_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"minor": f"1.{self.minor}", "version": self.version,
                                 "control_planes": list(self.control_planes), "workers": list(self.workers),
                                 "warnings": list(self.warnings)}
        if self.containerd:
            found["containerd"] = dict(self.containerd)
        return found


@dataclass(frozen=True)
class UpgradePlan:
    current: Release
    target: Target
    steps: tuple[Step, ...]

    @property
    def nothing_to_do(self) -> bool:
        return not self.steps

    def as_dict(self) -> dict[str, Any]:
        return {"current": str(self.current), "target": str(self.target),
                "steps": [step.as_dict() for step in self.steps]}


def _newer_than(release: Release, target: Target) -> bool:
    return release.minor > target.minor or (target.patch is not None and release.minor == target.minor
                                            and release.patch > target.patch)


def _check_nodes(found: ClusterVersions, target: Target) -> None:
    for node in found.nodes:
        if node.kubelet is None:
            raise InputError(f"{node.name} is in the inventory but the cluster has no node of that name: join it "
                             f"first (`bootstrap node add {node.name}`), or take it out of the inventory")
        if node.control_plane and node.static_pods is None:
            raise InputError(f"{node.name} is a control plane of the inventory but runs no control-plane static "
                             "pods (/etc/kubernetes/manifests): `bootstrap up --from join` finishes its join")
    ahead = [(n.name, r) for n in found.nodes for r in n.releases() if _newer_than(r, target)]
    if ahead:
        name, release = ahead[0]
        raise InputError(f"--to {target}: {name} already runs {release}, newer than that: kubeadm does not "
                         "downgrade (to go back, restore the etcd snapshot taken before the upgrade; docs/upgrade.md)")


def _step_version(minor: int, found: ClusterVersions, target: Target, resolved: Mapping[int, str]) -> str:
    """The release a step moves to: the patch asked for; else the newest of this minor among what the nodes already
    run (an upgrade done in part: a node is never taken back), the release an earlier run of this upgrade chose, and,
    for a patch upgrade (`--to` the cluster's own minor), what its repository offers; else the minor itself (its
    newest patch, decided on the first control plane once its repository is there)."""
    if target.minor == minor and target.patch is not None:
        return str(target)
    seen = [r for n in found.nodes for r in n.releases() if r.minor == minor]
    chosen = Release.parse(resolved.get(minor))
    if chosen is not None:
        seen.append(chosen)
    if minor == found.control_plane.minor and target.minor == minor:
        seen += [r for r in found.available if r.minor == minor]
    return str(max(seen)) if seen else f"1.{minor}"


def _pending(found: ClusterVersions, minor: int, version: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The control planes and workers a step still has to upgrade: those that run something older than its release
    (for a minor whose patch is not decided yet, something of an older minor) and nothing newer (a node already
    past it somewhere is left to the step of that minor)."""
    release = Release.parse(version)

    def older(r: Release) -> bool:
        return r < release if release else r.minor < minor

    def newer(r: Release) -> bool:
        return r > release if release else r.minor > minor

    first = next((n.name for n in found.nodes if n.control_plane), None)

    def left(node: NodeVersions) -> bool:
        mine = [node.kubelet, node.kubeadm, *([node.static_pods] if node.control_plane else [])]
        known = [r for r in mine if r is not None]
        if any(newer(r) for r in known):
            return False
        # The first control plane applies: not done while the cluster's configuration is older than the step's.
        unapplied = node.name == first and found.applied is not None and older(found.applied)
        return len(known) < len(mine) or any(older(r) for r in known) or unapplied
    todo = [n for n in found.nodes if left(n)]
    return (tuple(n.name for n in todo if n.control_plane), tuple(n.name for n in todo if not n.control_plane))


def plan_upgrade(found: ClusterVersions, target: Target, *, step: bool = False,
                 resolved: Mapping[int, str] | None = None) -> UpgradePlan:
    """The steps from the running cluster to `target`, or InputError naming what kubeadm would not do and how to
    get there. `step`: a target more than one minor ahead is reached one minor at a time (else refused).
    `resolved`: minor -> the release an earlier run of this upgrade chose for it (a re-run keeps it)."""
    resolved = dict(resolved or {})
    current = found.control_plane
    if target.minor < current.minor or (target.minor == current.minor and target.patch is not None
                                        and target.patch < current.patch):
        raise InputError(f"--to {target}: the cluster runs {current}; kubeadm upgrades forward only (to go back, "
                         "restore the etcd snapshot taken before the upgrade; docs/upgrade.md)")
    if target.minor > current.minor + UPGRADE_SKEW and not step:
        skipped = ", ".join(f"1.{m}" for m in range(current.minor + 1, target.minor))
        raise InputError(f"--to {target}: the cluster runs {current}, and {target} skips {skipped}: kubeadm "
                         "upgrades one minor at a time; add --step to go through each minor in turn")
    _check_nodes(found, target)
    lagging = [(n.name, n.kubelet) for n in found.nodes
               if n.kubelet is not None and n.kubelet.minor < current.minor - KUBELET_SKEW]
    if lagging:
        name, kubelet = lagging[0]
        raise InputError(f"{name}'s kubelet runs {kubelet}, more than {KUBELET_SKEW} minors behind the control "
                         f"plane's {current}: the version-skew policy and kubeadm support a kubelet at most "
                         f"{KUBELET_SKEW} minors older; take the node out and in again at the cluster's version "
                         f"(`bootstrap node remove {name}`, then `bootstrap node add {name}`), then upgrade")
    steps: list[Step] = []
    # Nodes a step moves to containerd 2: the steps after it find it there.
    moved: set[str] = set()
    # The current minor first: the nodes an interrupted upgrade left behind, or a patch upgrade; then each minor.
    for minor in range(current.minor, target.minor + 1):
        version = _step_version(minor, found, target, resolved)
        control_planes, workers = _pending(found, minor, version)
        if not (control_planes or workers):
            continue
        problem = versions.kubernetes_minor_problem(minor, allow_untested=True)
        if problem:
            where = ("the nodes left behind at it" if minor == current.minor else f"the way to {target} goes "
                     "through it")
            raise InputError(f"Kubernetes 1.{minor} is {problem.split(':')[0]}, and {where}: this release installs "
                             f"{versions.supported_text()} only; bring the cluster to 1.{minor} with kubeadm by hand "
                             "first (docs/upgrade.md)")
        needs = [(name, found.node(name).containerd) for name in (*control_planes, *workers)
                 if name not in moved and found.node(name).containerd]
        containerd = tuple((name, versions.shown_version(have)) for name, have in needs
                           if have and versions.containerd_verdict(minor, have).status == "refuse")
        moved.update(name for name, _ in containerd)
        steps.append(Step(minor, version, control_planes, workers, containerd=containerd))
    return UpgradePlan(current, target, tuple(steps))


def settings_for_steps(plan: UpgradePlan, settings: Settings) -> UpgradePlan:
    """The plan with each step's settings checked (step_settings: refused here, in the plan, not when the step
    before has already moved the cluster) and the add-on warnings of each step's minor attached."""
    steps = []
    for step in plan.steps:
        moved = step_settings(settings, step.version)
        steps.append(replace(step, warnings=tuple(addon_warnings(moved, moved.addons.enabled))))
    return replace(plan, steps=tuple(steps))


def describe_plan(plan: UpgradePlan, first_control_plane: str) -> list[str]:
    """The plan in lines for people: what runs where, in order."""
    if plan.nothing_to_do:
        return [f"the cluster runs {plan.current} on every node: nothing to upgrade to {plan.target}"]
    lines = [f"upgrade {plan.current} -> {plan.target}"
             + (f" in {len(plan.steps)} steps, one minor at a time" if len(plan.steps) > 1 else "")]
    for step in plan.steps:
        version = step.version if step.release else f"{step.version} (its newest patch, as the repository offers it)"
        lines.append(f"step {version}:")
        lines.append(f"  repositories moved to v1.{step.minor} on {', '.join(step.nodes)}")
        runtime = {name: f"containerd {have} -> 2.x, " for name, have in step.containerd}
        for name in step.control_planes:
            verb = "kubeadm upgrade plan, kubeadm upgrade apply" if name == first_control_plane else \
                "kubeadm upgrade node"
            lines.append(f"  {name}: drain, kubeadm, {verb}, API server and etcd healthy, {runtime.get(name, '')}kubelet and "
                         "kubectl, uncordon")
        for name in step.workers:
            lines.append(f"  {name}: drain, kubeadm, kubeadm upgrade node, {runtime.get(name, '')}kubelet and kubectl, "
                         "uncordon")
        lines.append("  Calico, the device plugin and the enabled add-ons at their paired versions; verify")
        lines += [f"  warning: {warning}" for warning in step.warnings]
    return lines
