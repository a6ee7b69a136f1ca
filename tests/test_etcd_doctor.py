"""The doctor on etcd (issue 30.10): judged from what etcd itself says, through the etcd commands' own probe
(three real lab members' reports, tests/data/etcd/): a member that is no control plane's, a control plane without a
member, NOSPACE raised, a database near its quota; and the certificates `kubeadm certs renew` does not renew (a
CA, the kubelet's client certificate) get a fix that renews them. The probe itself runs here as the doctor runs it
on a node: cb_etcd.py fed to python3 on stdin."""
from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from provision.inputs.inventory import Cluster, load_inventory
from provision.inputs.settings import Settings
from provision.nodes.doctor.checks import check_certs
from provision.nodes.doctor.etcd import judge_etcd, read_etcd
from provision.nodes.etcd.report import EtcdReport, EtcdSurvey
from provision.nodes.ssh import CommandResult, LocalShell
from tests.support.doctor_probe import health
from tests.support.paths import REPO_ROOT

PROBES = json.loads((REPO_ROOT / "tests" / "data" / "etcd" / "probe-systemd-3.5.16.json").read_text())
# Recorded before the probe read alarms: none were raised then (the lab members' `alarm list` is empty).
for _document in PROBES.values():
    _document["member"]["alarms"] = []
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\nn1 ansible_host=10.88.1.11\nn2 ansible_host=10.88.1.12\n"
                     "n3 ansible_host=10.88.1.13\n")
    return load_inventory(hosts)


def survey(**changes: dict[str, Any]) -> EtcdSurvey:
    reports = {}
    for name, document in PROBES.items():
        found = copy.deepcopy(document)
        for key, value in changes.get(name, {}).items():
            found[key] = found[key] | value if isinstance(value, dict) and isinstance(found[key], dict) else value
        reports[name] = EtcdReport.model_validate(found)
    return EtcdSurvey(reports=reports, order=list(PROBES))


def member(name: str, **changes: Any) -> dict[str, Any]:
    found = copy.deepcopy(PROBES[name]["member"])
    found.update(changes)
    return found


def problems(found: list[Any]) -> dict[tuple[str, str], Any]:
    return {(f.check, f.subject): f for f in found if f.status in ("warn", "fail")}


def test_a_healthy_etcd_has_one_member_per_control_plane_no_alarm_and_room(cluster: Cluster) -> None:
    found = judge_etcd(survey(), cluster)
    assert problems(found) == {}
    assert [(f.check, f.subject, f.status) for f in found] == [
        ("etcd_members", "cluster", "ok"), ("etcd_alarm", "cluster", "ok"), ("etcd_db", "n1", "ok"),
        ("etcd_db", "n2", "ok"), ("etcd_db", "n3", "ok")]


def test_a_stale_member_and_a_control_plane_without_one_are_named_with_their_fix(cluster: Cluster) -> None:
    members = member("n1")["members"]
    gone = members[2] | {"name": "old-cp", "id": "abc123", "peer_urls": ["https://10.88.1.99:2380"]}
    listed = member("n1", members=[members[0], members[1], gone])
    found = problems(judge_etcd(survey(n1={"member": listed}, n2={"member": listed | {"health": {
        "healthy": False, "error": "x"}}}), cluster))
    stale = found[("etcd_members", "cluster")]
    assert stale.status == "warn"
    assert stale.detail.startswith("etcd member old-cp (abc123, peer https://10.88.1.99:2380) is no control plane")
    assert stale.fix == ("on n1: `/usr/bin/etcdctl --endpoints=https://127.0.0.1:2379 "
                         "--cacert=/etc/kubernetes/pki/etcd/ca.crt --cert=/etc/kubernetes/pki/etcd/server.crt "
                         "--key=/etc/kubernetes/pki/etcd/server.key member remove abc123`")
    missing = found[("etcd_members", "n3")]
    assert missing.status == "fail" and missing.fix == "`bootstrap node replace n3`"


def test_nospace_fails_with_the_defragmentation_that_disarms_it(cluster: Cluster) -> None:
    raised = member("n2", alarms=[{"member_id": "33c4b6afb925ba04", "alarm": "NOSPACE"}])
    alarm = problems(judge_etcd(survey(n1={"member": raised}), cluster))[("etcd_alarm", "cluster")]
    assert alarm.status == "fail" and alarm.detail.startswith("etcd's NOSPACE alarm is raised (member n2)")
    assert alarm.fix.startswith("`bootstrap etcd defrag` (each member in turn, the leader last; it disarms")


def test_a_database_near_its_quota_warns_then_fails(cluster: Cluster) -> None:
    def at(size: int, in_use: int, quota: str | None = None) -> Any:
        flags = PROBES["n1"]["flags"] | ({"quota-backend-bytes": quota} if quota else {})
        state = member("n1")
        state["status"] |= {"dbSize": size, "dbSizeInUse": in_use}
        return problems(judge_etcd(survey(n1={"member": state, "flags": flags}), cluster)).get(("etcd_db", "n1"))

    assert at(1 << 30, 1 << 30) is None  # half the default 2 GiB
    near = at(1700 << 20, 1000 << 20)
    assert near.status == "warn" and near.detail == ("database 1700 MiB of its 2048 MiB quota (83%), 700 MiB of it "
                                                     "free inside")
    assert near.fix.startswith("`bootstrap etcd defrag` gives back the 700 MiB free inside")
    full = at(98 << 20, 97 << 20, quota=str(100 << 20))
    assert full.status == "fail" and "etcd raises NOSPACE" in full.detail


def test_an_expiring_ca_or_kubelet_client_certificate_gets_a_fix_that_renews_it() -> None:
    ca = check_certs("n1", health(certs="/etc/kubernetes/pki/etcd/ca.crt|Dec  5 12:00:00 2026 GMT"), NOW, 30)
    assert ca.status == "warn" and "Manual Rotation of CA Certificates" in ca.fix
    assert "kubeadm certs renew all" not in ca.fix
    kubelet = check_certs("w1", health(certs="/var/lib/kubelet/pki/kubelet-client-current.pem|Nov 20 12:00:00 "
                                             "2026 GMT"), NOW, 30)
    assert kubelet.status == "fail"
    assert kubelet.fix.startswith("the kubelet renews its client certificate itself while it is valid: "
                                  "`systemctl restart kubelet` on w1")
    assert "kubeadm kubeconfig user --org system:nodes --client-name system:node:w1" in kubelet.fix
    both = check_certs("n1", health(certs="/etc/kubernetes/pki/ca.crt|Dec  5 12:00:00 2026 GMT\n"
                                          "/etc/kubernetes/pki/apiserver.crt|Dec  5 12:00:00 2026 GMT"), NOW, 30)
    assert "Manual Rotation of CA Certificates" in both.fix and "`bootstrap certs renew`: `kubeadm certs renew all`" \
        in both.fix


def test_the_probe_runs_as_the_doctor_runs_it_and_a_broken_answer_is_one_line(cluster: Cluster) -> None:
    """cb_etcd.py on stdin of this machine's python3, through the one probe runner: a machine without etcd
    reports none (the whole document validated as the etcd commands validate it)."""
    found = read_etcd(cluster, Settings(), shell_for=lambda node: LocalShell(node.name))
    assert sorted(found.reports) == ["n1", "n2", "n3"] and found.unreachable == {}
    assert all(r.kind in ("none", "systemd", "static_pod") for r in found.reports.values())

    class Broken(LocalShell):
        def run(self, command: str, *, sudo: bool = False, timeout_s: float = 60) -> CommandResult:
            return CommandResult(self.name, command, 0, "Traceback (most recent call last):\n", "")

    broken = read_etcd(cluster, Settings(), shell_for=lambda node: Broken(node.name))
    assert broken.unreachable["n1"] == ("etcd not checked: could not read what the probe printed: the probe wrote "
                                        "no report (Traceback (most recent call last):)")
