"""The upgrade's plan, made from what a cluster runs (recorded from lab nodes: tests/data/upgrade/) and the version
asked for: one minor at a time as kubeadm upgrades, nodes already there left out, an interrupted upgrade finished
with the releases it chose; and every refusal of what kubeadm would not do, named in one line with the way
there."""
from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provision.errors import BootstrapError, InputError
from provision.inputs.addons import ADDONS
from provision.inputs.inventory import Cluster, Node
from provision.inputs.settings import Settings, parse_settings
from provision.inputs.state import ClusterState
from provision.inputs.upgrade import (
    ClusterVersions,
    NodeVersions,
    Release,
    Step,
    Target,
    UpgradeOptions,
    UpgradePlan,
    describe_plan,
    parse_target,
    plan_upgrade,
    settings_behind,
    settings_for_steps,
    step_settings,
)
from provision.inputs.versions import KUBERNETES_RELEASES, kubernetes_release
from provision.kube.upgrade import NodeStatus
from provision.nodes.upgrade import KubeVersions
from provision.phases import upgrade_plan
from provision.phases.engine import PhaseContext
from provision.phases.upgrade_plan import versions_from
from tests.support.paths import REPO_ROOT

RECORDED = REPO_ROOT / "tests" / "data" / "upgrade"


def recorded(name: str) -> tuple[ClusterVersions, dict[str, Any]]:
    """A recorded read turned into the cluster's versions the way the upgrade_plan phase turns it."""
    data = json.loads((RECORDED / name).read_text())
    nodes = [Node(n, f"10.88.0.{i}", "control_plane" if n in data["control_planes"] else "worker", "tester")
             for i, n in enumerate([*data["control_planes"], *data["workers"]], start=11)]
    cluster = Cluster(Path("hosts.ini"), tuple(nodes))
    reports = {name: KubeVersions.model_validate(document) for name, document in data["reports"].items()}
    statuses = {name: NodeStatus(kubelet, False, True) for name, kubelet in data["kubelets"].items()}
    return versions_from(cluster, reports, data["api_server"], statuses), data


def target(text: str, **kube: Any) -> Target:
    return parse_target(text, Settings.model_validate({"kubernetes": kube}) if kube else Settings())


def test_a_cluster_at_1_35_goes_to_1_37_through_1_36_every_node_in_each_step() -> None:
    found, _ = recorded("made-at-1.35.json")
    assert found.control_plane == Release(35, 2) and found.available == (Release(35, 2), Release(35, 1))
    plan = plan_upgrade(found, target("1.37"), step=True)
    assert plan.as_dict() == {"current": "1.35.2", "target": "1.37", "steps": [
        {"minor": "1.36", "version": "1.36", "control_planes": ["n1", "n2"], "workers": ["n3", "n4"], "warnings": []},
        {"minor": "1.37", "version": "1.37", "control_planes": ["n1", "n2"], "workers": ["n3", "n4"], "warnings": []}]}
    lines = describe_plan(plan, "n1")
    assert lines[0] == "upgrade 1.35.2 -> 1.37 in 2 steps, one minor at a time"
    assert lines[1] == "step 1.36 (its newest patch, as the repository offers it):"
    assert lines[3].startswith("  n1: drain, kubeadm, kubeadm upgrade plan, kubeadm upgrade apply,")
    assert lines[4].startswith("  n2: drain, kubeadm, kubeadm upgrade node,")
    # A release asked for is the last step's release.
    pinned = plan_upgrade(found, target("1.37.1"), step=True)
    assert [s.version for s in pinned.steps] == ["1.36", "1.37.1"]


def test_a_target_two_minors_ahead_is_refused_without_step() -> None:
    found, _ = recorded("made-at-1.35.json")
    with pytest.raises(InputError) as refused:
        plan_upgrade(found, target("1.37"))
    assert str(refused.value) == ("--to 1.37: the cluster runs 1.35.2, and 1.37 skips 1.36: kubeadm upgrades one minor "
                                  "at a time; add --step to go through each minor in turn")


def test_a_downgrade_is_refused_and_so_is_a_target_a_node_is_past() -> None:
    found, _ = recorded("made-at-1.35.json")
    for asked in ("1.35.1", "1.35.0"):
        with pytest.raises(InputError, match=rf"^--to {asked}: the cluster runs 1.35.2; kubeadm upgrades forward only"):
            plan_upgrade(found, target(asked))
    # A kubelet someone moved ahead by hand is past a target below it.
    ahead = replace(found, nodes=(*found.nodes[:3], replace(found.nodes[3], kubelet=Release(36, 4))))
    with pytest.raises(InputError, match=r"^--to 1.36.3: n4 already runs 1.36.4, newer than that: kubeadm does not "):
        plan_upgrade(ahead, target("1.36.3"))


def test_a_version_outside_the_table_is_refused_as_the_settings_refuse_it() -> None:
    with pytest.raises(InputError) as past:
        target("1.34")
    assert str(past.value).startswith("--to: Kubernetes 1.34 is past its end of life (2026-10-27): choose")
    newest = KUBERNETES_RELEASES[-1].minor
    with pytest.raises(InputError, match="newer than any release this version of cluster-bootstrap was checked"):
        target(f"1.{newest + 1}")
    assert target(f"1.{newest + 1}", allow_untested_versions=True) == Target(newest + 1)
    for garbage in ("latest", "1.36.x", "v2.0", "1.36\n1.37", " 1.36; rm -rf /", "１.36"):
        with pytest.raises(InputError, match="^--to: "):
            target(garbage)


def test_a_kubelet_up_to_three_minors_behind_is_upgraded_in_place_one_further_behind_is_refused() -> None:
    """The version-skew policy (a kubelet may be up to three minors older than kube-apiserver) and kubeadm since 1.29
    (MaximumAllowedMinorVersionKubeletSkew = 3): a node that lagging is planned and upgraded in place, drained first,
    never sent to `node remove` / `node add` (a GPU node rebuilt)."""
    found, _ = recorded("made-at-1.35.json")
    far = replace(found, nodes=(*found.nodes[:3], replace(found.nodes[3], kubelet=Release(31, 9))))
    with pytest.raises(InputError) as refused:
        plan_upgrade(far, target("1.36"))
    assert str(refused.value) == (
        "n4's kubelet runs 1.31.9, more than 3 minors behind the control plane's 1.35.2: the version-skew policy and "
        "kubeadm support a kubelet at most 3 minors older; take the node out and in again at the cluster's version "
        "(`bootstrap node remove n4`, then `bootstrap node add n4`), then upgrade")
    # One, two or three minors behind are within the skew: the node is brought to the control plane's release first,
    # in place, in a step of its own, before the control plane moves on.
    for lag in (1, 2, 3):
        behind = Release(35 - lag, 3)
        near = replace(found, nodes=(*found.nodes[:3], replace(found.nodes[3], kubelet=behind, kubeadm=behind)))
        plan = plan_upgrade(near, target("1.36"))
        assert [(s.version, s.nodes) for s in plan.steps] == [("1.35.2", ("n4",)),
                                                               ("1.36", ("n1", "n2", "n3", "n4"))], lag


def test_a_1_34_kubelet_under_a_1_36_control_plane_is_planned_in_place() -> None:
    at, old = Release(36, 4), Release(34, 7)
    nodes = (NodeVersions("cp1", True, at, at, at), NodeVersions("gpu1", False, old, old),
             NodeVersions("w2", False, at, at))
    plan = plan_upgrade(ClusterVersions(at, nodes, available=(at,)), Target(36))
    assert [(s.version, s.control_planes, s.workers) for s in plan.steps] == [("1.36.4", (), ("gpu1",))]
    lines = describe_plan(plan, "cp1")
    assert lines[-2] == "  gpu1: drain, kubeadm, kubeadm upgrade node, kubelet and kubectl, uncordon"


def test_a_first_control_plane_whose_apply_did_not_finish_is_not_done() -> None:
    """Killed inside `kubeadm upgrade apply` after its control-plane phase: n1's static pods, kubeadm and even its
    kubelet may carry the release, but kubeadm-config or kube-proxy do not: n1 stays in the step (it applies again)."""
    found, _ = recorded("killed-among-the-workers.json")
    at = Release(37, 1)
    n1, n2, n3, n4 = found.nodes
    done = replace(n1, kubelet=at, kubeadm=at, static_pods=at)
    unapplied = replace(found, api_server=at, applied=Release(36, 4), nodes=(done, n2, n3, n4))
    plan = plan_upgrade(unapplied, target("1.37"), resolved={37: "1.37.1"})
    assert [(s.version, s.control_planes, s.workers) for s in plan.steps] == [("1.37.1", ("n1",), ("n3", "n4"))]
    applied = replace(unapplied, applied=at)
    assert [(s.version, s.control_planes, s.workers) for s in plan_upgrade(
        applied, target("1.37"), resolved={37: "1.37.1"}).steps] == [("1.37.1", (), ("n3", "n4"))]


def test_an_upgrade_killed_among_the_workers_is_planned_as_what_is_left() -> None:
    found, data = recorded("killed-among-the-workers.json")
    resolved = {int(minor.split(".")[1]): release for minor, release in data["releases"].items()}
    plan = plan_upgrade(found, target("1.37"), resolved=resolved)
    # The control planes are done; n3 (kubeadm moved, kubelet not) and n4 are left, at the release chosen before.
    assert plan.as_dict() == {"current": "1.37.1", "target": "1.37", "steps": [
        {"minor": "1.37", "version": "1.37.1", "control_planes": [], "workers": ["n3", "n4"], "warnings": []}]}
    # The same, asked again with --step: nothing of 1.36 is left to do.
    assert plan_upgrade(found, target("1.37"), step=True, resolved=resolved) == plan


def test_an_upgrade_stopped_between_the_control_planes_never_takes_the_first_one_back() -> None:
    found, _ = recorded("killed-among-the-workers.json")
    n1, n2, n3, n4 = found.nodes
    at_1_36 = Release(36, 4)
    stopped = replace(found, api_server=at_1_36, nodes=(
        n1, replace(n2, kubelet=at_1_36, kubeadm=at_1_36, static_pods=at_1_36),
        replace(n3, kubeadm=at_1_36), n4))
    plan = plan_upgrade(stopped, target("1.37"), resolved={36: "1.36.4"})
    assert [(s.version, s.control_planes, s.workers) for s in plan.steps] == [
        ("1.37.1", ("n2",), ("n3", "n4"))]


def test_a_patch_upgrade_takes_the_newest_patch_the_repository_offers() -> None:
    at = Release(36, 3)
    nodes = tuple(NodeVersions(n, n == "n1", at, at, at if n == "n1" else None) for n in ("n1", "n2"))
    found = ClusterVersions(at, nodes, available=(Release(36, 4), at))
    plan = plan_upgrade(found, Target(36))
    assert [(s.version, s.nodes) for s in plan.steps] == [("1.36.4", ("n1", "n2"))]
    assert plan_upgrade(found, Target(36, 3)).nothing_to_do
    assert describe_plan(plan_upgrade(found, Target(36, 3)), "n1") == [
        "the cluster runs 1.36.3 on every node: nothing to upgrade to 1.36.3"]


def test_nodes_the_cluster_does_not_have_are_refused_by_name() -> None:
    found, _ = recorded("made-at-1.35.json")
    absent = replace(found, nodes=(*found.nodes[:3], replace(found.nodes[3], kubelet=None)))
    with pytest.raises(InputError, match=r"^n4 is in the inventory but the cluster has no node of that name: join it "
                                         r"first \(`bootstrap node add n4`\)"):
        plan_upgrade(absent, target("1.36"))
    half = replace(found, nodes=(found.nodes[0], replace(found.nodes[1], static_pods=None), *found.nodes[2:]))
    with pytest.raises(InputError, match="^n2 is a control plane of the inventory but runs no control-plane static"):
        plan_upgrade(half, target("1.36"))


def test_a_cluster_past_its_end_of_life_is_upgraded_but_not_finished_at_its_own_minor() -> None:
    old = Release(34, 5)
    nodes = tuple(NodeVersions(n, n == "n1", old, old, old if n == "n1" else None) for n in ("n1", "n2"))
    found = ClusterVersions(old, nodes)
    assert [s.version for s in plan_upgrade(found, Target(35)).steps] == ["1.35"]
    behind = replace(found, nodes=(nodes[0], replace(nodes[1], kubeadm=Release(34, 1), kubelet=Release(34, 1))))
    with pytest.raises(InputError, match=r"^Kubernetes 1.34 is past its end of life \(2026-10-27\), and the nodes left "):
        plan_upgrade(behind, Target(35))
    older = ClusterVersions(Release(33, 9), tuple(replace(n, kubelet=Release(33, 9), kubeadm=Release(33, 9),
                                                          static_pods=Release(33, 9) if n.control_plane else None)
                                                  for n in nodes))
    with pytest.raises(InputError, match=r"^Kubernetes 1.34 is past its end of life .*, and the way to 1.35 goes "):
        plan_upgrade(older, Target(35), step=True)


def test_an_api_server_that_names_no_release_is_said() -> None:
    _, data = recorded("made-at-1.35.json")
    cluster = Cluster(Path("hosts.ini"), (Node("n1", "10.0.0.1", "control_plane", "tester"),))
    with pytest.raises(BootstrapError, match="reports version 'v1.35-fork', which is no Kubernetes release"):
        versions_from(cluster, {"n1": KubeVersions.model_validate(data["reports"]["n1"])}, "v1.35-fork", {})


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterVersions, Target, dict[int, str]]:
    """A cluster any kubeadm upgrade could have left (control planes within one minor, every kubelet within the
    version-skew policy's three minors of the oldest control plane, nothing past the newest), a target at or past it
    in the table, and the releases an earlier run may have chosen."""
    minors = [r.minor for r in KUBERNETES_RELEASES]
    low = draw(st.sampled_from(minors))

    def release(minor: int) -> Release:
        return Release(minor, draw(st.integers(0, 9)))
    count = draw(st.integers(1, 5))
    planes = draw(st.integers(1, count))
    nodes = []
    for index in range(count):
        control_plane = index < planes
        # The first control plane at the oldest minor: the control plane's release is of that minor.
        minor = low if index == 0 else draw(st.sampled_from([m for m in (low, low + 1) if m <= minors[-1]]))
        kubelet = release(draw(st.sampled_from([m for m in (low - 3, low - 2, low - 1, low, minor) if m <= minor])))
        static = release(minor) if control_plane else None
        nodes.append(NodeVersions(f"n{index + 1}", control_plane, kubelet, release(minor), static))
    found = ClusterVersions(min(n.static_pods for n in nodes if n.static_pods is not None), tuple(nodes))
    newest = max(r for n in nodes for r in n.releases())
    goal = draw(st.sampled_from([m for m in minors if m >= newest.minor]))
    resolved = {m: f"1.{m}.{draw(st.integers(0, 9))}" for m in draw(st.sets(st.sampled_from(minors)))}
    return found, Target(goal), resolved


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_every_plan_goes_one_minor_at_a_time_and_never_takes_a_node_back(case: tuple[ClusterVersions, Target,
                                                                                      dict[int, str]]) -> None:
    found, goal, resolved = case
    try:
        plan = plan_upgrade(found, goal, step=True, resolved=resolved)
    except InputError as refused:
        # What may be refused of such a cluster: a node past a release an earlier run chose.
        assert "already runs" in str(refused) or "past its end of life" in str(refused), refused
        return
    minors = [s.minor for s in plan.steps]
    assert minors == sorted(minors) and len(set(minors)) == len(minors)
    assert all(b == a + 1 for a, b in itertools.pairwise(minors))
    if plan.steps:
        assert plan.steps[0].minor in (found.control_plane.minor, found.control_plane.minor + 1)
        assert plan.steps[-1].minor == goal.minor
    for step in plan.steps:
        for name in step.nodes:
            node = found.node(name)
            # A node in a step runs something older than its release, and nothing it would take back.
            if step.release is not None:
                assert any(r < step.release for r in node.releases())
                assert all(r <= step.release for r in node.releases())
            else:
                assert all(r.minor < step.minor for r in node.releases())
        # Control planes before workers, the first control plane (inventory order) first among them.
        names = [n.name for n in found.nodes]
        assert list(step.control_planes) == [n for n in names if n in step.control_planes]


def test_a_step_runs_with_its_version_and_calico_follows_the_table_unless_chosen() -> None:
    settings = parse_settings({"kubernetes": {"version": "1.35"}})
    moved = step_settings(settings, "1.37.1")
    assert moved.kubernetes.version == "1.37.1" and moved.kubernetes.minor == "1.37"
    assert moved.calico.version == kubernetes_release(37).calico
    chosen = parse_settings({"kubernetes": {"version": "1.35"}, "calico": {"version": "v3.31.3"}})
    with pytest.raises(InputError, match=r"^calico.version: Calico 3.31 was tested with Kubernetes 1.32-1.35, not 1.36"):
        step_settings(chosen, "1.36")


def test_an_add_on_the_last_step_would_leave_unsupported_is_refused_in_the_plan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """cert-manager states its Kubernetes range (1.33-1.36) and KServe needs it: `upgrade --to 1.37 --step` of such a
    cluster at 1.35 is refused by the plan (also under --dry-run), not after the 1.36 step has moved the cluster."""
    found, _ = recorded("made-at-1.35.json")
    monkeypatch.setattr(upgrade_plan, "read_versions", lambda ctx: found)
    settings = parse_settings({"kubernetes": {"version": "1.35"}, "addons": {"enabled": ["kserve"]}})
    cluster = Cluster(Path("hosts.ini"), (Node("n1", "10.88.0.11", "control_plane", "tester"),))

    def plan_to(text: str) -> str:
        ctx = PhaseContext(cluster=cluster, settings=settings, state=ClusterState(),
                           upgrade=UpgradeOptions(parse_target(text, settings), step=True))
        return upgrade_plan.check(ctx)

    assert plan_to("1.36") == "1.35.2 -> 1.36: 1 step (1.36)"
    with pytest.raises(InputError) as refused:
        plan_to("1.37")
    assert str(refused.value).startswith("addons.enabled: cert_manager ")
    assert str(refused.value).endswith("supports Kubernetes 1.33-1.36, not 1.37 (needed by kserve): choose a "
                                       "kubernetes.version it supports, or leave kserve out of addons.enabled (the "
                                       "upgrade moves the cluster to Kubernetes 1.37)")


def test_an_add_on_tested_with_older_minors_is_a_warning_on_each_step_it_would_run_untested(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Volcano's pinned release is tested with Kubernetes up to 1.35 (a tested range, not a stated support range):
    an upgrade from 1.35 is planned, and each step past 1.35 says so, in the text, the JSON and the state's plan."""
    found, _ = recorded("made-at-1.35.json")
    monkeypatch.setattr(upgrade_plan, "read_versions", lambda ctx: found)
    settings = parse_settings({"kubernetes": {"version": "1.35"}, "addons": {"enabled": ["volcano", "trainer"]}})
    cluster = Cluster(Path("hosts.ini"), (Node("n1", "10.88.0.11", "control_plane", "tester"),))
    ctx = PhaseContext(cluster=cluster, settings=settings, state=ClusterState(),
                       upgrade=UpgradeOptions(parse_target("1.37", settings), step=True))
    assert upgrade_plan.check(ctx) == "1.35.2 -> 1.37: 2 steps (1.36, 1.37)"
    plan = ctx.results.upgrade
    assert plan is not None
    volcano = ADDONS["volcano"]
    for step, minor in zip(plan.steps, (36, 37), strict=True):
        assert step.warnings == (f"addons: {volcano.kubernetes_problem(minor)}",), step
        assert step.as_dict()["warnings"] == list(step.warnings)
    assert "Volcano v" in plan.steps[0].warnings[0] and "not 1.36: it is installed anyway" in plan.steps[0].warnings[0]
    lines = describe_plan(plan, "n1")
    shown = [line for line in lines if line.startswith("  warning: ")]
    assert shown == [f"  warning: {w}" for step in plan.steps for w in step.warnings]
    # Each warning is printed under its own step, after that step's add-ons line.
    assert lines.index(shown[0]) < lines.index("step 1.37 (its newest patch, as the repository offers it):")
    # Inside the tested range there is nothing to say: a patch upgrade at 1.35 has no warning.
    patch = UpgradePlan(Release(35, 1), Target(35, 2), (Step(35, "1.35.2", ("n1",), ()),))
    assert settings_for_steps(patch, settings).steps[0].warnings == ()


def test_settings_older_than_the_upgraded_cluster_are_named() -> None:
    assert settings_behind(parse_settings({"kubernetes": {"version": "1.36"}}), "1.37.1") == (
        "kubernetes.version is 1.36, but the cluster runs 1.37.1 (an upgrade moved it forward): set "
        "kubernetes.version: '1.37' in cluster.yaml (older packages would move its nodes back)")
    assert settings_behind(parse_settings({"kubernetes": {"version": "1.37"}}), "1.37.1") is None
    assert settings_behind(parse_settings({}), None) is None


def test_the_whole_plan_is_shown_in_order_before_anything_changes() -> None:
    from provision.cli.commands.upgrade import plan_lines
    from provision.inputs.upgrade import Batch, UpgradeOptions

    found, data = recorded("made-at-1.35.json")
    cluster = Cluster(Path("hosts.ini"), tuple(Node(n, "10.0.0.1", "control_plane" if n in data["control_planes"]
                                                    else "worker", "tester") for n in data["reports"]))
    plan = plan_upgrade(found, target("1.37"), step=True)
    lines = plan_lines(plan, cluster, Settings(), UpgradeOptions(Target(37), step=True))
    assert lines[0] == "upgrade 1.35.2 -> 1.37 in 2 steps, one minor at a time"
    assert lines[1] == ("first, before anything changes: preflight (the rules of 1.37 on every node: containerd, "
                        "cgroups); before each step the etcd snapshot from a healthy control plane, checked and kept "
                        "on this machine; workers one at a time")
    assert lines[2:5] == ["step 1.36 (its newest patch, as the repository offers it):",
                          "  repositories moved to v1.36 on n1, n2, n3, n4",
                          "  n1: drain, kubeadm, kubeadm upgrade plan, kubeadm upgrade apply, API server and etcd "
                          "healthy, kubelet and kubectl, uncordon"]
    assert lines[-1] == "last: the smoke test"
    skipped = plan_lines(plan, cluster, Settings.model_validate({"smoke_test": {"enabled": False}}),
                         UpgradeOptions(Target(37), skip_etcd_snapshot=True))
    assert "the etcd snapshot skipped (--skip-etcd-snapshot: you took one)" in skipped[1]
    batched = plan_lines(plan, cluster, Settings(), UpgradeOptions(Target(37), parallel=Batch(percent=25), canary=True,
                                                                 pause_after=1))
    assert batched[1].endswith("; the first worker of each step alone (--canary), then 25% at a time, pausing for "
                               "your confirmation after every 1 (--pause-after)")
    assert skipped[-1] == "last: no smoke test (smoke_test.enabled is false)"


# --- containerd 2 where the step's minor needs it (Kubernetes 1.35 was the last minor for containerd 1.x) --------

def test_nodes_on_containerd_1_move_to_2_in_the_first_step_that_needs_it() -> None:
    found, _ = recorded("made-at-1.35.json")
    old = (1, 7, 28)
    nodes = tuple(replace(n, containerd=old if n.name in ("n2", "n4") else (2, 1, 5)) for n in found.nodes)
    plan = plan_upgrade(replace(found, nodes=nodes), target("1.37"), step=True)
    assert [(s.minor, s.containerd) for s in plan.steps] == [(36, (("n2", "1.7.28"), ("n4", "1.7.28"))), (37, ())]
    assert plan.steps[0].as_dict()["containerd"] == {"n2": "1.7.28", "n4": "1.7.28"}
    assert "containerd" not in plan.steps[1].as_dict()
    lines = describe_plan(plan, "n1")
    assert "  n2: drain, kubeadm, kubeadm upgrade node, API server and etcd healthy, containerd 1.7.28 -> 2.x, " \
           "kubelet and kubectl, uncordon" in lines
    assert "  n4: drain, kubeadm, kubeadm upgrade node, containerd 1.7.28 -> 2.x, kubelet and kubectl, uncordon" in lines
    # A patch upgrade within 1.35 leaves containerd 1.x alone (1.35 still runs it).
    patch = plan_upgrade(replace(found, nodes=nodes, available=(Release(35, 3),)), target("1.35.3"))
    assert [s.containerd for s in plan_upgrade(replace(found, nodes=nodes), target("1.36")).steps] == [
        (("n2", "1.7.28"), ("n4", "1.7.28"))]
    assert all(s.containerd == () for s in patch.steps)


def test_an_installed_containerd_1_is_upgraded_not_refused_where_its_source_offers_2() -> None:
    from provision.nodes.preflight.checks import check_containerd
    from provision.nodes.preflight.probe import NodeFacts

    def facts(os_release: dict[str, str] | None = None, **changes: Any) -> NodeFacts:
        return NodeFacts(os_release=os_release or {"ID": "debian", "VERSION_ID": "13"}, hostname="n1",
                         product_uuid=None, macs={}, cpus=4, memory_mb=8000, listeners=(), swaps_active=(),
                         fstab_swaps=(), selinux=None, gpus=(), nvidia_driver=None, kube_configs=(),
                         kernel="6.12.48+deb13-amd64", cgroup_version=2, **changes)

    settings = parse_settings({"kubernetes": {"version": "1.36"}, "container_runtime": {"containerd_source": "docker"}})
    installed = facts(containerd_version=(1, 7, 28), runtime_packages={"containerd.io": "1.7.28-1"})
    # `up` refuses it; `bootstrap upgrade` moves it to Docker's containerd.io 2.x itself.
    assert check_containerd(installed, settings).problem
    moved = check_containerd(installed, settings, upgrade=True)
    assert not moved.problem and moved.detail == ("containerd 1.7.28 (installed): the upgrade moves it to Docker's "
                                                  "containerd.io 2.x under drain, before the kubelet of Kubernetes "
                                                  "1.36")
    # The distribution's containerd 1.6 (bookworm) from a distribution that offers nothing newer: still refused.
    bookworm = facts({"ID": "debian", "VERSION_ID": "12"}, containerd_version=(1, 6, 20),
                     runtime_packages={"containerd": "1.6.20~ds1-1+deb12u3"}, containerd_candidate="1.6.20~ds1-1+deb12u3")
    distribution = parse_settings({"kubernetes": {"version": "1.36"},
                                   "container_runtime": {"containerd_source": "distribution"}})
    assert check_containerd(bookworm, distribution, upgrade=True).problem
