"""The `up` pipeline: phases run in order, a failure stops the run and says where to resume, --from and --only
resume, a phase finds what it needs from earlier runs (or re-runs a read-only phase that provides it), and
the summary lists every phase with its time."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from provision import phases as phases_module
from provision.cli.app import app
from provision.errors import BootstrapError, InputError
from provision.inputs.addons import ADDON_ORDER
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState
from provision.phases import NODE_ADD_PHASES, PHASES, UP_PHASES, Phase, PhaseContext, run_phases, select_phases
from provision.resources import PLAYBOOKS_DIR
from tests.support.apiserver import FakeApiServer, object_list
from tests.support.kube_objects import VERSION, healthy_pods, node


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.20.0.10\n[workers]\nw1 ansible_host=10.20.0.11\n")
    return load_inventory(hosts)


class Recorder:
    """Fake phases that record their runs, for testing the pipeline itself."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def phase(self, name: str, *, fail: bool = False, needs: tuple[str, ...] = (), provides: tuple[str, ...] = (),
              read_only: bool = False, skip: str | None = None) -> Phase:
        def check(ctx: PhaseContext) -> str:
            self.ran.append(name)
            if "gpus" in provides:
                ctx.state.gpus = {"cp1": 0, "w1": 2}
            if fail:
                raise BootstrapError(f"{name} broke: fix the widget on w1")
            return f"{name} done"
        return Phase(name, f"the {name} phase", check, needs=needs, provides=provides,  # type: ignore[arg-type]
                     read_only=read_only, skip_reason=(lambda ctx: skip) if skip else None)

    def install(self, monkeypatch: pytest.MonkeyPatch, *phases: Phase) -> None:
        monkeypatch.setattr(phases_module, "PHASES", {p.name: p for p in phases})


def context(cluster: Any, **kwargs: Any) -> PhaseContext:
    return PhaseContext(cluster=cluster, settings=Settings(), state=ClusterState.load(cluster), **kwargs)


def test_phases_run_in_order_and_a_failure_stops_the_run(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    recorder.install(monkeypatch, recorder.phase("a"), recorder.phase("b", fail=True), recorder.phase("c"))
    result = run_phases(select_phases(("a", "b", "c")), context(cluster))
    assert recorder.ran == ["a", "b"]
    assert [(o.name, o.status) for o in result.outcomes] == [("a", "ok"), ("b", "failed"), ("c", "not run")]
    assert isinstance(result.error, BootstrapError) and "fix the widget on w1" in str(result.error)
    assert all(o.seconds >= 0 for o in result.outcomes)
    # The outcomes are remembered for the next run.
    saved = ClusterState.load(cluster)
    assert saved.phases["a"].status == "ok" and saved.phases["b"].status == "failed" and "c" not in saved.phases


def test_an_unexpected_api_refusal_fails_the_phase_in_one_line(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.client.exceptions import ApiException

    def check(ctx: PhaseContext) -> str:
        raise ApiException(status=422, reason="Unprocessable Entity")

    monkeypatch.setattr(phases_module, "PHASES", {"a": Phase("a", "the a phase", check)})
    result = run_phases(select_phases(("a",)), context(cluster))
    assert [(o.name, o.status) for o in result.outcomes] == [("a", "failed")]
    assert isinstance(result.error, BootstrapError)
    assert "HTTP 422 (Unprocessable Entity)" in str(result.error) and "\n" not in str(result.error)


def test_a_phase_with_nothing_to_do_is_skipped(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    recorder.install(monkeypatch, recorder.phase("a"), recorder.phase("gpu", skip="no GPU found by preflight"))
    result = run_phases(select_phases(("a", "gpu")), context(cluster))
    assert [(o.name, o.status, o.detail) for o in result.outcomes] == [
        ("a", "ok", "a done"), ("gpu", "skipped", "no GPU found by preflight")]
    assert result.ok


def test_from_and_only_select_phases() -> None:
    assert [p.name for p in select_phases(UP_PHASES, from_phase="gpu")] == [
        "gpu", *ADDON_ORDER, "verify", "smoke"]
    assert [p.name for p in select_phases(UP_PHASES, only="network")] == ["network"]
    assert [p.name for p in select_phases(UP_PHASES)] == list(UP_PHASES)
    with pytest.raises(InputError, match="unknown phase 'netwrk': phases are preflight, prepare, control_plane"):
        select_phases(UP_PHASES, only="netwrk")
    with pytest.raises(InputError, match="exclude each other"):
        select_phases(UP_PHASES, from_phase="join", only="gpu")


def test_up_is_the_issue_order_and_node_add_reuses_its_phases() -> None:
    assert UP_PHASES == ("preflight", "prepare", "control_plane", "network", "join", "etcd_timer", "certs_timer", "gpu",
                         "volcano", "training_operator", "trainer", "cert_manager", "kserve", "pipelines",
                         "node_feature_discovery", "gpu_feature_discovery", "dcgm_exporter", "verify", "smoke")
    assert set(NODE_ADD_PHASES) <= set(UP_PHASES)
    assert all(name in PHASES for name in UP_PHASES)
    playbooks = {p.name: p.playbook for p in PHASES.values() if p.playbook}
    addons = {name: "addon.yml" for addon in ADDON_ORDER for name in (addon, f"remove_{addon}")}
    assert playbooks == {"prepare": "prepare.yml", "control_plane": "control_plane.yml", "network": "network.yml",
                         "join": "join.yml", "gpu": "gpu_plugin.yml", "etcd": "etcd_remove.yml",
                         "reset": "reset.yml", "etcd_probe": "etcd_probe.yml",
                         "etcd_snapshot": "etcd_snapshot.yml", "etcd_timer": "etcd_timer.yml",
                         "etcd_member_remove": "etcd_member_remove.yml", "etcd_member_join": "etcd_member_join.yml",
                         "etcd_defrag": "etcd_defrag.yml",
                         "certs_timer": "certs_timer.yml", "certs_check": "certs_read.yml",
                         "certs_renew": "certs_renew.yml", "upgrade_plan": "upgrade_versions.yml",
                         "upgrade_repositories": "upgrade_repositories.yml"} \
        | {f"etcd_restore_{step}": f"etcd_restore_{step}.yml" for step in ("stage", "stop", "data", "start", "api")} \
        | addons
    assert all((PLAYBOOKS_DIR / playbook).is_file() for playbook in playbooks.values())


def test_a_need_from_a_read_only_phase_runs_it_first(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    recorder.install(monkeypatch, recorder.phase("preflight", provides=("gpus",), read_only=True),
                     recorder.phase("gpu", needs=("gpus",)))
    result = run_phases(select_phases(("preflight", "gpu"), only="gpu"), context(cluster))
    assert recorder.ran == ["preflight", "gpu"]
    assert [o.name for o in result.outcomes] == ["preflight", "gpu"] and result.ok
    assert ClusterState.load(cluster).gpus == {"cp1": 0, "w1": 2}

    # Next time the saved GPU counts are enough.
    recorder.ran.clear()
    run_phases(select_phases(("preflight", "gpu"), only="gpu"), context(cluster))
    assert recorder.ran == ["gpu"]


def test_a_need_from_a_phase_that_changes_nodes_is_not_run_behind_the_users_back(cluster, monkeypatch) -> None:
    recorder = Recorder()
    recorder.install(monkeypatch, recorder.phase("control_plane", provides=("kubeconfig",)),
                     recorder.phase("network", needs=("kubeconfig",)))
    result = run_phases(select_phases(("control_plane", "network"), only="network"), context(cluster))
    assert recorder.ran == []
    assert isinstance(result.error, InputError)
    assert "run `bootstrap up --from control_plane`" in str(result.error)
    assert [(o.name, o.status) for o in result.outcomes] == [("network", "not run")]


def test_kubeadm_init_waits_for_the_release_prepare_found_installed(cluster, monkeypatch) -> None:
    # control_plane renders kubeadm's kubernetesVersion from what prepare decided; a cluster whose prepare never
    # reported is refused before any playbook runs, not handed to kubeadm to guess (dl.k8s.io's stable-1).
    ran: list[str] = []
    monkeypatch.setattr("provision.phases.engine.run_playbook", lambda *a, **k: ran.append(a[0]))
    ctx = context(cluster)
    result = run_phases(select_phases(UP_PHASES, only="control_plane"), ctx)
    assert ran == []
    assert isinstance(result.error, InputError)
    assert "needs what phase prepare makes (kubernetes_version)" in str(result.error)
    assert "`bootstrap up --from prepare`" in str(result.error)


def test_prepare_alone_runs_preflight_first_and_tells_the_playbook_the_gpu_nodes_it_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from provision.nodes.preflight.run import PreflightNode, PreflightReport
    from provision.nodes.runner import PlaybookResult

    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.20.0.10\n[workers]\nw1 ansible_host=10.20.0.11\n"
                     "w2 ansible_host=10.20.0.12 gpu=true\nw3 ansible_host=10.20.0.13 gpu=false\n")
    cluster = load_inventory(hosts)
    # What preflight counted on PCI; the inventory's gpu=true (w2) and gpu=false (w3) win over it.
    found = {"cp1": 0, "w1": 2, "w2": 0, "w3": 1}
    probed: list[list[str] | None] = []
    playbooks: list[dict[str, Any]] = []

    def fake_preflight(cluster: Any, settings: Any, *, nodes: list[str] | None = None, **_: Any) -> PreflightReport:
        probed.append(nodes)
        return PreflightReport(tuple(PreflightNode(n, "worker", "", (), found[n],
                                                gpu_generations=("Volta",) if found[n] else ())
                                     for n in nodes or found), 0.1)

    def fake_playbook(playbook: str, *args: Any, extra_vars: dict[str, Any] | None = None, **_: Any) -> PlaybookResult:
        playbooks.append({"playbook": playbook, **(extra_vars or {})})
        return PlaybookResult("prepare", playbook, 0, "successful", tmp_path, {}, [], 1.0)

    monkeypatch.setattr(phases_module.preflight, "run_preflight", fake_preflight)
    monkeypatch.setattr(phases_module.engine, "run_playbook", fake_playbook)
    monkeypatch.setattr(phases_module.prepare, "check_prepared", lambda *args: {})

    result = run_phases(select_phases(("prepare",)), context(cluster))
    assert [(o.name, o.status) for o in result.outcomes] == [("preflight", "ok"), ("prepare", "ok")], result.error
    # w1's Volta GPUs need NVIDIA's proprietary kernel module; w2 (gpu=true, none found) gets NVIDIA's default.
    assert playbooks == [{"playbook": "prepare.yml", "cb_nvidia_nodes": ["w1", "w2"],
                          "cb_nvidia_modules": {"w1": "proprietary", "w2": "open"}}]

    # The counts are kept: the next `prepare` does not probe again.
    run_phases(select_phases(("prepare",)), context(cluster))
    assert probed == [["cp1", "w1", "w2", "w3"]] and len(playbooks) == 2


def test_a_failed_preflight_records_nothing_and_the_next_prepare_runs_it_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34.1: a GPU node down during preflight was counted 0 and recorded before the refusal; the next
    `bootstrap prepare` took preflight as done and prepared that node without the NVIDIA stack."""
    from provision.findings import Finding
    from provision.nodes.preflight.run import PreflightNode, PreflightReport
    from provision.nodes.runner import PlaybookResult

    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.20.0.10\n[workers]\nw1 ansible_host=10.20.0.11\n")
    cluster = load_inventory(hosts)
    w1_up = False
    playbooks: list[dict[str, Any]] = []

    def fake_preflight(cluster: Any, settings: Any, *, nodes: list[str] | None = None, **_: Any) -> PreflightReport:
        if w1_up:
            w1 = PreflightNode("w1", "worker", "", (Finding("ssh", "w1", "ok", "reached"),), 2,
                               gpu_generations=("Ampere",))
        else:
            w1 = PreflightNode("w1", "worker", "", (Finding("ssh", "w1", "fail", "unreachable", "start it"),), 0)
        cp1 = PreflightNode("cp1", "control_plane", "", (Finding("ssh", "cp1", "ok", "reached"),), 0)
        return PreflightReport((cp1, w1), 0.1)

    def fake_playbook(playbook: str, *args: Any, extra_vars: dict[str, Any] | None = None, **_: Any) -> PlaybookResult:
        playbooks.append({"playbook": playbook, **(extra_vars or {})})
        return PlaybookResult("prepare", playbook, 0, "successful", tmp_path, {}, [], 1.0)

    monkeypatch.setattr(phases_module.preflight, "run_preflight", fake_preflight)
    monkeypatch.setattr(phases_module.engine, "run_playbook", fake_playbook)
    monkeypatch.setattr(phases_module.prepare, "check_prepared", lambda *args: {})

    failed = run_phases(select_phases(UP_PHASES, only="preflight"), context(cluster))
    assert failed.error is not None and "unreachable" in str(failed.error)
    saved = ClusterState.load(cluster)
    assert saved.gpus is None and saved.pythons == {} and saved.phases["preflight"].status == "failed"

    # w1 is back: `prepare` alone runs preflight first (nothing was recorded), and prepares w1 with its GPUs.
    w1_up = True
    result = run_phases(select_phases(("prepare",)), context(cluster))
    assert [(o.name, o.status) for o in result.outcomes] == [("preflight", "ok"), ("prepare", "ok")], result.error
    assert playbooks[0]["cb_nvidia_nodes"] == ["w1"]
    assert ClusterState.load(cluster).gpus == {"cp1": 0, "w1": 2}


@pytest.mark.parametrize("inventory", [
    "[control_plane]\ncp1 ansible_host=10.0.0.10\n[workers]\ngpu-worker-1 ansible_host=10.0.0.11\n",
    "[control_plane]\n10.0.0.10 k8s_nodename=cp1\n[workers]\n10.0.0.11 k8s_nodename=gpu-worker-1\n",
], ids=["named-host", "ip-named-host-with-k8s_nodename"])
def test_a_pascal_gpu_gets_the_proprietary_kernel_module_however_the_inventory_names_its_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inventory: str) -> None:
    """Preflight keys what it found by node name; the nvidia role looks its node up by Ansible's host name. A Pascal
    node written `10.0.0.11 k8s_nodename=gpu-worker-1` (the form the tool's own error message recommends) must not
    get the open module, which pre-Turing GPUs cannot run."""
    from provision.nodes.preflight.run import PreflightNode, PreflightReport
    from provision.nodes.runner import PlaybookResult

    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.ini"
    hosts.write_text(inventory)
    cluster = load_inventory(hosts)
    playbooks: list[dict[str, Any]] = []

    def fake_preflight(cluster: Any, settings: Any, *, nodes: list[str] | None = None, **_: Any) -> PreflightReport:
        pascal = {"gpu-worker-1": ("Pascal",)}
        return PreflightReport(tuple(PreflightNode(n, "worker", "", (), len(pascal.get(n, ())),
                                                gpu_generations=pascal.get(n, ()))
                                     for n in nodes or ("cp1", "gpu-worker-1")), 0.1)

    def fake_playbook(playbook: str, *args: Any, extra_vars: dict[str, Any] | None = None, **_: Any) -> PlaybookResult:
        playbooks.append(extra_vars or {})
        return PlaybookResult("prepare", playbook, 0, "successful", tmp_path, {}, [], 1.0)

    monkeypatch.setattr(phases_module.preflight, "run_preflight", fake_preflight)
    monkeypatch.setattr(phases_module.engine, "run_playbook", fake_playbook)
    monkeypatch.setattr(phases_module.prepare, "check_prepared", lambda *args: {})

    result = run_phases(select_phases(("prepare",)), context(cluster))
    assert result.error is None, result.error
    host = cluster.node("gpu-worker-1").host
    assert playbooks == [{"cb_nvidia_nodes": [host], "cb_nvidia_modules": {host: "proprietary"}}]


# --- the real verify phase, through the pipeline, against a stand-in API server ----------------------------

def _install_kubeconfig(cluster, server: FakeApiServer) -> None:
    from provision.kube.kubeconfig import admin_kubeconfig_path

    admin_kubeconfig_path(cluster).parent.mkdir(parents=True)
    server.write_kubeconfig(admin_kubeconfig_path(cluster))


def _stand_in_cluster(server: FakeApiServer, gpus: int = 2) -> None:
    server.add("GET", "/version/", VERSION)
    server.add("GET", "/api/v1/nodes", object_list("NodeList", [node("cp1"), node("w1", gpus=gpus)]))
    server.add("GET", "/api/v1/namespaces/kube-system/pods", object_list("PodList", healthy_pods()))
    server.add("DELETE", "/api/v1/namespaces/kube-system/pods", object_list("PodList", []))

    def created(request: Any) -> Any:
        from tests.support.apiserver import Response
        body = request.json
        body["metadata"]["name"] = "probe"
        return Response(201, body)
    server.add("POST", "/api/v1/namespaces/kube-system/pods", created)
    server.add("GET", "/api/v1/namespaces/kube-system/pods/probe",
               {"metadata": {"name": "probe"}, "spec": {"nodeName": "w1", "containers": [{"name": "c"}]},
                "status": {"phase": "Succeeded"}})
    server.add("DELETE", "/api/v1/namespaces/kube-system/pods/probe", {"metadata": {"name": "probe"}})


def test_verify_phase_checks_the_gpus_preflight_found(cluster) -> None:
    with FakeApiServer() as server:
        _stand_in_cluster(server, gpus=1)
        _install_kubeconfig(cluster, server)
        ctx = context(cluster)
        ctx.state.gpus = {"cp1": 0, "w1": 2}
        ctx.settings = Settings.model_validate({"verify": {"timeout_s": 10}})
        result = run_phases([PHASES["verify"]], ctx)
    assert [(o.name, o.status) for o in result.outcomes] == [("verify", "failed")]
    assert "w1: advertises 1 nvidia.com/gpu, preflight found 2" in str(result.error)


def test_up_only_verify_prints_the_summary_table_and_merges_the_kubeconfig(
        cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with FakeApiServer() as server:
        _stand_in_cluster(server)
        _install_kubeconfig(cluster, server)
        state = ClusterState(gpus={"cp1": 0, "w1": 2})
        state.save(cluster)
        runner = CliRunner()
        outcome = runner.invoke(app, ["up", "--inventory", str(cluster.inventory_path), "--only", "verify",
                                      "--merge-kubeconfig", "--context", "mylab"])
    assert outcome.exit_code == 0, outcome.output
    merged = tmp_path / "home" / ".kube" / "config"
    assert f"merged into {merged} as context 'mylab'" in " ".join(outcome.output.split())
    assert yaml.safe_load(merged.read_text())["current-context"] == "mylab"
    assert merged.stat().st_mode & 0o777 == 0o600
    lines = [line for line in outcome.output.splitlines() if line.strip()]
    table = "\n".join(lines)
    assert "verify" in table and "ok" in table and "2 nodes Ready, 2 GPUs allocatable, DNS answers" in table
    assert any(line.startswith("total") for line in lines)
    assert "admin kubeconfig (mode 0600):" in table
    saved = json.loads((cluster_state_file(cluster)).read_text())
    assert saved["phases"]["verify"]["status"] == "ok"


def test_up_leaves_the_users_kubeconfig_alone_without_merge_kubeconfig(
        cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with FakeApiServer() as server:
        _stand_in_cluster(server)
        _install_kubeconfig(cluster, server)
        ClusterState(gpus={"cp1": 0, "w1": 2}).save(cluster)
        outcome = CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path), "--only", "verify"])
    assert outcome.exit_code == 0, outcome.output
    assert not (tmp_path / "home" / ".kube" / "config").exists()
    assert "export KUBECONFIG=" in outcome.output and "merged into" not in outcome.output


def cluster_state_file(cluster) -> Path:
    from provision.inputs.state import cluster_dir
    return cluster_dir(cluster) / "state.json"


def test_a_failed_up_shows_where_to_resume(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    recorder.install(monkeypatch, *[recorder.phase(n, fail=(n == "join")) for n in UP_PHASES])
    outcome = CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path)])
    assert isinstance(outcome.exception, BootstrapError) and "fix the widget on w1" in str(outcome.exception)
    assert recorder.ran == ["preflight", "prepare", "control_plane", "network", "join"]
    output = outcome.output
    for name, status in (("network", "ok"), ("join", "failed"), ("gpu", "not run"), ("smoke", "not run")):
        assert any(line.split()[:1] == [name] and line.split()[1:1 + len(status.split())] == status.split()
                   for line in output.splitlines()), (name, output)
    assert "with the same inputs it resumes at join" in " ".join(output.split())

    # The re-run, with nothing but the inventory, resumes where it failed and finishes the job.
    recorder.install(monkeypatch, *[recorder.phase(n) for n in UP_PHASES])
    recorder.ran.clear()
    outcome = CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path)])
    assert outcome.exit_code == 0, outcome.output
    assert recorder.ran == list(UP_PHASES[UP_PHASES.index("join"):])
    assert "resuming at join: preflight, prepare, control_plane, network completed with these same inputs" \
        in " ".join(outcome.output.split())

    # Once every phase completed, `up` runs them all again (each changes nothing where nothing needs it).
    recorder.ran.clear()
    outcome = CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path)])
    assert outcome.exit_code == 0, outcome.output
    assert recorder.ran == list(UP_PHASES) and "resuming" not in outcome.output


def test_up_resumes_only_with_the_same_inputs_and_from_and_only_still_choose(
        cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    recorder = Recorder()
    recorder.install(monkeypatch, *[recorder.phase(n, fail=(n == "network")) for n in UP_PHASES])
    CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path)])
    recorder.install(monkeypatch, *[recorder.phase(n) for n in UP_PHASES])

    # Another setting: what completed before was reached with other inputs, so every phase runs again.
    config = tmp_path / "cluster.yaml"
    config.write_text("kubernetes:\n  pod_cidr: 10.250.0.0/16\n")
    recorder.ran.clear()
    outcome = CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path), "--config", str(config)])
    assert outcome.exit_code == 0, outcome.output
    assert recorder.ran == list(UP_PHASES) and "resuming" not in outcome.output

    # How bootstrap connects is no input of the cluster: the host-key choice changes no fingerprint.
    saved = ClusterState.load(cluster)
    saved.phases["join"].status = "failed"
    saved.save(cluster)
    recorder.ran.clear()
    outcome = CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path), "--config", str(config),
                                       "--accept-new-host-keys"])
    assert recorder.ran == list(UP_PHASES[UP_PHASES.index("join"):]), outcome.output

    for options, ran in ((["--from", "preflight"], list(UP_PHASES)), (["--only", "verify"], ["verify"])):
        saved = ClusterState.load(cluster)
        saved.phases["join"].status = "failed"
        saved.save(cluster)
        recorder.ran.clear()
        CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path), "--config", str(config), *options])
        assert recorder.ran == ran, options


# What each node brings to the phases: one change to w1's inventory line, and the phases that completed with the
# old line are no longer trusted.
W1 = "w1 ansible_host=10.20.0.11"
NODE_CHANGES = {
    "gpu": f"{W1} gpu=true",                               # prepare installs the driver on GPU nodes only
    "node_ip": f"{W1} node_ip=10.30.0.11",                 # the address kubelet and /etc/hosts give the node
    "ip (kubespray's)": f"{W1} ip=10.30.0.11",
    "node name": f"{W1} k8s_nodename=worker-1",           # the hostname and the Kubernetes node name
    "inventory host name": "worker-a ansible_host=10.20.0.11 k8s_nodename=w1",
    "address": "w1 ansible_host=10.20.0.12",
    "user": f"{W1} ansible_user=ops",
    "port": f"{W1} ansible_port=2222",
    "interpreter": f"{W1} ansible_python_interpreter=/usr/bin/python3.12",
}


@pytest.mark.parametrize("changed", list(NODE_CHANGES.values()), ids=list(NODE_CHANGES))
def test_a_node_changed_in_the_inventory_after_a_failed_up_runs_every_phase_again(
        cluster, monkeypatch: pytest.MonkeyPatch, changed: str) -> None:
    recorder = Recorder()
    recorder.install(monkeypatch, *[recorder.phase(n, fail=(n == "join")) for n in UP_PHASES])
    CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path)])
    recorder.install(monkeypatch, *[recorder.phase(n) for n in UP_PHASES])

    inventory = cluster.inventory_path.read_text()
    assert W1 in inventory
    cluster.inventory_path.write_text(inventory.replace(W1, changed))
    recorder.ran.clear()
    outcome = CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path)])
    assert outcome.exit_code == 0, outcome.output
    assert recorder.ran == list(UP_PHASES) and "resuming" not in outcome.output


def test_a_run_killed_in_a_phase_leaves_it_running_and_up_resumes_there(cluster, monkeypatch) -> None:
    recorder = Recorder()

    def killed(ctx: PhaseContext) -> str:
        recorder.ran.append("control_plane")
        raise KeyboardInterrupt  # what the run sees of SIGINT; SIGKILL leaves the same record, unsaved since
    phases = [recorder.phase(n) for n in UP_PHASES]
    phases[2] = Phase("control_plane", "the control_plane phase", killed)
    recorder.install(monkeypatch, *phases)
    with pytest.raises(KeyboardInterrupt):
        run_phases(select_phases(UP_PHASES), context(cluster))
    saved = ClusterState.load(cluster)
    assert saved.phases["prepare"].status == "ok" and saved.phases["control_plane"].status == "running"

    recorder.install(monkeypatch, *[recorder.phase(n) for n in UP_PHASES])
    recorder.ran.clear()
    outcome = CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path)])
    assert outcome.exit_code == 0, outcome.output
    assert recorder.ran == list(UP_PHASES[UP_PHASES.index("control_plane"):])


def test_a_reset_forgets_what_up_completed(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    phases = [recorder.phase(n, fail=(n == "join")) for n in UP_PHASES]
    # The real etcd phase: a worker's reset skips it (no control plane leaves).
    recorder.install(monkeypatch, *phases, Phase("drain", "drain", lambda ctx: "drained", undoes=True),
                     PHASES["etcd"], Phase("reset", "reset", lambda ctx: "clean", undoes=True))
    CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path)])
    # A worker wiped: what up completed no longer describes the nodes (resetting the control plane forgets all).
    outcome = CliRunner().invoke(app, ["reset", "w1", "--inventory", str(cluster.inventory_path), "--yes"])
    assert outcome.exit_code == 0, outcome.output
    assert set(ClusterState.load(cluster).phases) == {"drain", "etcd", "reset"}
    assert ClusterState.load(cluster).phases["etcd"].status == "skipped"

    recorder.ran.clear()
    CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path)])
    assert recorder.ran[:2] == ["preflight", "prepare"]


def test_the_fingerprint_follows_the_inputs_that_shape_the_cluster(cluster, tmp_path: Path) -> None:
    from provision.inputs.settings import parse_settings
    from provision.inputs.state import inputs_fingerprint

    base = inputs_fingerprint(cluster, Settings())
    assert inputs_fingerprint(cluster, Settings()) == base
    assert inputs_fingerprint(cluster, parse_settings({"ssh": {"connect_timeout_s": 30},
                                                       "ansible": {"executor": "stock"}})) == base
    assert inputs_fingerprint(cluster, parse_settings({"calico": {"version": "v3.32.4"}})) != base
    assert inputs_fingerprint(cluster, Settings(), ["w1"]) != base
    more = tmp_path / "more.ini"
    more.write_text(cluster.inventory_path.read_text() + "w2 ansible_host=10.20.0.12\n")
    assert inputs_fingerprint(load_inventory(more), Settings()) != base


def test_up_refuses_a_context_name_without_merge_kubeconfig_before_running_anything(
        cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    recorder.install(monkeypatch, *[recorder.phase(n) for n in UP_PHASES])
    outcome = CliRunner().invoke(app, ["up", "--inventory", str(cluster.inventory_path), "--context", "mylab"])
    # A combination the table of options refuses (cli/option_table.py): a usage error, exit 2.
    assert outcome.exit_code == 2 and "--context needs --merge-kubeconfig" in outcome.output
    assert recorder.ran == []


def test_node_commands_refuse_the_control_plane_and_unknown_names(cluster) -> None:
    runner = CliRunner()
    # (The CLI's main() turns an InputError into exit code 2.)
    outcome = runner.invoke(app, ["node", "add", "cp1", "--inventory", str(cluster.inventory_path)])
    assert isinstance(outcome.exception, InputError) and "'cp1' is the first control plane" in str(outcome.exception)
    outcome = runner.invoke(app, ["node", "remove", "w9", "--inventory", str(cluster.inventory_path), "--yes"])
    assert isinstance(outcome.exception, InputError) and "no host named 'w9'" in str(outcome.exception)
    outcome = runner.invoke(app, ["node", "add", "w1", "--inventory", str(cluster.inventory_path)])
    assert isinstance(outcome.exception, InputError) and "run `bootstrap up` first" in str(outcome.exception)


def test_removing_or_replacing_the_only_control_plane_says_to_take_the_cluster_down(cluster) -> None:
    """Issue 34.4: the refusal said to list another control plane first, in an inventory that has none."""
    for verb in ("remove", "replace"):
        outcome = CliRunner().invoke(app, ["node", verb, "cp1", "--inventory", str(cluster.inventory_path), "--yes"])
        assert isinstance(outcome.exception, InputError), outcome.output
        message = str(outcome.exception)
        assert "'cp1' is the cluster's only control plane" in message and "`bootstrap down`" in message
        assert "list another control plane" not in message


def test_reset_asks_before_wiping(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    recorder.install(monkeypatch, recorder.phase("drain"), recorder.phase("etcd", skip="no control plane is reset"),
                     recorder.phase("reset"))
    outcome = CliRunner().invoke(app, ["reset", "w1", "--inventory", str(cluster.inventory_path)], input="n\n")
    assert outcome.exit_code == 1 and recorder.ran == []
    assert "Wipe Kubernetes from w1" in outcome.output
    outcome = CliRunner().invoke(app, ["reset", "w1", "--inventory", str(cluster.inventory_path), "--yes"])
    assert outcome.exit_code == 0, outcome.output
    assert recorder.ran == ["drain", "reset"]


def test_down_resets_every_node_and_forgets_the_cluster_here(cluster, monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    from provision.inputs.state import cluster_dir
    from provision.kube.kubeconfig import admin_kubeconfig_path

    recorder = Recorder()
    seen: list[tuple[str, ...]] = []
    recorder.install(monkeypatch, Phase("drain", "drain", lambda ctx: seen.append(ctx.target_nodes) or "ok"),
                     recorder.phase("etcd", skip="every control plane is reset"), recorder.phase("reset"))
    admin_kubeconfig_path(cluster).parent.mkdir(parents=True)
    admin_kubeconfig_path(cluster).write_text(yaml.safe_dump({"clusters": []}))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    outcome = CliRunner().invoke(app, ["down", "--inventory", str(cluster.inventory_path), "--yes"])
    assert outcome.exit_code == 0, outcome.output
    assert seen == [("w1", "cp1")]  # workers first, the control plane last
    assert recorder.ran == ["reset"]
    assert not cluster_dir(cluster, create=False).exists()


def test_verify_for_a_node_added_later_looks_at_that_node(cluster) -> None:
    with FakeApiServer() as server:
        _stand_in_cluster(server)
        # Something unrelated is wrong elsewhere: it is not this run's business.
        server.add("GET", "/api/v1/nodes", object_list("NodeList", [node("cp1", ready="False", message="disk full"),
                                                                    node("w1", gpus=2)]))
        _install_kubeconfig(cluster, server)
        ctx = context(cluster, nodes=("w1",))
        ctx.state.gpus = {"cp1": 0, "w1": 2}
        result = run_phases([PHASES["verify"]], ctx)
        probe = server.requests_to("POST", "/api/v1/namespaces/kube-system/pods")[0].json
    assert result.ok, result.error
    assert result.outcomes[0].detail.startswith("1 nodes Ready, 2 GPUs allocatable, DNS answers; API through http")
    assert probe["spec"]["nodeName"] == "w1"


def test_the_join_phase_labels_the_workers_once_they_are_ready(cluster) -> None:
    """Seed 000 labels its workers by hand; the join phase does it, and a second run patches nothing."""
    labelled: dict[str, dict[str, str]] = {"cp1": {"node-role.kubernetes.io/control-plane": ""}, "w1": {}}

    def read(request: Any) -> Any:
        name = request.params["name"]
        return node(name) | {"metadata": {"name": name, "labels": dict(labelled[name])}}

    def patch(request: Any) -> Any:
        labelled[request.params["name"]] |= request.json["metadata"]["labels"]
        return read(request)

    with FakeApiServer() as server:
        server.add("GET", "/api/v1/nodes", object_list("NodeList", [node("cp1"), node("w1")]))
        server.add("GET", "/api/v1/nodes/{name}", read)
        server.add("PATCH", "/api/v1/nodes/{name}", patch)
        _install_kubeconfig(cluster, server)
        first = run_phases([Phase("join", "join", PHASES["join"].check)], context(cluster))
        second = run_phases([Phase("join", "join", PHASES["join"].check)], context(cluster))
        patches = server.requests_to("PATCH")
    assert first.ok and second.ok, (first.error, second.error)
    assert labelled["w1"] == {"node-role.kubernetes.io/worker": ""}
    assert [r.path for r in patches] == ["/api/v1/nodes/w1"]
    assert first.outcomes[0].detail == "2 nodes Ready, 1 labelled worker"
    assert second.outcomes[0].detail == "2 nodes Ready"
