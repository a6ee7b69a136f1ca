"""A finding that is the same on many nodes is told once, with the nodes it holds for, by preflight and the doctor
alike (one grouping, one rendering): three healthy nodes with the same two warnings read as two warnings, and so
do fifty."""
from __future__ import annotations

import io
from dataclasses import replace

from provision.cli.commands.preflight import render
from provision.cli.console import literal_console
from provision.findings import Finding, group_findings, subjects_text
from provision.inputs.inventory import Cluster, Node
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState
from provision.nodes.preflight.run import PreflightNode, PreflightReport
from provision.phases import preflight as preflight_phase
from provision.phases.engine import PhaseContext

CONTAINERD = Finding("containerd_1x", "", "warn", "containerd 1.6.20 works with Kubernetes 1.35, the last minor that "
                         "supports containerd 1.x (installed)", "before moving to Kubernetes 1.36: upgrade the node's "
                         "containerd to 2.x (Docker's containerd.io)")
CGROUP = Finding("cgroup_v1_allowed", "", "warn", "cgroup v1, run with failCgroupV1: false because "
                     "kubelet.allow_cgroup_v1 is true", "move the node to cgroup v2 (kubelet.switch_to_cgroup_v2: true)")


def report(count: int) -> PreflightReport:
    ok = (Finding("ssh", "", "ok", "as ops"), Finding("os", "", "ok", "Debian GNU/Linux 12"))
    names = [f"n{i:02d}" for i in range(1, count + 1)]
    return PreflightReport(tuple(PreflightNode(name, "worker" if i > 0 else "control_plane", f"10.0.0.{i + 1}",
                                               tuple(replace(f, subject=name) for f in (*ok, CONTAINERD, CGROUP)))
                                 for i, name in enumerate(names)), 1.0)


def rendered(count: int) -> list[str]:
    console = literal_console(file=io.StringIO(), width=80, force_terminal=True, color_system=None)
    render(report(count), console)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue().splitlines()


def test_the_same_two_warnings_on_every_node_are_two_warnings_at_3_nodes_and_at_50() -> None:
    for count in (3, 50):
        lines = rendered(count)
        below = lines[2 + count:]
        firsts = [line for line in below if not line.startswith(" ")]
        assert len(firsts) == 2 and len(below) == 7 and max(len(line) for line in lines) <= 80
        assert firsts[0].startswith(f"warn all {count} nodes: containerd_1x: containerd 1.6.20 works")
        assert firsts[1].startswith(f"warn all {count} nodes: cgroup_v1_allowed: cgroup v1, run with")
    # Issue #25 counted 39 lines for 3 healthy nodes when each node said both: now the table and 7 lines.
    assert len(rendered(3)) == 2 + 3 + 7


def test_a_finding_on_some_nodes_names_them_and_past_a_few_counts_the_rest() -> None:
    every = [f"n{i}" for i in range(1, 21)]
    assert subjects_text(["n2", "n7"], every) == "n2, n7"
    assert subjects_text(every[:9], every) == "n1, n2, n3, n4, n5, n6 and 3 more"
    assert subjects_text(every, every) == "all 20 nodes"
    found = [Finding("swap", n, "warn", "/etc/fstab turns swap on", "swapoff -a") for n in ("n1", "n2")]
    found += [Finding("swap", "n3", "fail", "swap is on: /swapfile", "swapoff -a"),
              Finding("clock", "n1", "ok", "+0.1 s")]
    groups = group_findings(found)
    # Failures first; findings that differ in anything stay apart.
    assert [(g.status, g.subjects) for g in groups] == [("fail", ("n3",)), ("warn", ("n1", "n2")), ("ok", ("n1",))]


def test_up_and_prepare_tell_preflights_warnings_once_each(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    nodes = tuple(Node(f"n{i:02d}", f"10.0.0.{i}", "worker" if i > 1 else "control_plane", "ops") for i in range(1, 51))
    cluster = Cluster(__import__("pathlib").Path("hosts.ini"), nodes)
    monkeypatch.setattr(preflight_phase, "run_preflight", lambda *args, **kwargs: report(50))
    said: list[str] = []
    ctx = PhaseContext(cluster=cluster, settings=Settings(), state=ClusterState(), on_message=said.append)
    preflight_phase.check(ctx)
    assert said == [f"warning: all 50 nodes: containerd_1x: {CONTAINERD.detail}; fix: {CONTAINERD.fix}",
                    f"warning: all 50 nodes: cgroup_v1_allowed: {CGROUP.detail}; fix: {CGROUP.fix}"]
