"""What users of k0sctl, kubespray and kubeadm expect (issue 34): `bootstrap kubeconfig` (print or merge the admin
kubeconfig), `bootstrap status` (nodes, versions, phases done, the last run), `bootstrap up --dry-run` (the plan,
nothing touched), `bootstrap config schema` (cluster.yaml's JSON Schema) and `init`'s modeline for editors."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from provision.cli.app import app
from provision.cli.commands.config import settings_schema
from provision.errors import InputError
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState, PhaseRecord, inputs_fingerprint
from provision.inputs.workflows import UP_PHASES
from provision.kube.kubeconfig import admin_kubeconfig_path
from tests.support.apiserver import FakeApiServer, object_list
from tests.support.kube_objects import VERSION, node
from tests.support.paths import REPO_ROOT

ADMIN = {"apiVersion": "v1", "kind": "Config", "current-context": "kubernetes-admin@kubernetes",
         "clusters": [{"name": "kubernetes", "cluster": {"server": "https://10.0.0.1:6443"}}],
         "users": [{"name": "kubernetes-admin", "user": {"token": "t0ken"}}],
         "contexts": [{"name": "kubernetes-admin@kubernetes",
                       "context": {"cluster": "kubernetes", "user": "kubernetes-admin"}}]}


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.ini").write_text("[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\n"
                                        "w1 ansible_host=10.0.0.2 gpu=true\nw2 ansible_host=10.0.0.3 gpu=false\n")
    return tmp_path


def formed(site: Path) -> Path:
    """The state `up` leaves: the admin kubeconfig in the cluster's private directory."""
    path = admin_kubeconfig_path(load_inventory(site / "hosts.ini"))
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(ADMIN))
    return path


# --- bootstrap kubeconfig -------------------------------------------------------------------------------------------

def test_kubeconfig_prints_the_admin_kubeconfig_to_a_pipe_and_merges_it(site: Path) -> None:
    runner = CliRunner()
    refused = runner.invoke(app, ["kubeconfig", "-i", "hosts.ini"])
    assert isinstance(refused.exception, InputError) and "no cluster formed from hosts.ini yet" in str(refused.exception)
    assert not (site / "state").exists()
    path = formed(site)
    printed = runner.invoke(app, ["kubeconfig", "-i", "hosts.ini"])
    assert printed.exit_code == 0, printed.output
    assert yaml.safe_load(printed.stdout) == ADMIN
    # The only cluster formed here needs no inventory.
    assert runner.invoke(app, ["kubeconfig", "--path"]).stdout.strip() == str(path)
    merged = runner.invoke(app, ["kubeconfig", "--merge", "--context", "lab"])
    assert merged.exit_code == 0, merged.output
    config = yaml.safe_load((site / "home" / ".kube" / "config").read_text())
    assert config["current-context"] == "lab" and [c["name"] for c in config["contexts"]] == ["lab"]
    assert (site / "home" / ".kube" / "config").stat().st_mode & 0o777 == 0o600
    default = runner.invoke(app, ["kubeconfig", "-i", "hosts.ini", "--merge", "--into", str(site / "other.conf")])
    assert default.exit_code == 0 and yaml.safe_load((site / "other.conf").read_text())["current-context"] == \
        "bootstrap-cp1"


def test_kubeconfig_keeps_the_admin_key_off_a_terminal(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    formed(site)
    monkeypatch.setattr("provision.cli.commands.kubeconfig.stdout_is_terminal", lambda: True)
    refused = CliRunner().invoke(app, ["kubeconfig"])
    assert isinstance(refused.exception, InputError), refused.output
    assert "admin key" in str(refused.exception) and "t0ken" not in refused.output
    assert "`bootstrap kubeconfig --merge`" in str(refused.exception)


def test_kubeconfig_refuses_choices_that_contradict_each_other(site: Path) -> None:
    formed(site)
    for args, expected in ((["--context", "x"], "--context needs --merge"),
                           (["--path", "--merge"], "--path and --merge exclude each other"),
                           (["--into", "x.conf"], "--into needs --merge"),
                           (["--merge", "--context", "a\nb"], "--context"),
                           (["--merge", "--into", str(site)], "is a folder")):
        outcome = CliRunner().invoke(app, ["kubeconfig", *args])
        assert outcome.exit_code == 2 and expected in outcome.output, (args, outcome.output)
    assert not (site / "home" / ".kube").exists()


# --- bootstrap status -----------------------------------------------------------------------------------------------

def test_status_shows_nodes_phases_the_last_run_and_what_the_api_says(site: Path) -> None:
    cluster = load_inventory(site / "hosts.ini")
    state = ClusterState(gpus={"cp1": 0, "w1": 2, "w2": 0}, kubernetes_version="1.36.4")
    same = inputs_fingerprint(cluster, Settings())
    state.phases = {"preflight": PhaseRecord("ok", 3.2, "3 nodes", same, "2026-12-01T10:00:00+00:00"),
                    "prepare": PhaseRecord("ok", 200.0, "", same, "2026-12-01T10:04:00+00:00"),
                    "control_plane": PhaseRecord("failed", 40.0, "kubeadm init failed", "0ther",
                                                 "2026-12-01T10:05:00+00:00")}
    state.save(cluster)
    offline = CliRunner().invoke(app, ["status", "-i", "hosts.ini", "-o", "json"])
    assert offline.exit_code == 0, offline.output
    document = json.loads(offline.stdout)
    assert document["api"]["answered"] is False and "no cluster formed yet" in document["api"]["detail"]
    assert [(n["name"], n["gpus"]) for n in document["nodes"]] == [("cp1", 0), ("w1", 2), ("w2", 0)]
    phases = {p["name"]: p for p in document["phases"]}
    assert list(phases) == list(UP_PHASES)
    assert phases["prepare"]["status"] == "ok" and phases["prepare"]["same_inputs"] is True
    assert phases["control_plane"]["same_inputs"] is False and phases["network"]["status"] == "not run"
    assert document["last_run"] == {"phase": "control_plane", "status": "failed", "at": "2026-12-01T10:05:00+00:00"}
    assert document["kubernetes"]["installed"] == "1.36.4"

    with FakeApiServer() as api:
        api.add("GET", "/version/", VERSION)
        ready = node("cp1")
        ready["status"]["nodeInfo"] = {
            "kubeletVersion": "v1.36.4", "architecture": "amd64", "bootID": "b", "containerRuntimeVersion": "c",
            "kernelVersion": "6.1", "kubeProxyVersion": "v1.36.4", "machineID": "m", "operatingSystem": "linux",
            "osImage": "Debian GNU/Linux 12", "systemUUID": "u"}
        api.add("GET", "/api/v1/nodes", object_list("NodeList", [ready, node("w1", gpus=2, ready="False")]))
        kubeconfig = admin_kubeconfig_path(cluster)
        api.write_kubeconfig(kubeconfig)
        online = CliRunner().invoke(app, ["status", "-i", "hosts.ini", "-o", "json"])
        table = CliRunner().invoke(app, ["status", "-i", "hosts.ini"])
    assert online.exit_code == 0, online.output
    nodes = {n["name"]: n for n in json.loads(online.stdout)["nodes"]}
    assert nodes["cp1"]["ready"] is True and nodes["cp1"]["kubelet"] == "v1.36.4"
    assert nodes["w1"]["ready"] is False and nodes["w2"]["ready"] is None
    assert table.exit_code == 0, table.output
    rows = {line.split()[0]: line.split() for line in table.output.splitlines() if line.strip()}
    assert rows["cp1"][-2:] == ["yes", "v1.36.4"] and rows["control_plane"][1:3] == ["failed", "40.0s"]
    assert "last run: control_plane failed at 2026-12-01T10:05:00+00:00" in table.output


def test_the_engine_records_when_each_phase_ended(site: Path) -> None:
    from provision.phases import Phase, PhaseContext, run_phases

    cluster = load_inventory(site / "hosts.ini")
    ctx = PhaseContext(cluster=cluster, settings=Settings(), state=ClusterState())
    run_phases([Phase("verify", "the verify phase", lambda ctx: "fine")], ctx)
    assert ClusterState.load(cluster).phases["verify"].at.endswith("+00:00")


# --- bootstrap up --dry-run -----------------------------------------------------------------------------------------

def test_up_dry_run_prints_the_plan_and_touches_nothing(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_connection(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a dry run connected to a node")

    monkeypatch.setattr("provision.phases.engine.run_playbook", no_connection)
    monkeypatch.setattr("provision.phases.preflight.run_preflight", no_connection)
    (site / "cluster.yaml").write_text("addons:\n  enabled: [volcano]\nmirrors:\n  profile: cn\n")
    outcome = CliRunner().invoke(app, ["up", "-i", "hosts.ini", "-c", "cluster.yaml", "--dry-run", "-o", "json"])
    assert outcome.exit_code == 0, outcome.output
    plan = json.loads(outcome.stdout)
    assert not (site / "state").exists()
    actions = {p["name"]: (p["action"], p["reason"]) for p in plan["phases"]}
    assert list(actions) == list(UP_PHASES)
    assert actions["volcano"] == ("run", "") and actions["trainer"] == ("skip", "not in addons.enabled")
    assert actions["etcd_timer"] == ("skip", "etcd.snapshot_timer is off")
    join = next(p for p in plan["phases"] if p["name"] == "join")
    assert {"name": "Join the workers", "nodes": ["w1", "w2"]} in join["plays"]
    control = next(p for p in plan["phases"] if p["name"] == "control_plane")
    assert [play["nodes"] for play in control["plays"]] == [["cp1"]]
    sources = {s["name"]: s["url"] for s in plan["sources"]}
    assert sources["images"] == "registry.aliyuncs.com/google_containers"
    assert any("volcano" in url.lower() for url in sources.values()), sources
    text = CliRunner().invoke(app, ["up", "-i", "hosts.ini", "--dry-run"])
    assert text.exit_code == 0 and "nothing was touched" in text.output and "skip  trainer" in text.output


def test_up_dry_run_says_where_a_failed_run_would_resume(site: Path) -> None:
    cluster = load_inventory(site / "hosts.ini")
    same = inputs_fingerprint(cluster, Settings())
    state = ClusterState(gpus={"cp1": 0, "w1": 1, "w2": 0})
    state.phases = {"preflight": PhaseRecord("ok", 1.0, "", same), "prepare": PhaseRecord("ok", 1.0, "", same),
                    "control_plane": PhaseRecord("failed", 1.0, "", same)}
    state.save(cluster)
    plan = json.loads(CliRunner().invoke(app, ["up", "-i", "hosts.ini", "--dry-run", "-o", "json"]).stdout)
    assert plan["resume_from"] == "control_plane"
    assert [(p["name"], p["action"]) for p in plan["phases"][:3]] == [
        ("preflight", "done"), ("prepare", "done"), ("control_plane", "run")]
    # gpu: preflight found w1's GPU.
    assert next(p for p in plan["phases"] if p["name"] == "gpu")["action"] == "run"


def test_up_dry_run_refuses_bad_input_in_one_line(site: Path) -> None:
    for args, expected in ((["--only", "nosuch"], "unknown phase 'nosuch'"),
                           (["--merge-kubeconfig"], "--dry-run and --merge-kubeconfig exclude each other")):
        outcome = CliRunner().invoke(app, ["up", "-i", "hosts.ini", "--dry-run", *args])
        assert outcome.exit_code == 2 and expected in outcome.output, outcome.output
    assert not (site / "state").exists()


# --- bootstrap config schema, and init's modeline --------------------------------------------------------------------

def test_the_schema_accepts_every_example_and_refuses_what_the_settings_refuse(tmp_path: Path) -> None:
    schema = json.loads(CliRunner().invoke(app, ["config", "schema"]).stdout)
    assert schema == json.loads(json.dumps(settings_schema()))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for example in sorted((REPO_ROOT / "inventory").glob("*.yaml")):
        # An example that is all comments is the empty document: every default.
        assert list(validator.iter_errors(yaml.safe_load(example.read_text()) or {})) == [], example
    for bad in ({"kubernets": {}}, {"kubernetes": {"pod_cidr": 5}}, {"mirrors": {"profile": "us"}},
                {"smoke_test": {"enabled": "maybe"}}):
        assert list(validator.iter_errors(bad)), bad
    out = tmp_path / "schema.json"
    assert CliRunner().invoke(app, ["config", "schema", "--out", str(out)]).exit_code == 0
    assert json.loads(out.read_text()) == schema


def test_init_writes_the_modeline_and_the_schema_it_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    outcome = CliRunner().invoke(app, ["init", "--control-plane", "10.0.0.10", "--dir", str(tmp_path)])
    assert outcome.exit_code == 0, outcome.output
    first = (tmp_path / "cluster.yaml").read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=cluster.schema.json"
    schema = json.loads((tmp_path / "cluster.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(yaml.safe_load((tmp_path / "cluster.yaml").read_text()))
    again = CliRunner().invoke(app, ["init", "--control-plane", "10.0.0.10", "--dir", str(tmp_path)])
    assert isinstance(again.exception, InputError) and "never overwrites" in str(again.exception)
