"""`bootstrap doctor` as a user reads it: a row per node and one for the API within 80 columns, each problem once
below with the nodes it holds for and its fix, or one JSON document; exit 0 when healthy, 1 with problems, 2 on
bad input before any node is reached."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provision.cli.app import app
from provision.cli.commands.doctor import render, report_document
from provision.cli.console import literal_console
from provision.diagnose.doctor import DoctorReport
from provision.errors import BootstrapError, InputError
from provision.findings import Finding
from provision.nodes.doctor.run import NodeDoctorReport

KUBELET = ("the kubelet is not running (inactive, dead); its last lines: Stopped kubelet.service",
           "`systemctl start kubelet` on the node (`systemctl enable kubelet` keeps it at boot)")


def node(name: str, role: str = "worker", *problems: Finding, probed: bool = True) -> NodeDoctorReport:
    ok = [Finding(check, name, "ok", "fine") for check in ("swap", "hostname", "hosts", "firewall", "containerd")]
    return NodeDoctorReport(name, role, "10.0.0.1", (*ok, *problems) if probed else problems, probed=probed)


REPORT = DoctorReport((
    node("control-plane-1", "control_plane"),
    node("gpu-worker-in-rack-b-with-a-long-name-17", "worker", Finding("kubelet", "gpu-worker-in-rack-b-with-a-long-name-17",
                                                                         "fail", *KUBELET)),
    node("w2", "worker", Finding("kubelet", "w2", "fail", *KUBELET),
         Finding("certs", "w2", "warn", "expiring within 30 days: /var/lib/kubelet/pki/kubelet-client-current.pem",
                 "renew them: `bootstrap up --only control_plane`")),
    node("w3", "worker", Finding("ssh", "w3", "fail", "not checked: unreachable: no SSH answer within 10 s",
                                 "check ansible_host"), probed=False),
), (Finding("api", "cluster", "ok", "answers at https://10.0.0.10:6443"),
    Finding("node", "w2", "fail", "NotReady (NodeStatusUnknown: Kubelet stopped posting node status.)", "see its kubelet"),
    Finding("etcd", "cluster", "ok", "1 of 1 members ready")), 2.4, "https://10.0.0.10:6443")


def lines(report: DoctorReport = REPORT) -> list[str]:
    console = literal_console(file=io.StringIO(), width=80, force_terminal=True, color_system=None)
    render(report, console)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue().splitlines()


def test_a_row_per_node_and_the_api_within_80_columns_then_each_problem_once() -> None:
    shown = lines()
    assert max(len(line) for line in shown) <= 80, shown
    assert shown[0] == "doctor: 4 nodes and the API in 2.4 s"
    assert shown[1].split() == ["NODE", "ROLE", "STATUS", "CHECKS"]
    rows = [line.split() for line in shown[2:7]]
    assert rows[0] == ["control-plane-1", "control-plane", "ok", "5", "ok"]
    assert rows[1][0] == "gpu-worker-in-rack-b-wi…" and rows[1][2:] == ["FAIL", "5", "ok,", "1", "problem"]
    # What the API says of a node counts on its row.
    assert rows[2][:4] == ["w2", "worker", "FAIL", "(3)"]
    assert rows[3] == ["w3", "worker", "FAIL", "unreachable"]
    assert rows[4] == ["(API)", "-", "ok", "2", "ok"]
    below = " ".join(" ".join(shown[7:]).split())
    assert below.count("kubelet: the kubelet is not running") == 1
    assert "FAIL gpu-worker-in-rack-b-with-a-long-name-17, w2: kubelet: the kubelet is not running" in below
    assert "FAIL w3: ssh: not checked: unreachable" in below and "FAIL w2: node: NotReady" in below
    assert "warn w2: certs: expiring" in below


def test_the_json_document_has_every_check_and_the_problems_grouped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", "/srv/state")
    document = json.loads(json.dumps(report_document(REPORT)))
    assert document["healthy"] is False and document["api_server"] == "https://10.0.0.10:6443"
    assert [n["name"] for n in document["nodes"]] == ["control-plane-1", "gpu-worker-in-rack-b-with-a-long-name-17",
                                                      "w2", "w3"]
    assert len(document["nodes"][0]["checks"]) == 5 and document["nodes"][3]["probed"] is False
    kubelet = next(p for p in document["problems"] if p["check"] == "kubelet")
    assert kubelet["nodes"] == ["gpu-worker-in-rack-b-with-a-long-name-17", "w2"]
    assert {p["check"] for p in document["problems"]} == {"kubelet", "ssh", "node", "certs"}


def test_exit_codes_are_0_healthy_1_with_problems_2_on_bad_input(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.ini"
    # Port 1 on this machine: refused at once, nothing leaves it.
    inventory.write_text("[control_plane]\ncp1 ansible_host=127.0.0.1 ansible_port=1 ansible_user=root\n")
    result = CliRunner().invoke(app, ["doctor", "-i", str(inventory)], env={"COLUMNS": "80"})
    assert isinstance(result.exception, BootstrapError) and result.exception.exit_code == 1
    assert "doctor: 1 problem on cp1 (fixes listed above); fix them and run `bootstrap doctor" in str(result.exception)
    assert "FAIL cp1: ssh: not checked: unreachable" in " ".join(result.output.split())
    assert "skip cluster: api: not checked: no admin kubeconfig" in " ".join(result.output.split())
    healthy = DoctorReport((node("cp1", "control_plane"),), (Finding("api", "cluster", "skip", "not checked"),), 0.3)
    monkeypatch.setattr("provision.diagnose.doctor.run_doctor", lambda *args, **kwargs: healthy)
    result = CliRunner().invoke(app, ["doctor", "-i", str(inventory), "-o", "json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["healthy"] is True
    result = CliRunner().invoke(app, ["doctor", "-i", str(tmp_path / "missing.ini")])
    assert isinstance(result.exception, InputError) and "missing.ini" in str(result.exception)
