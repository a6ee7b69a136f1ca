"""`bootstrap certs check` and `bootstrap certs renew` on real lab nodes over SSH: three control planes and a worker,
their kubeadm PKI real certificates made by openssl on each node (by the stand-in kubeadm: tests/lab/kube_acting.py),
read back over SSH by the product's module, renewed one control plane at a time with the static pods restarted one
by one, etcd last, by moving their manifests out and back (the stand-in crictl lists a pod while its manifest is in
place), the operator's kubeconfig refreshed; a renewal refused, changing nothing, while one control plane is down
(kubeadm-certs.md asks every component restarted; etcd keeps its quorum only while the others are up); and the opt-in
renewal timer, installed, run, skipping a degraded cluster, and removed. Not here: a real kubelet restarting real
static pods, a real etcd's quorum, and real components loading the new certificates (docs/upgrade.md)."""
from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from tests.lab import kube_acting
from tests.lab.cluster import Call, KubeLab, form_cluster
from tests.lab.lab import Lab

CONTROL_PLANES = ("n1", "n2", "n3")
# The order they restart in, one at a time (etcd last).
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")


@pytest.fixture(scope="module")
def kube(lab_factory: Callable[..., Lab], tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeLab]:
    lab = lab_factory(4)
    kube = form_cluster(lab, tmp_path_factory.mktemp("certs"), CONTROL_PLANES, ("n4",), release="1.36.4")
    try:
        yield kube
    finally:
        kube.fake.server.stop()


def rows(document: dict) -> dict[tuple[str, str], dict]:
    return {(row["node"], row["name"]): row for row in document["certificates"]["certificates"]}


def test_check_lists_every_certificate_of_every_control_plane_and_names_one_that_expires_soon(kube: KubeLab) -> None:
    outcome = kube.bootstrap("certs", "check", "-o", "json")
    assert outcome.code == 0, outcome.stderr
    found = rows(json.loads(outcome.stdout))
    managed = ("apiserver", "apiserver-etcd-client", "apiserver-kubelet-client", "etcd-healthcheck-client", "etcd-peer",
               "etcd-server", "front-proxy-client", "admin.conf", "controller-manager.conf", "scheduler.conf", "ca",
               "etcd-ca", "front-proxy-ca")
    # super-admin.conf is the first control plane's alone (kubeadm init writes it, a join does not).
    assert set(found) == {(n, name) for n in CONTROL_PLANES for name in managed} | {("n1", "super-admin.conf")}
    assert {row["status"] for row in found.values()} == {"ok"}
    assert found[("n1", "apiserver")]["days_left"] == 364 and found[("n2", "ca")]["days_left"] == 3649
    assert found[("n2", "admin.conf")]["kind"] == "kubeconfig"

    # n2's API server certificate was issued for ten days.
    kube.lab.node("n2").ssh(f". {kube_acting.PKI_LIB} && cb_leaf $pki/apiserver kube-apiserver $pki/ca 10")
    soon = kube.bootstrap("certs", "check")
    expires = (datetime.now(UTC) + timedelta(days=10)).date()
    assert soon.code == 1
    # The fix, as printed, is this cluster's own renewal (invocation.complete adds its state, inventory, settings).
    assert soon.lines[-1] in (f"error: certs_check: n2: apiserver expires {day:%Y-%m-%d}, in 9 days (below 30): run "
                              f"`{kube.printed('certs renew')}`" for day in (expires, expires - timedelta(days=1)))
    table = soon.stderr.split("certificates (warned below 30 days)")[1]
    assert [line.split()[:2] + line.split()[-2:] for line in table.splitlines() if line.split()[-1:] == ["warn"]] == [
        ["n2", "apiserver", "9", "warn"]]


def servers(calls: list[Call]) -> set[str]:
    """The API servers asked for /readyz by name (--server), in these calls."""
    return {c.args.split("--server ")[1].split()[0] for c in calls if "readyz" in c.args and "--server" in c.args}


def pki(kube: KubeLab) -> dict[str, str]:
    """Every control plane's certificates and kubeconfigs, by their SHA-256, and its manifests directory."""
    return dict(zip(CONTROL_PLANES, kube.run_everywhere(
        "cd /etc/kubernetes && sha256sum pki/*.crt pki/etcd/*.crt *.conf && ls manifests", CONTROL_PLANES), strict=True))


def test_renew_with_one_control_plane_down_is_refused_and_changes_nothing(kube: KubeLab) -> None:
    before = pki(kube)
    kube.forget_calls()
    n3 = kube.lab.node("n3")
    n3.cut_link()
    try:
        refused = kube.bootstrap("certs", "renew", "--yes")
        calls = kube.calls(["n1", "n2"])
    finally:
        n3.restore_link()
    assert refused.code == 1
    line = " ".join(refused.lines[-1].split())
    assert line.startswith("error: certs renew refused, the cluster is degraded: ") and "n3" in line, refused.stderr
    assert line.endswith("nothing was renewed or restarted)")
    phases = kube.state().phases
    assert phases["certs_health"].status == "failed" and "certs_renew" not in phases
    # n1 and n2 asked every API server (n3's does not answer them), and nothing else happened.
    assert not [c for c in calls if c.tool in ("kubeadm", "crictl")]
    assert servers(calls) == {f"https://{kube.lab.node(n).ip}:6443" for n in CONTROL_PLANES}
    assert pki(kube) == before


def test_renew_goes_one_control_plane_at_a_time_restarts_its_static_pods_and_refreshes_the_kubeconfig(
        kube: KubeLab) -> None:
    kube.forget_calls()
    outcome = kube.bootstrap("certs", "renew", "--yes", "-o", "json")
    assert outcome.code == 0, outcome.stderr
    found = rows(json.loads(outcome.stdout))
    assert found[("n2", "apiserver")]["days_left"] == 364 and {r["status"] for r in found.values()} == {"ok"}
    # The operator's copy of the admin kubeconfig carries the certificate n1's kubeadm renewed.
    local = yaml.safe_load(kube.admin_kubeconfig().read_text())
    renewed = yaml.safe_load(kube.lab.node("n1").ssh("cat /etc/kubernetes/admin.conf").stdout)
    assert local["users"][0]["user"]["client-certificate-data"] == renewed["users"][0]["user"]["client-certificate-data"]
    assert local["clusters"][0]["cluster"]["server"] == kube.fake.server.url
    assert found[("this machine", "admin kubeconfig")]["days_left"] == 364
    assert base64.b64decode(local["users"][0]["user"]["client-certificate-data"]).startswith(b"-----BEGIN CERTIFICATE")

    # One control plane at a time: n1 renewed, its pods taken down and brought back, then n2, then n3.
    calls = [c for c in kube.calls(CONTROL_PLANES) if c.tool in ("kubeadm", "crictl")]
    nodes = [c.node for c in calls]
    assert [n for i, n in enumerate(nodes) if i == 0 or nodes[i - 1] != n] == list(CONTROL_PLANES)
    for name in CONTROL_PLANES:
        mine = [c.args for c in calls if c.node == name]
        assert mine[0] == "certs renew all"
        # Each component seen gone, then back, before the next is touched; in kubeadm's order, etcd last.
        asked = [next(x for x in COMPONENTS if f"component={x} " in args) for args in mine[1:]]
        assert [x for i, x in enumerate(asked) if i == 0 or asked[i - 1] != x] == list(COMPONENTS), asked
        assert all(asked.count(x) >= 2 for x in COMPONENTS), asked
        assert kube.lab.node(name).ssh("ls /etc/kubernetes/manifests").stdout.split() == [
            f"{c}.yaml" for c in sorted(COMPONENTS)]
        assert kube.lab.node(name).ssh("test -e /etc/kubernetes/cb-restart || echo gone").stdout.strip() == "gone"
    # Before each control plane's renewal, every API server and every etcd member were asked; after its restart,
    # its own API server and etcd answered before the next one began.
    renews = {c.node: c for c in calls if c.args == "certs renew all"}
    for name in CONTROL_PLANES:
        health = [c for c in kube.calls([name]) if c.tool == "kubectl" and c.end <= renews[name].start
                  and ("readyz" in c.args or "endpoint health --cluster" in c.args)]
        assert any("endpoint health --cluster" in c.args for c in health), name
        assert servers(health) - {"https://127.0.0.1:6443"} == {f"https://{kube.lab.node(n).ip}:6443"
                                                              for n in CONTROL_PLANES}
    n1_health = [c for c in kube.calls(["n1"]) if c.tool == "kubectl" and c.start > renews["n1"].end
                 and ("readyz" in c.args or "health" in c.args)]
    assert n1_health and all(c.end <= renews["n2"].start for c in n1_health)


def timer_units(kube: KubeLab, name: str) -> str:
    return kube.lab.node(name).ssh("cat /etc/systemd/system/cb-certs-renew.timer 2>/dev/null; "
                                   "systemctl is-enabled cb-certs-renew.timer 2>/dev/null; "
                                   "systemctl is-active cb-certs-renew.timer 2>/dev/null; true").stdout


def test_the_renewal_timer_runs_at_an_hour_per_control_plane_renews_when_due_and_goes_when_turned_off(
        kube: KubeLab) -> None:
    kube.settings(certificates={"renew_timer": True, "renew_before_days": 45})
    on = kube.bootstrap("up", "--only", "certs_timer")
    assert on.code == 0, on.stderr
    for name, hour in (("n1", "03"), ("n2", "05"), ("n3", "07")):
        units = timer_units(kube, name)
        assert f"OnCalendar=*-*-* {hour}:00:00" in units and units.split()[-2:] == ["enabled", "active"]
        service = kube.lab.node(name).ssh("cat /etc/systemd/system/cb-certs-renew.service").stdout
        assert "Environment=CB_RENEW_BEFORE_DAYS=45" in service
        assert f"Environment=CB_NODE_NAME={name}" in service
    assert kube.lab.node("n4").ssh("test -e /etc/systemd/system/cb-certs-renew.timer || echo none").stdout.strip() == \
        "none"
    again = kube.bootstrap("up", "--only", "certs_timer")
    assert again.code == 0 and "renewal timer daily on every control plane (n1 03:00, n2 05:00, n3 07:00)" in \
        " ".join(again.stderr.split())

    # The timer's service: nothing is due within 45 days.
    kube.forget_calls()
    n2 = kube.lab.node("n2")
    n2.ssh("systemctl start cb-certs-renew.service")
    assert "no certificate expires within 45 days" in n2.ssh("journalctl -u cb-certs-renew.service -o cat").stdout
    assert [c for c in kube.calls(["n2"]) if c.tool == "kubeadm"] == []
    # Within 400 days everything is due; with n3 down the cluster is degraded: skipped, reported, nothing renewed.
    n2.ssh("mkdir -p /etc/systemd/system/cb-certs-renew.service.d && printf '[Service]\\nEnvironment="
           "CB_RENEW_BEFORE_DAYS=400\\n' > /etc/systemd/system/cb-certs-renew.service.d/due.conf && "
           "systemctl daemon-reload")
    n3 = kube.lab.node("n3")
    n3.cut_link()
    try:
        skipped = n2.ssh("systemctl start cb-certs-renew.service", check=False)
    finally:
        n3.restore_link()
    assert skipped.returncode != 0
    assert n2.ssh("systemctl is-failed cb-certs-renew.service", check=False).stdout.strip() == "failed"
    status = n2.ssh("cat /var/lib/cluster-bootstrap/certs-renew.status").stdout
    assert "skipped: the cluster is degraded: etcd (a member is not healthy);" in status
    assert f"the API server at https://{n3.ip}:6443 is not ready;" in status
    assert [c for c in kube.calls(["n2"]) if c.tool in ("kubeadm", "crictl")] == []
    # Healthy again, the timer renews and restarts n2's static pods, etcd last.
    n2.ssh("systemctl reset-failed cb-certs-renew.service; systemctl start cb-certs-renew.service")
    n2.ssh("rm -r /etc/systemd/system/cb-certs-renew.service.d && systemctl daemon-reload")
    assert "restarted: kube-apiserver kube-controller-manager kube-scheduler etcd" in n2.ssh(
        "journalctl -u cb-certs-renew.service -o cat").stdout
    assert n2.ssh("cat /var/lib/cluster-bootstrap/certs-renew.status").stdout.split()[1] == "renewed:"
    assert [c.args for c in kube.calls(["n2"]) if c.tool == "kubeadm"] == ["certs renew all"]

    kube.settings(certificates={"renew_timer": False})
    off = kube.bootstrap("up", "--only", "certs_timer")
    assert off.code == 0, off.stderr
    for name in CONTROL_PLANES:
        assert "OnCalendar" not in timer_units(kube, name)
    assert kube.state().certs_timer is False
    skipped = kube.bootstrap("up", "--only", "certs_timer")
    assert skipped.code == 0 and "certificates.renew_timer is false" in skipped.stderr
