"""How a control plane's etcd is read: the cb_etcd module_utils find etcd's configuration (a systemd unit's
environment as recorded on a lab node; a kubeadm static pod manifest, in kubeadm's shape), where the local member
answers and with which certificates; the report the probe sent from three lab members validates, and says which
tool reads a snapshot's status and restores one for each etcd version."""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from provision.nodes.etcd.report import ETCD_REPORT_KEY, ETCD_REPORT_SCHEMA, LAYOUT, EtcdReport
from provision.resources import PLAYBOOKS_DIR
from tests.support.paths import REPO_ROOT

DATA = REPO_ROOT / "tests" / "data" / "etcd"
_spec = importlib.util.spec_from_file_location("cb_etcd", PLAYBOOKS_DIR / "module_utils" / "cb_etcd.py")
cb_etcd = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(cb_etcd)  # type: ignore[union-attr]
PROBES = json.loads((DATA / "probe-systemd-3.5.16.json").read_text())


def test_the_module_and_the_model_agree_on_the_schema_and_the_key() -> None:
    assert cb_etcd.SCHEMA == ETCD_REPORT_SCHEMA
    assert cb_etcd.REPORT_KEY == ETCD_REPORT_KEY


def test_a_systemd_etcd_is_configured_by_its_environment_files_over_the_units_own_environment() -> None:
    show = cb_etcd.parse_systemctl_show((DATA / "systemctl-show-etcd.txt").read_text())
    files = {"/etc/default/etcd": (DATA / "default-etcd.env").read_text()}
    flags = cb_etcd.unit_configuration(show, read=files.get)
    # Debian's unit sets ETCD_DATA_DIR=/var/lib/etcd/default; /etc/default/etcd (kubeadm's layout) wins.
    assert flags["name"] == "n1"
    assert flags["data-dir"] == "/var/lib/etcd"
    assert flags["initial-advertise-peer-urls"] == "https://10.88.1.11:2380"
    assert flags["trusted-ca-file"] == "/etc/kubernetes/pki/etcd/ca.crt"


def test_flags_on_the_command_line_win_over_the_environment() -> None:
    show = {"Environment": ["DAEMON_ARGS=--name=other ETCD_NAME=n1"], "EnvironmentFiles": []}
    assert cb_etcd.unit_configuration(show, read=lambda path: None)["name"] == "other"
    files = {"/etc/etcd.env": "# kubespray\nexport ETCD_DATA_DIR='/var/lib/etcd'\nETCD_NAME=\"etcd1\"\n"}
    show = {"EnvironmentFiles": ["/etc/etcd.env (ignore_errors=no)"]}
    assert cb_etcd.unit_configuration(show, read=files.get) == {"data-dir": "/var/lib/etcd", "name": "etcd1"}


def test_kubeadms_static_pod_manifest_gives_its_flags_and_its_image() -> None:
    flags, image = cb_etcd.manifest_configuration((DATA / "kubeadm-etcd-manifest.yaml").read_text())
    assert image == "registry.k8s.io/etcd:3.6.6-0"
    assert flags["name"] == "cp2"
    assert flags["data-dir"] == "/var/lib/etcd"
    assert flags["initial-cluster-state"] == "existing"
    assert flags["initial-cluster"] == "cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380"
    assert "etcd" not in flags


def test_the_local_member_is_asked_on_loopback_with_its_own_certificates() -> None:
    flags, _ = cb_etcd.manifest_configuration((DATA / "kubeadm-etcd-manifest.yaml").read_text())
    client = cb_etcd.local_client(flags)
    assert client == {"endpoint": "https://127.0.0.1:2379", "cacert": "/etc/kubernetes/pki/etcd/ca.crt",
                      "cert": "/etc/kubernetes/pki/etcd/server.crt", "key": "/etc/kubernetes/pki/etcd/server.key"}
    assert cb_etcd.etcdctl_argv("/usr/bin/etcdctl", client) == [
        "/usr/bin/etcdctl", "--endpoints=https://127.0.0.1:2379", "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
        "--cert=/etc/kubernetes/pki/etcd/server.crt", "--key=/etc/kubernetes/pki/etcd/server.key"]
    # Advertised only (no loopback listener), plain HTTP: no certificates.
    assert cb_etcd.local_client({"advertise-client-urls": "http://10.0.0.5:2379"}) == {
        "endpoint": "http://10.0.0.5:2379", "cacert": None, "cert": None, "key": None}
    assert cb_etcd.local_client({}) is None


def test_the_cluster_identity_is_its_ca_certificates_fingerprint(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    from tests.lab.etcd import EtcdCa

    ca = EtcdCa.new()
    pem = tmp_path / "ca.crt"
    pem.write_bytes(ca.member_files("n1", "10.0.0.1")["/etc/kubernetes/pki/etcd/ca.crt"][0])
    expected = x509.load_pem_x509_certificate(pem.read_bytes()).fingerprint(hashes.SHA256()).hex()
    assert cb_etcd.certificate_sha256(str(pem)) == expected
    assert cb_etcd.certificate_sha256(str(tmp_path / "missing.crt")) is None


def test_what_a_killed_snapshot_left_on_the_node_is_cleaned_and_the_last_n_are_kept(tmp_path: Path) -> None:
    directory = str(tmp_path)
    for day in range(1, 5):
        name = f"n1-2026112{day}T000000Z-r{day}.db"
        (tmp_path / name).write_bytes(b"db")
        (tmp_path / name.replace(".db", ".json")).write_text(json.dumps(
            {"name": name, "cluster": "n1", "taken_at": f"2026-11-2{day}T00:00:00Z"}))
    (tmp_path / ".n1-123.db.part").write_bytes(b"half")
    (tmp_path / "n1-20261125T000000Z-r9.db").write_bytes(b"no record")
    (tmp_path / "n1-20261126T000000Z-r9.json").write_text("{}")
    assert cb_etcd.clean_leftovers(directory) == [".n1-123.db.part", "n1-20261125T000000Z-r9.db",
                                                  "n1-20261126T000000Z-r9.json"]
    assert cb_etcd.prune(directory, "n1", 2) == sorted(
        f"n1-2026112{day}T000000Z-r{day}.{ext}" for day in (1, 2) for ext in ("db", "json"))
    assert [r["name"] for r in cb_etcd.list_snapshots(directory)] == ["n1-20261123T000000Z-r3.db",
                                                                     "n1-20261124T000000Z-r4.db"]


def test_a_restore_killed_at_any_point_and_run_again_ends_with_the_restored_data(tmp_path: Path) -> None:
    """restore_data_dir's moves, with a stand-in for etcdutl that writes a marker: the data from before the restore
    ends up in the backup once, whatever a killed run left."""
    restore = tmp_path / "etcdutl"
    restore.write_text("#!/bin/sh\nfor a; do case $a in --data-dir=*) d=${a#--data-dir=};; esac; done\n"
                       "mkdir -p $d/member && echo restored > $d/member/marker\n")
    restore.chmod(0o755)
    data = tmp_path / "etcd"
    config = {"restore_argv": [str(restore), "snapshot", "restore"], "snapshot": "snap.db", "data_dir": str(data),
              "name": "n1", "initial_cluster": "n1=https://10.0.0.1:2380", "peer_urls": "https://10.0.0.1:2380",
              "token": "t", "restore_id": "r1", "uid": os.getuid(), "gid": os.getgid()}
    backup = tmp_path / "etcd.cb-before-r1"

    def original() -> None:
        (data / "member").mkdir(parents=True)
        (data / "member" / "marker").write_text("original")

    original()
    cb_etcd.restore_data_dir(config)
    assert (data / "member" / "marker").read_text() == "restored\n"
    assert (backup / "member" / "marker").read_text() == "original"
    # Run again (killed after the swap, say): the backup keeps the original, the data is restored again.
    cb_etcd.restore_data_dir(config)
    assert (backup / "member" / "marker").read_text() == "original"
    assert (data / "member" / "marker").read_text() == "restored\n"
    # Killed between moving the data aside and moving the restored data in, with a half-restored work directory.
    import shutil

    shutil.rmtree(data)
    (tmp_path / "etcd.cb-restoring-r1" / "member").mkdir(parents=True)
    cb_etcd.restore_data_dir(config)
    assert (data / "member" / "marker").read_text() == "restored\n"
    assert (backup / "member" / "marker").read_text() == "original"
    assert not (tmp_path / "etcd.cb-restoring-r1").exists()
    assert oct(data.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("node", sorted(PROBES))
def test_the_report_each_lab_member_sent_validates_and_reads_as_healthy(node: str) -> None:
    report = EtcdReport.model_validate(PROBES[node])
    assert report.kind == "systemd" and report.running and report.healthy
    assert report.name == node
    assert report.member is not None and report.member.members is not None
    assert sorted(m.name for m in report.member.members) == ["n1", "n2", "n3"]
    assert report.server_version == (3, 5, 16)
    assert report.status_argv() == ["/usr/bin/etcdutl", "snapshot", "status"]
    assert report.restore_argv() == ["/usr/bin/etcdutl", "snapshot", "restore"]


@pytest.mark.parametrize(("etcdctl_version", "etcdutl", "expected"), [
    ("3.4.23", None, ["/usr/bin/etcdctl", "snapshot", "status"]),  # bookworm's etcd: no etcdutl yet
    ("3.5.16", None, ["/usr/bin/etcdctl", "snapshot", "status"]),  # deprecated in 3.5, still there
    ("3.6.6", None, None),  # removed from etcdctl in 3.6: etcdutl or nothing
    ("3.6.6", "/usr/local/lib/cluster-bootstrap/etcd/3.6.6/etcdutl",
     ["/usr/local/lib/cluster-bootstrap/etcd/3.6.6/etcdutl", "snapshot", "status"]),
])
def test_the_tool_that_reads_a_snapshot_follows_the_etcd_version(etcdctl_version: str, etcdutl: str | None,
                                                                  expected: list[str] | None) -> None:
    document = json.loads(json.dumps(PROBES["n1"]))
    document["tools"] |= {"etcdctl_version": etcdctl_version, "etcdutl": etcdutl}
    report = EtcdReport.model_validate(document)
    assert report.status_argv() == expected
    assert (report.restore_argv() is None) == (expected is None)


def test_a_report_of_another_shape_is_refused_whole() -> None:
    from provision.errors import BootstrapError
    from provision.nodes.etcd.report import parse_report

    with pytest.raises(BootstrapError, match="n1 sent a report of its etcd that this version .* cannot read"):
        parse_report("n1", PROBES["n1"] | {"schema": 2})


def test_the_layout_reaches_the_roles_as_one_variable() -> None:
    layout = LAYOUT.as_vars()["cb_etcd_layout"]
    assert layout["manifests_dir"] == "/etc/kubernetes/manifests"
    assert layout["snapshot_dir"] == "/var/lib/etcd-snapshots"
    assert set(layout) == set(LAYOUT.__dataclass_fields__)
