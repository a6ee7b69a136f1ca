#!/usr/bin/python
"""Report a control plane's etcd as one JSON document, returned under `cb_etcd`.

How etcd runs there (kubeadm's static pod, its manifest in the manifests directory or moved aside by a restore;
or a systemd unit), its configuration (the manifest's flags, or the unit's ETCD_* environment and DAEMON_ARGS),
the etcdctl and etcdutl it can use, whether it runs, and what the local member answers (status, members,
health, how many keys), the CA's fingerprint (the cluster's identity), its data directory, the free space there
and where snapshots go, the snapshots kept on the node, and the snapshot timer. provision/nodes/etcd/report.py
validates the document (its `schema` must be the one that model reads) and Python judges it. It only reads:
changed is always false.
"""
from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import sys

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cb_etcd import (
    CONTROL_PLANE_PODS,
    REPORT_KEY,
    SCHEMA,
    EtcdError,
    certificate_sha256,
    disk_free,
    etcdctl_argv,
    list_snapshots,
    local_client,
    manifest_configuration,
    member_state,
    parse_systemctl_show,
    run,
    tool_version,
    unit_configuration,
)

DOCUMENTATION = r"""
module: cb_etcd_probe
short_description: Report a control plane's etcd as one JSON document (cb_etcd)
options:
  manifests_dir:
    description: The kubelet's static pod directory.
    type: path
    required: true
  stopped_dir:
    description: Where a restore moves the control plane's static pod manifests while it works.
    type: path
    required: true
  unit:
    description: The systemd unit of an etcd not run as a static pod.
    type: str
    required: true
  tools_dir:
    description: Where etcdctl and etcdutl copied out of the etcd image live, one directory per version.
    type: path
    required: true
  snapshot_dir:
    description: Where the node keeps its snapshots.
    type: path
    required: true
  timer_unit:
    description: The snapshot timer's unit.
    type: str
    required: true
  ask:
    description: Ask the local member (status, members, health, keys) when it runs.
    type: bool
    default: true
  nodes:
    description: Also read the names of the Kubernetes Node objects the member's store holds.
    type: bool
    default: false
"""

IMAGE_VERSION_RE = re.compile(r":v?([0-9]+\.[0-9]+\.[0-9]+)(?:[-+][0-9A-Za-z.-]*)?(?:@sha256:[0-9a-f]{64})?$")


def systemctl_show(unit: str, properties: list[str]) -> dict[str, list[str]]:
    try:
        result = run(["systemctl", "show", unit] + ["--property=" + p for p in properties], timeout=30)
    except EtcdError:
        return {}
    return parse_systemctl_show(result.stdout) if result.returncode == 0 else {}


def first(show: dict[str, list[str]], key: str) -> str:
    return (show.get(key) or [""])[-1]


def static_pod_running() -> bool | None:
    """Whether the kubelet runs an etcd container (crictl), None when crictl cannot tell."""
    if not shutil.which("crictl"):
        return None
    try:
        result = run(["crictl", "ps", "--name", "^etcd$", "--state", "running", "-q"], timeout=30)
    except EtcdError:
        return None
    return bool(result.stdout.strip()) if result.returncode == 0 else None


def tools_for(kind: str, version: str | None, tools_dir: str) -> dict[str, str | None]:
    """etcdctl and etcdutl: for a static pod, those copied out of its image (tools_dir/<version>/), else those on
    PATH (Debian's etcd-client and etcd-server, kubespray's /usr/local/bin)."""
    found: dict[str, str | None] = {}
    for tool in ("etcdctl", "etcdutl"):
        copied = os.path.join(tools_dir, version or "-", tool)
        on_path = shutil.which(tool) or next((p for p in ("/usr/local/bin/" + tool, "/usr/bin/" + tool)
                                              if os.access(p, os.X_OK)), None)
        found[tool] = copied if kind == "static_pod" and os.access(copied, os.X_OK) else on_path
    return found


def restore_bumps(etcdutl: str | None) -> bool:
    """Whether this etcdutl can raise the revision on restore (--bump-revision, --mark-compacted)."""
    if not etcdutl:
        return False
    try:
        result = run([etcdutl, "snapshot", "restore", "--help"], timeout=20)
    except EtcdError:
        return False
    return "--bump-revision" in result.stdout + result.stderr and "--mark-compacted" in result.stdout + result.stderr


def data_dir_facts(path: str | None) -> dict:
    facts: dict = {"path": path, "exists": False, "member": False, "uid": None, "gid": None, "db_bytes": None}
    if not path:
        return facts
    try:
        stat = os.stat(path)
    except OSError:
        return facts
    facts.update(exists=True, uid=stat.st_uid, gid=stat.st_gid, member=os.path.isdir(os.path.join(path, "member")))
    try:
        facts["db_bytes"] = os.path.getsize(os.path.join(path, "member", "snap", "db"))
    except OSError:
        pass
    return facts


def probe(params: dict) -> dict:
    manifests_dir, stopped_dir = params["manifests_dir"], params["stopped_dir"]
    report: dict = {"schema": SCHEMA, "python": sys.executable, "kind": "none", "source": None, "flags": {},
                    "image": None, "version": None, "running": False, "user": "root", "errors": [],
                    "manifests": {"active": [p for p in CONTROL_PLANE_PODS
                                             if os.path.exists(os.path.join(manifests_dir, p + ".yaml"))],
                                  "stopped": [p for p in CONTROL_PLANE_PODS
                                              if os.path.exists(os.path.join(stopped_dir, p + ".yaml"))]}}
    manifest = next((p for p in (os.path.join(manifests_dir, "etcd.yaml"), os.path.join(stopped_dir, "etcd.yaml"))
                     if os.path.exists(p)), None)
    if manifest:
        with open(manifest, encoding="utf-8", errors="replace") as handle:
            flags, image = manifest_configuration(handle.read())
        match = IMAGE_VERSION_RE.search(image or "")
        report.update(kind="static_pod", source=manifest, flags=flags, image=image,
                      version=match.group(1) if match else None)
        running = static_pod_running()
        report["running"] = bool(running) if running is not None else "etcd" in report["manifests"]["active"]
    else:
        show = systemctl_show(params["unit"], ["LoadState", "ActiveState", "User", "Environment",
                                               "EnvironmentFiles", "FragmentPath"])
        if first(show, "LoadState") == "loaded":
            etcd = shutil.which("etcd")
            report.update(kind="systemd", source=first(show, "FragmentPath") or params["unit"],
                          flags=unit_configuration(show), running=first(show, "ActiveState") in ("active", "reloading"),
                          user=first(show, "User") or "root", version=tool_version(etcd))
    tools = tools_for(report["kind"], report["version"], params["tools_dir"])
    report["tools"] = dict(tools, etcdctl_version=tool_version(tools["etcdctl"]),
                           etcdutl_version=tool_version(tools["etcdutl"]), restore_bumps=restore_bumps(tools["etcdutl"]))
    try:
        account = pwd.getpwnam(report["user"])
        report["user_ids"] = {"uid": account.pw_uid, "gid": account.pw_gid}
    except KeyError:
        report["user_ids"] = None
    client = local_client(report["flags"])
    report["client"] = client
    report["etcdctl"] = etcdctl_argv(tools["etcdctl"], client) if tools["etcdctl"] and client else None
    report["member"] = None
    if params["ask"] and report["running"] and report["etcdctl"]:
        report["member"] = member_state(report["etcdctl"], registry_nodes=params["nodes"])
    report["ca_sha256"] = certificate_sha256(report["flags"].get("trusted-ca-file"))
    data_dir = report["flags"].get("data-dir")
    report["data_dir"] = data_dir_facts(data_dir)
    # Data directories a restore (.cb-before-<id>) or a replace (.cb-replaced-<id>) kept aside.
    report["backups"] = sorted(glob.glob(glob.escape(data_dir.rstrip("/")) + ".cb-*")) if data_dir else []
    report["free_bytes"] = {"data_dir": disk_free(os.path.dirname(data_dir.rstrip("/"))) if data_dir else None,
                            "snapshot_dir": disk_free(params["snapshot_dir"])}
    report["snapshots"] = list_snapshots(params["snapshot_dir"])
    timer = systemctl_show(params["timer_unit"], ["LoadState", "UnitFileState", "ActiveState"])
    service = systemctl_show(params["timer_unit"].replace(".timer", ".service"), ["Result", "ExecMainExitTimestamp"])
    report["timer"] = {"installed": first(timer, "LoadState") == "loaded",
                       "enabled": first(timer, "UnitFileState") == "enabled",
                       "active": first(timer, "ActiveState") == "active",
                       "last_result": first(service, "Result") or None,
                       "last_run": first(service, "ExecMainExitTimestamp") or None}
    return report


def main() -> None:
    module = AnsibleModule(argument_spec={
        "manifests_dir": {"type": "path", "required": True},
        "stopped_dir": {"type": "path", "required": True},
        "unit": {"type": "str", "required": True},
        "tools_dir": {"type": "path", "required": True},
        "snapshot_dir": {"type": "path", "required": True},
        "timer_unit": {"type": "str", "required": True},
        "ask": {"type": "bool", "default": True},
        "nodes": {"type": "bool", "default": False},
    }, supports_check_mode=True)
    module.exit_json(changed=False, **{REPORT_KEY: probe(module.params)})


if __name__ == "__main__":
    main()
