"""`bootstrap etcd defrag`: the members one at a time, the leader last, through one healthy member; refused while a
member is down; NOSPACE recovered as etcd's docs recover it (compact, defragment, then disarm once every database
is under the quota, not before). The plan from three real lab members' reports (tests/data/etcd/); the node's code
(cb_etcd_defrag) run as Ansible runs it, with etcdctl stood in by a script that keeps each member's database size
and the alarm and logs every call."""
from __future__ import annotations

import copy
import json
import stat
from pathlib import Path
from typing import Any

import pytest

from provision.nodes.etcd.maintenance import defrag_problems, plan_defrag
from provision.nodes.etcd.report import EtcdReport, EtcdSurvey
from tests.support.ansible_modules import run
from tests.support.paths import REPO_ROOT

PROBES = json.loads((REPO_ROOT / "tests" / "data" / "etcd" / "probe-systemd-3.5.16.json").read_text())


def survey(leader: str = "n1", down: tuple[str, ...] = ()) -> EtcdSurvey:
    ids = {m["name"]: int(m["id"], 16) for m in PROBES["n1"]["member"]["members"]}
    reports = {}
    for name, document in PROBES.items():
        found = copy.deepcopy(document)
        found["member"]["status"]["leader"] = ids[leader]
        if name in down:
            found.update(running=False, member=None)
        reports[name] = EtcdReport.model_validate(found)
    return EtcdSurvey(reports=reports, order=list(PROBES))


def test_the_leader_is_defragmented_last_through_the_first_healthy_member() -> None:
    plan = plan_defrag(survey(leader="n1"))
    assert plan.order == ["n2", "n3", "n1"] and plan.through == "n1"
    assert plan.endpoints == ["https://10.88.1.12:2379", "https://10.88.1.13:2379", "https://10.88.1.11:2379"]
    assert plan.quota_bytes == 2 << 30
    assert plan_defrag(survey(leader="n2")).order == ["n1", "n3", "n2"]


def test_a_member_down_refuses_the_defragmentation() -> None:
    assert defrag_problems(survey()) == []
    problem, = defrag_problems(survey(down=("n3",)))
    assert problem.startswith("etcd members n3 do not answer healthy: defragment with every member up")


ETCDCTL = """#!/usr/bin/env python3
import json, sys
state_file = sys.argv[0] + ".state"
state = json.load(open(state_file))
args = [a for a in sys.argv[1:] if not a.startswith(("--cacert", "--cert=", "--key", "--command-timeout"))]
endpoint = next((a.split("=", 1)[1] for a in args if a.startswith("--endpoints=")), None)
words = [a for a in args if not a.startswith("--endpoints=")]
with open(sys.argv[0] + ".log", "a") as log:
    log.write(" ".join([endpoint or "-"] + [w for w in words if w not in ("-w", "json")]) + "\\n")
if words[:2] == ["alarm", "list"]:
    print(json.dumps({"alarms": [{"memberID": 1, "alarm": 1}] if state["alarm"] else []}))
elif words[:2] == ["endpoint", "status"]:
    print(json.dumps([{"Status": {"header": {"revision": 500}, "dbSize": state["sizes"][endpoint]}}]))
elif words[0] == "compact":
    print("compacted revision", words[1])
elif words[0] == "defrag":
    state["sizes"][endpoint] = state["after"]
    print("Finished defragmenting etcd member[%s]" % endpoint)
elif words[:2] == ["alarm", "disarm"]:
    state["alarm"] = False
json.dump(state, open(state_file, "w"))
"""
ENDPOINTS = ["https://10.0.0.2:2379", "https://10.0.0.3:2379", "https://10.0.0.1:2379"]


def etcdctl(tmp_path: Path, *, alarm: bool, after: int) -> Path:
    path = tmp_path / "etcdctl"
    path.write_text(ETCDCTL)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "etcdctl.state").write_text(json.dumps({"alarm": alarm, "after": after,
                                                        "sizes": dict.fromkeys(ENDPOINTS, 1000)}))
    return path


def defrag(tmp_path: Path, tool: Path) -> dict[str, Any]:
    return run("cb_etcd_defrag", {"etcdctl": [str(tool), "--endpoints=https://127.0.0.1:2379", "--cacert=/ca"],
                                  "endpoints": ENDPOINTS, "quota_bytes": 900, "timeout_s": 60}, tmp_path)


def test_nospace_is_compacted_defragmented_in_order_and_disarmed_once_under_the_quota(tmp_path: Path) -> None:
    result = defrag(tmp_path, etcdctl(tmp_path, alarm=True, after=400))
    assert not result.get("failed"), result
    calls = (tmp_path / "etcdctl.log").read_text().splitlines()
    leader = ENDPOINTS[-1]
    assert calls[:3] == [f"{leader} alarm list", f"{leader} endpoint status", f"{leader} compact 500 --physical"]
    assert [c.split()[0] for c in calls if c.endswith("defrag")] == ENDPOINTS
    assert calls[-1] == f"{leader} alarm disarm"
    found = result["cb_etcd_defrag"]
    assert found["disarmed"] is True and found["compacted"] == 500
    assert [(m["before"], m["after"]) for m in found["members"]] == [(1000, 400)] * 3


def test_nospace_stays_armed_while_a_database_is_still_over_the_quota(tmp_path: Path) -> None:
    result = defrag(tmp_path, etcdctl(tmp_path, alarm=True, after=950))
    assert result["cb_etcd_defrag"]["disarmed"] is False
    assert not any(c.endswith("alarm disarm") for c in (tmp_path / "etcdctl.log").read_text().splitlines())


def test_without_an_alarm_nothing_is_compacted_or_disarmed(tmp_path: Path) -> None:
    result = defrag(tmp_path, etcdctl(tmp_path, alarm=False, after=400))
    calls = (tmp_path / "etcdctl.log").read_text().splitlines()
    assert not any(" compact " in c or c.endswith("disarm") for c in calls)
    assert result["cb_etcd_defrag"]["compacted"] is None


@pytest.mark.parametrize("command", [["etcd", "defrag", "--help"]])
def test_the_command_is_there(command: list[str]) -> None:
    from tests.support.refusal import run_main

    outcome = run_main(*command)
    assert outcome.code == 0 and "the leader last" in " ".join(outcome.stdout.split())
