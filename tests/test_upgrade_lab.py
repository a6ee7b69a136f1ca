"""`bootstrap upgrade` on real lab nodes over SSH: two control planes and two workers made at 1.35, planned to 1.37
and moved to 1.36, as a user runs it (`python -m provision`).

Kubernetes on the nodes is the lab's stand-ins, installed from the stand-in repositories of three minors (one
repository per minor, as pkgs.k8s.io): kubeadm acts out `upgrade plan/apply/node` with kubeadm's version policy,
the kubelet reports the release it started with, and every call is recorded with its time and node
(tests/lab/kube_acting.py). The API is the stand-in API server, which keeps cordons, pods and disruption budgets
(tests/lab/cluster_api.py). Real here: the plays, SSH, the package transactions (apt, the repository moved from
minor to minor, holds), the order of every call across the nodes, the drains through the API, the cluster's state
and the re-runs. Not here: a real kubeadm, kubelet and etcd (what only they would do is in docs/upgrade.md).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from provision.inputs.versions import kubernetes_release
from tests.lab.cluster import KubeLab, form_cluster
from tests.lab.lab import Lab

CONTROL_PLANES = ("n1", "n2")
WORKERS = ("n3", "n4")
BUDGET = "The disruption budget web needs 1 healthy pods and has 1 currently"


@pytest.fixture(scope="module")
def kube(lab_factory: Callable[..., Lab], tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeLab]:
    lab = lab_factory(4)
    kube = form_cluster(lab, tmp_path_factory.mktemp("upgrade"), CONTROL_PLANES, WORKERS, upgrade={"drain_timeout_s": 10})
    try:
        yield kube
    finally:
        kube.fake.server.stop()


def changes(kube: KubeLab) -> list[str]:
    """What the stand-ins did that is not a read (a version asked for, a pod listed)."""
    return [str(c) for c in kube.calls() if not (c.tool in ("kubeadm", "kubectl") and c.args.startswith("version"))
            and c.tool != "crictl"]


def unchanged(kube: KubeLab) -> None:
    """Nothing on any node, nothing through the API."""
    assert changes(kube) == []
    assert kube.fake.actions() == []
    for name in kube.nodes:
        assert kube.packages(name) == dict.fromkeys(("kubeadm", "kubectl", "kubelet"), "1.35.2-1.1 hold")
        source = kube.lab.node(name).ssh("cat /etc/apt/sources.list.d/cb-kubernetes.sources").stdout
        assert "/v1.35/deb/" in source


def test_the_plan_from_1_35_to_1_37_goes_through_1_36_and_changes_nothing(kube: KubeLab) -> None:
    outcome = kube.bootstrap("upgrade", "--to", "1.37", "--step", "--dry-run", "-o", "json")
    assert outcome.code == 0, outcome.stderr
    document = json.loads(outcome.stdout)
    assert document["dry_run"] is True
    assert document["versions"]["control_plane"] == "1.35.2"
    assert document["versions"]["available"] == ["1.35.2", "1.35.1"]
    assert {n: v["kubelet"] for n, v in document["versions"]["nodes"].items()} == dict.fromkeys(kube.nodes, "1.35.2")
    assert document["plan"] == {"current": "1.35.2", "target": "1.37", "steps": [
        {"minor": "1.36", "version": "1.36", "control_planes": ["n1", "n2"], "workers": ["n3", "n4"], "warnings": []},
        {"minor": "1.37", "version": "1.37", "control_planes": ["n1", "n2"], "workers": ["n3", "n4"], "warnings": []}]}
    unchanged(kube)


def test_what_kubeadm_would_refuse_is_refused_before_any_change(kube: KubeLab) -> None:
    skipping = kube.bootstrap("upgrade", "--to", "1.37", "--yes")
    assert skipping.code == 2 and skipping.lines[-1] == (
        "error: --to 1.37: the cluster runs 1.35.2, and 1.37 skips 1.36: kubeadm upgrades one minor at a time; add "
        "--step to go through each minor in turn")
    past = kube.bootstrap("upgrade", "--to", "1.34", "--yes")
    assert past.code == 2 and past.lines[-1] == (
        "error: --to: Kubernetes 1.34 is past its end of life (2026-10-27): choose 1.35, 1.36 or 1.37 "
        "(kubernetes.version: '1.36')")
    beyond = kube.bootstrap("upgrade", "--to", "1.38", "--yes")
    assert beyond.code == 2 and "newer than any release this version of cluster-bootstrap was checked with" in \
        beyond.lines[-1]
    # n4's kubelet still runs 1.31 (its machine was left out of four upgrades): past the version-skew policy's
    # three minors, it is refused; at 1.33 (two minors behind) it is planned and upgraded in place, first.
    n4 = kube.lab.node("n4")
    n4.ssh("echo v1.31.9 > /var/lib/cb-standin/kubelet-running")
    try:
        behind = kube.bootstrap("upgrade", "--to", "1.36", "--yes")
        n4.ssh("echo v1.33.9 > /var/lib/cb-standin/kubelet-running")
        in_place = kube.bootstrap("upgrade", "--to", "1.36", "--dry-run", "-o", "json")
    finally:
        n4.ssh("echo v1.35.2 > /var/lib/cb-standin/kubelet-running")
    assert behind.code == 2 and behind.lines[-1] == (
        "error: n4's kubelet runs 1.31.9, more than 3 minors behind the control plane's 1.35.2: the version-skew "
        "policy and kubeadm support a kubelet at most 3 minors older; take the node out and in again at the "
        f"cluster's version (`{kube.printed('node remove', 'n4')}`, then `{kube.printed('node add', 'n4')}`), then "
        "upgrade")
    assert in_place.code == 0, in_place.stderr
    assert [(s["version"], s["control_planes"], s["workers"]) for s in json.loads(in_place.stdout)["plan"]["steps"]] \
        == [("1.35.2", [], ["n4"]), ("1.36", ["n1", "n2"], ["n3", "n4"])]
    unchanged(kube)


def test_the_etcd_snapshot_comes_first_and_without_one_nothing_changes(kube: KubeLab) -> None:
    # The stand-ins run no etcd (its static pod is a manifest only): no member answers, so no snapshot can be taken.
    outcome = kube.bootstrap("upgrade", "--to", "1.36", "--yes")
    assert outcome.code == 1 and outcome.lines[-1].startswith("error: etcd"), outcome.stderr
    phases = kube.state().phases
    assert "failed" in (phases["etcd_probe"].status, phases.get("etcd_snapshot", phases["etcd_probe"]).status)
    assert phases["preflight"].status == "ok" and "upgrade_repositories" not in phases
    unchanged(kube)


def order(kube: KubeLab, since: float = 0.0) -> list[str]:
    """The nodes' upgrade calls and the API's cordons, evictions and uncordons, in the order they happened."""
    interesting = ("upgrade apply", "upgrade node", "upgrade plan", "certs renew")
    found = [(c.start, str(c)) for c in kube.calls() if c.start >= since and (
        (c.tool == "kubeadm" and c.args.startswith(interesting)) or c.tool == "kubelet")]
    found += [(at, f"api {action}") for at, action in kube.fake.actions() if at >= since]
    return [text for _, text in sorted(found)]


def kubeadm_config(kube: KubeLab) -> tuple[str | None, str | None]:
    """What the API holds of `kubeadm upgrade apply`'s work: kubeadm-config's kubernetesVersion, kube-proxy's image."""
    text = kube.fake.kubeadm_config() or ""
    version = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                    if line.startswith("kubernetesVersion:")), None)
    return version, kube.fake.kube_proxy_image()


def test_an_apply_killed_midway_is_applied_again_before_any_other_control_plane_moves(kube: KubeLab) -> None:
    """kubeadm-upgrade.md: `kubeadm upgrade apply` is idempotent. Killed after its control-plane phase, n1's manifests
    carry the target but kubeadm-config (upload-config) and kube-proxy (addon) do not: `kubeadm upgrade node` on n2
    would read the old version from kubeadm-config while n2's kubelet moved on."""
    n1 = kube.lab.node("n1")
    n1.ssh("echo control-plane > /var/lib/cb-standin/kill-apply-after")
    started = time.time()
    killed = kube.bootstrap("upgrade", "--to", "1.36", "--yes", "--skip-etcd-snapshot")
    assert killed.code == 1 and "`kubeadm upgrade apply v1.36.4` failed on n1" in killed.stderr, killed.stderr
    assert order(kube, started) == ["api cordon n1", "n1 kubeadm upgrade plan v1.36.4",
                                    "n1 kubeadm upgrade apply v1.36.4 --yes"]
    # Before any drain, every node of the step had kubeadm of the release and pulled the release's images (a
    # control plane every one kubeadm lists, a worker kube-proxy, CoreDNS and pause) and Calico's.
    first_drain = kube.fake.actions()[0][0]
    pulls = [c for c in kube.calls() if c.tool == "crictl" and c.args.startswith("pull ") and c.start >= started]
    assert pulls and all(c.end <= first_drain for c in pulls)
    pulled = {name: {c.args.split()[1].rsplit("/", 1)[-1] for c in pulls if c.node == name} for name in kube.nodes}
    calico = {f"{image}:{kubernetes_release(36).calico}" for image in ("calico", "node")}
    assert pulled["n1"] == pulled["n2"] == {"kube-apiserver:v1.36.4", "kube-controller-manager:v1.36.4",
                                            "kube-scheduler:v1.36.4", "kube-proxy:v1.36.4", "coredns:v1.12.1",
                                            "etcd:3.6.5-0", f"pause:{kubernetes_release(36).pause}"} | calico
    assert pulled["n3"] == pulled["n4"] == {"kube-proxy:v1.36.4", "coredns:v1.12.1",
                                            f"pause:{kubernetes_release(36).pause}"} | calico
    assert {kube.packages(name)["kubeadm"] for name in kube.nodes} == {"1.36.4-1.1 hold"}
    assert "kube-apiserver:v1.36.4" in n1.ssh("cat /etc/kubernetes/manifests/kube-apiserver.yaml").stdout
    assert kubeadm_config(kube) == ("v1.35.2", "registry.k8s.io/kube-proxy:v1.35.2")

    # Someone uploads an older configuration again once n1 is back (an older kubeadm's `init phase upload-config`):
    # n2's `kubeadm upgrade node` writes its static pods at 1.35.2, and n2's kubelet is left as it was.
    share = kube.fake.server.before_request
    assert share is not None

    def older_upload_after_n1() -> None:
        if "uncordon n1" in [action for _, action in kube.fake.actions()] and \
                "v1.36.4" in (kube.fake.kubeadm_config() or ""):
            n1.ssh("sed -i 's/^kubernetesVersion: .*/kubernetesVersion: v1.35.2/' "
                   "/var/lib/cb-standin/kubeadm-config.yaml")
        share()
    kube.fake.server.before_request = older_upload_after_n1
    started = time.time()
    try:
        stale = kube.bootstrap("upgrade", "--to", "1.36", "--yes", "--skip-etcd-snapshot")
    finally:
        kube.fake.server.before_request = share
    assert stale.code == 1
    # n1 was cordoned already (the killed run's cordon, recorded as ours): apply runs again, idempotent.
    assert order(kube, started) == [
        "n1 kubeadm upgrade plan v1.36.4", "n1 kubeadm upgrade apply v1.36.4 --yes", "n1 kubelet", "api uncordon n1",
        "api cordon n2", "n2 kubeadm upgrade node"]
    assert "the static pods of n2 are not at v1.36.4" in " ".join(stale.stderr.split()), stale.stderr
    assert kube.running_kubelet("n2") == "v1.35.2" and kube.packages("n2")["kubelet"] == "1.35.2-1.1 hold"
    assert kube.fake.unschedulable["n2"] is True


def test_a_budget_that_blocks_a_drain_stops_the_upgrade_there_after_the_control_planes(kube: KubeLab) -> None:
    kube.fake.run("web-0", on="n3", held_by=BUDGET)
    started = time.time()
    outcome = kube.bootstrap("upgrade", "--to", "1.36", "--yes", "--skip-etcd-snapshot")
    assert outcome.code == 1
    # The re-run, as printed, is this same run: its state directory, inventory and settings, and its options.
    assert outcome.lines[-2] == (
        f"fix the cause, then re-run `{kube.printed('upgrade', '--to', '1.36', '--skip-etcd-snapshot')}`: it reads "
        "what the cluster runs and goes on from there"), outcome.stderr
    assert outcome.lines[-1] == (
        f"error: drain of n3 timed out after 10 s: pod default/web-0 is not evicted: {BUDGET}; let its disruption "
        "budget allow it (scale the workload up, or relax the budget), or raise upgrade.drain_timeout_s, then re-run "
        "the upgrade with the same --to (n3 stays cordoned, nothing on it was upgraded)")
    # The configuration uploaded in between is older than n1: n1 is drained and applies again first, then n2 (left
    # cordoned by the run before) moves, each back in service after.
    assert order(kube, started) == [
        "api cordon n1", "n1 kubeadm upgrade plan v1.36.4", "n1 kubeadm upgrade apply v1.36.4 --yes", "n1 kubelet",
        "api uncordon n1",
        "n2 kubeadm upgrade node", "n2 kubelet", "api uncordon n2",
        "api cordon n3"]
    assert kubeadm_config(kube) == ("v1.36.4", "registry.k8s.io/kube-proxy:v1.36.4")
    assert kube.fake.unschedulable == {"n1": False, "n2": False, "n3": True}
    for name in CONTROL_PLANES:
        assert kube.packages(name) == dict.fromkeys(("kubeadm", "kubectl", "kubelet"), "1.36.4-1.1 hold")
        assert kube.running_kubelet(name) == "v1.36.4"
        source = kube.lab.node(name).ssh("cat /etc/apt/sources.list.d/cb-kubernetes.sources").stdout
        assert "/v1.36/deb/" in source
        assert "kube-apiserver:v1.36.4" in kube.lab.node(name).ssh(
            "cat /etc/kubernetes/manifests/kube-apiserver.yaml").stdout
    for name in WORKERS:
        # kubeadm of the release came with the images, before any drain; the kubelet moves under the drain.
        assert kube.packages(name)["kubeadm"] == "1.36.4-1.1 hold"
        assert kube.packages(name)["kubelet"] == "1.35.2-1.1 hold"
    state = kube.state()
    assert state.upgrade is not None and state.upgrade.releases == {"1.36": "1.36.4"} and not state.upgrade.finished
    assert {n: s.stage for n, s in state.upgrade.nodes.items()} == {"n1": "done", "n2": "done", "n3": "cordoned"}
    # kubeadm renewed the control planes' certificates, as it does by default, and the summary says so.
    assert "kubeadm renewed the certificates on n1, n2" in state.phases["upgrade_control_planes"].detail


def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s} s")
        time.sleep(0.5)


def test_killed_among_the_workers_the_upgrade_is_finished_by_a_rerun_and_a_second_one_does_nothing(
        kube: KubeLab) -> None:
    # The budget lets the pod go (the workload was scaled up); the same command, killed once n3's kubeadm has
    # upgraded it (the middle of the workers: n4 not begun).
    kube.fake.release("default/web-0")
    started = time.time()
    process = subprocess.Popen(kube.command("upgrade", "--to", "1.36", "--yes", "--skip-etcd-snapshot"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _wait_for(lambda: any(c.args == "upgrade node" for c in kube.calls(["n3"]) if c.start >= started)
                  or process.poll() is not None, 600, "n3's kubeadm upgrade node")
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    # n3 was drained (the pod its budget let go evicted) before its kubeadm ran; it is left cordoned.
    assert order(kube, started)[:2] == ["api evict default/web-0", "n3 kubeadm upgrade node"]
    assert kube.fake.unschedulable["n3"] is True
    record = kube.state().upgrade
    assert record is not None and record.nodes["n3"].stage in ("drained", "upgraded")
    assert kube.packages("n4")["kubelet"] == "1.35.2-1.1 hold"

    rerun_started = time.time()
    again = kube.bootstrap("upgrade", "--to", "1.36", "--yes", "--skip-etcd-snapshot")
    assert again.code == 0, again.stderr
    steps = order(kube, rerun_started)
    # The control planes are done and stay untouched; n3 is finished and back in service, then n4 drained,
    # upgraded and back in service.
    assert not [s for s in steps if s.startswith(("n1 ", "n2 ", "api cordon n1", "api cordon n2"))]
    assert steps[steps.index("api uncordon n3"):] == [
        "api uncordon n3", "api cordon n4", "n4 kubeadm upgrade node", "n4 kubelet", "api uncordon n4"]
    assert "n3 kubelet" in steps[:steps.index("api uncordon n3")]
    for name in kube.nodes:
        assert kube.packages(name) == dict.fromkeys(("kubeadm", "kubectl", "kubelet"), "1.36.4-1.1 hold")
        assert kube.running_kubelet(name) == "v1.36.4"
        source = kube.lab.node(name).ssh("cat /etc/apt/sources.list.d/cb-kubernetes.sources").stdout
        assert "/v1.36/deb/" in source
    assert kube.fake.unschedulable == dict.fromkeys(kube.nodes, False)
    state = kube.state()
    assert state.kubernetes_version == "1.36.4" and state.upgrade is not None and state.upgrade.finished
    assert {n: (s.release, s.stage) for n, s in state.upgrade.nodes.items()} == dict.fromkeys(kube.nodes,
                                                                                             ("1.36.4", "done"))
    assert "set kubernetes.version: '1.36' in" in again.stderr

    # Once more: nothing left to do, nothing done.
    calls_before = len(kube.calls())
    done = kube.bootstrap("upgrade", "--to", "1.36", "--yes", "--skip-etcd-snapshot")
    assert done.code == 0 and done.stdout.strip() == "the cluster runs 1.36.4 on every node: nothing to upgrade to 1.36"
    assert [str(c) for c in kube.calls()[calls_before:] if not c.args.startswith("version")] == []

    # Settings left at 1.35 would move the nodes back: `up` refuses them, before any connection.
    behind = kube.bootstrap("up")
    assert behind.code == 2 and behind.lines[-1] == (
        "error: kubernetes.version is 1.35, but the cluster runs 1.36.4 (an upgrade moved it forward): set "
        "kubernetes.version: '1.36' in cluster.yaml (older packages would move its nodes back)")
