"""The cluster's admin kubeconfig on the operator's machine: where it lives, how it is installed (mode 0600,
the server address this machine can reach) and how it is merged into ~/.kube/config under a named context.

Read and written with yaml.safe_load / safe_dump; the kubernetes library loads it for API calls (kube.py).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from provision.errors import BootstrapError
from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings
from provision.inputs.state import cluster_dir
from provision.render.endpoint import api_endpoint
from provision.render.node_paths import ADMIN_CONF

DEFAULT_KUBECONFIG = Path("~/.kube/config")


def admin_kubeconfig_path(cluster: Cluster) -> Path:
    """Where the operator's copy is (or will be); looking creates nothing."""
    return cluster_dir(cluster, create=False) / "admin.conf"


def fetched_kubeconfig_path(cluster: Cluster) -> Path:
    """Where the control_plane play fetches the control plane's ADMIN_CONF to, byte for byte. It stays (in
    the private cluster directory) so that a re-run fetches nothing new and reports no change."""
    return cluster_dir(cluster) / "admin.conf.fetched"


def default_context_name(cluster: Cluster) -> str:
    return f"bootstrap-{cluster.control_plane.name}"


def _load(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) if path.exists() else None
    except yaml.YAMLError as exc:
        raise BootstrapError(f"{path}: not valid YAML ({exc}); fix or move it away, then re-run") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BootstrapError(f"{path}: not a kubeconfig (the top level is not a mapping); fix or move it away")
    return data


def _write_private(path: Path, data: dict[str, Any]) -> None:
    """Write atomically with mode 0600 from the first byte (never briefly world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            yaml.safe_dump(data, handle, sort_keys=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def install_admin_kubeconfig(fetched: Path, cluster: Cluster, settings: Settings) -> Path:
    """Turn the admin.conf fetched from the first control plane into the operator's copy: mode 0600, and the server
    set to the control-plane endpoint as this machine reaches it (the VIP; else the first control plane's inventory
    address, which the API server certificate carries, see kubeadm_config)."""
    data = _load(fetched)
    clusters = data.get("clusters") or []
    if not clusters or not data.get("users"):
        raise BootstrapError(f"{fetched}: the admin kubeconfig fetched from {cluster.control_plane.name} has no "
                             f"cluster or user; check {ADMIN_CONF} there")
    for entry in clusters:
        entry.setdefault("cluster", {})["server"] = api_endpoint(cluster, settings).operator_url
    fetched.chmod(0o600)
    target = cluster_dir(cluster) / admin_kubeconfig_path(cluster).name
    _write_private(target, data)
    return target


def refresh_admin_credentials(fetched: Path, cluster: Cluster, settings: Settings) -> Path:
    """After kubeadm renewed the control plane's admin.conf (`certs renew`, `upgrade`): the operator's copy takes
    its new client certificate and key and the cluster's CA data, and keeps the server it was installed with. No
    copy yet: installed as the control_plane phase installs it."""
    target = admin_kubeconfig_path(cluster)
    if not target.exists():
        return install_admin_kubeconfig(fetched, cluster, settings)
    incoming, current = _load(fetched), _load(target)
    try:
        user = incoming["users"][0]["user"]
        authority = incoming["clusters"][0]["cluster"].get("certificate-authority-data")
        users, clusters = current["users"], current["clusters"]
    except (KeyError, IndexError, TypeError, AttributeError):
        raise BootstrapError(f"{fetched}: the admin kubeconfig fetched from {cluster.control_plane.name} has no "
                             f"cluster or user; check {ADMIN_CONF} there") from None
    for entry in users:
        entry["user"] = dict(user)
    for entry in clusters:
        if authority:
            entry.setdefault("cluster", {})["certificate-authority-data"] = authority
    fetched.chmod(0o600)
    _write_private(target, current)
    return target


def merge_kubeconfig(source: Path, context: str, target: Path = DEFAULT_KUBECONFIG) -> Path:
    """Merge the first context of `source` into `target` as cluster, user and context all named `context`,
    replacing entries of that name and keeping every other one. The merged context becomes current."""
    target = target.expanduser()
    incoming = _load(source)
    try:
        src_context = incoming["contexts"][0]["context"]
        src_cluster = next(c["cluster"] for c in incoming["clusters"] if c["name"] == src_context["cluster"])
        src_user = next(u["user"] for u in incoming["users"] if u["name"] == src_context["user"])
    except (KeyError, IndexError, StopIteration, TypeError):
        raise BootstrapError(f"{source}: not a complete kubeconfig (context, cluster and user); "
                             "fetch it again with `bootstrap up --only control_plane`") from None
    merged = _load(target) or {}
    merged.setdefault("apiVersion", "v1")
    merged.setdefault("kind", "Config")
    merged.setdefault("preferences", {})
    for key, entry in (("clusters", {"name": context, "cluster": src_cluster}),
                       ("users", {"name": context, "user": src_user}),
                       ("contexts", {"name": context, "context": {"cluster": context, "user": context}})):
        kept = [e for e in merged.get(key) or [] if isinstance(e, dict) and e.get("name") != context]
        merged[key] = [*kept, entry]
    merged["current-context"] = context
    _write_private(target, merged)
    return target


def unmerge_kubeconfig(context: str, target: Path = DEFAULT_KUBECONFIG) -> bool:
    """Remove the cluster, user and context named `context` from `target`; True if anything was removed."""
    target = target.expanduser()
    if not target.exists():
        return False
    data = _load(target)
    removed = False
    for key in ("clusters", "users", "contexts"):
        entries = data.get(key) or []
        kept = [e for e in entries if not (isinstance(e, dict) and e.get("name") == context)]
        removed |= len(kept) != len(entries)
        data[key] = kept
    if data.get("current-context") == context:
        data["current-context"] = ""
        removed = True
    if removed:
        _write_private(target, data)
    return removed
