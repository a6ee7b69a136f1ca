"""The contract between the Python side and the roles (provision/render/playbook_vars.py), and the facts each
side keeps in one place: a role reads only cb_* variables render/ builds, each named there once; the roles spell
no kubeadm path, no settings enum and no other role's files; the pinned patch is decided once."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from provision.inputs.inventory import Cluster, Node
from provision.inputs.settings import parse_settings
from provision.render import node_paths
from provision.render.playbook_vars import (
    addon_vars,
    certs_renew_vars,
    certs_timer_vars,
    control_plane_vars,
    etcd_defrag_vars,
    etcd_member_join_vars,
    etcd_member_remove_vars,
    etcd_remove_vars,
    etcd_restore_api_vars,
    etcd_restore_data_vars,
    etcd_restore_stage_vars,
    etcd_restore_start_vars,
    etcd_restore_stop_vars,
    etcd_snapshot_vars,
    etcd_timer_vars,
    gpu_vars,
    join_vars,
    network_vars,
    playbook_vars,
    prepare_vars,
    upgrade_node_vars,
)
from provision.resources import PLAYBOOKS_DIR
from tests.support.paths import REPO_ROOT

CLUSTER = Cluster(inventory_path=Path("hosts.ini"), nodes=(
    Node(name="cp1", address="192.0.2.10", role="control_plane", user="root"),
    Node(name="w1", address="192.0.2.11", role="worker", user="root"),
))
ROLE_TEXTS = {path: path.read_text() for path in PLAYBOOKS_DIR.rglob("*")
              if path.suffix in (".yml", ".j2") and "library" not in path.parts}


def _built_names() -> set[str]:
    settings = parse_settings({})
    layout = {"snapshot_dir": "/var/lib/etcd-snapshots"}
    built = [playbook_vars(CLUSTER, settings), prepare_vars(CLUSTER, {"w1": 1}),
             control_plane_vars(CLUSTER, settings, "1.36.4", vip_interfaces={}, fetch_dest=Path("/tmp/admin.conf")),
             join_vars(CLUSTER, settings, vip_interfaces={}), network_vars(settings),
             gpu_vars(settings, CLUSTER, ["w1"], {"w1": ["Hopper"]}), addon_vars(settings, "volcano", "present"),
             etcd_remove_vars(["cp1"]), etcd_snapshot_vars(layout, {}),
             etcd_timer_vars(layout, enabled=True, schedule="hourly", nodes={}),
             etcd_restore_stage_vars(layout, source="s.db", staged="/s.db", status_argv={}),
             etcd_restore_stop_vars(layout, {}), etcd_restore_data_vars(layout, {}),
             etcd_restore_start_vars(layout, staged="/s.db", kinds={}), etcd_restore_api_vars(layout, restored=[]),
             etcd_defrag_vars(layout, {}),
             etcd_member_remove_vars(layout, etcdctl=["etcdctl"], ids=["1"]), etcd_member_join_vars(layout, {}),
             certs_renew_vars(Path("/tmp/admin.conf")), upgrade_node_vars(Path("/tmp/admin.conf")),
             certs_timer_vars(enabled=True, renew_before_days=30, hours={})]
    return {name for variables in built for name in variables}


def test_every_cb_variable_a_role_reads_is_built_in_render() -> None:
    """A role reading a cb_* variable nobody passes would fail on a real node only; every one the roles read is
    among those render/playbook_vars.py builds (the inventory's per-node cb_python_bootstrap aside)."""
    read = {name for text in ROLE_TEXTS.values() for name in re.findall(r"\bcb_[a-z0-9_]+", text)}
    # Module, module_utils and filter names (cb_fetch: ..., cb_etcd.py, | cb_etcd_members), the keys of the
    # modules' results and the inventory's per-node variable are not playbook variables.
    plugins = {path.stem for path in PLAYBOOKS_DIR.rglob("library/cb_*.py")} | {
        path.stem for path in PLAYBOOKS_DIR.rglob("module_utils/cb_*.py")} | {
        name for path in PLAYBOOKS_DIR.rglob("filter_plugins/*.py")
        for name in re.findall(r"^def (cb_[a-z0-9_]+)", path.read_text(), re.MULTILINE)}
    read -= plugins | {"cb_python_bootstrap", "cb_state", "cb_package_lock"}
    assert read - _built_names() == set()


def test_every_cb_variable_render_builds_is_read_by_a_role() -> None:
    """Nothing in the contract is dead: a variable no playbook reads would be a second, unused spelling of a fact
    (the node networks against the CIDRs, once a play after prepare, are preflight's now)."""
    read = {name for text in ROLE_TEXTS.values() for name in re.findall(r"\bcb_[a-z0-9_]+", text)}
    assert _built_names() - read == set()


def test_the_phases_assemble_no_playbook_variable_themselves() -> None:
    """The phases pass render/'s functions as their extra_vars: no module under provision/phases names a cb_*
    variable as a string, and render/playbook_vars.py names each once."""
    built = _built_names()
    spelled: dict[str, list[str]] = {}
    for path in sorted((REPO_ROOT / "provision").rglob("*.py")):
        # A variable is assembled as a dict's key (a module's result key by the same name is not one).
        for node in ast.walk(ast.parse(path.read_text())):
            keys = node.keys if isinstance(node, ast.Dict) else []
            for key in keys:
                if isinstance(key, ast.Constant) and key.value in built:
                    spelled.setdefault(key.value, []).append(str(path.relative_to(REPO_ROOT)))
    outside = {name: paths for name, paths in spelled.items()
               if any(path != "provision/render/playbook_vars.py" for path in paths)}
    assert outside == {}
    assert {name: paths for name, paths in spelled.items() if len(paths) > 1} == {}


@pytest.mark.parametrize("path", [node_paths.ADMIN_CONF, node_paths.KUBELET_CONF, node_paths.STATIC_POD_DIR,
                                  node_paths.KUBEADM_CONFIG, node_paths.ADDONS_DIR])
def test_the_roles_read_kubeadms_paths_from_cb_paths(path: str) -> None:
    """admin.conf, kubelet.conf, the static pods' directory, the kubeadm configuration and the add-ons' directory
    are named in render/node_paths.py; the roles read cb_paths (reset's list of what it removes aside: it names
    whole directories, /etc/kubernetes among them)."""
    spelled = [str(p.relative_to(PLAYBOOKS_DIR)) for p, text in ROLE_TEXTS.items()
               if path in text and "roles/reset/" not in str(p)]
    assert spelled == []


def test_no_role_reads_another_roles_files_or_reasserts_a_setting() -> None:
    """Roles stand alone: none loads another's variables or templates through role_path/.., none lists another's
    files, and none asserts a value the settings model already refused (its enums)."""
    assert [p for p, text in ROLE_TEXTS.items() if re.search(r"role_path\s*~?\s*['\"]?/\.\.", text)] == []
    enums = re.compile(r"cb_firewall_mode\s+(not\s+)?in\s+\[|cb_containerd_source\s+(not\s+)?in\s+\[")
    assert [p for p, text in ROLE_TEXTS.items() if enums.search(text)] == []
    # The OS family is told apart by file (setup-<family>.yml, <role>_<family> values), not tested task by task.
    tested = [str(p.relative_to(PLAYBOOKS_DIR)) for p, text in ROLE_TEXTS.items()
              if "/tasks/" in str(p) and re.search(r"node_family\s*[!=]=", text)]
    assert tested == []


def test_each_prepare_role_declares_its_dependencies() -> None:
    """The node read and the package manager are roles of their own, which the others depend on (meta/main.yml);
    the NVIDIA role configures containerd after the container runtime role."""
    import yaml

    def dependencies(role: str) -> list[str]:
        meta = yaml.safe_load((PLAYBOOKS_DIR / "roles" / role / "meta" / "main.yml").read_text())
        return [entry["role"] if isinstance(entry, dict) else entry for entry in meta.get("dependencies") or []]

    assert dependencies("node_state") == []
    assert dependencies("packages") == ["node_state"]
    for role in ("os_prep", "container_runtime", "kubernetes_packages"):
        assert dependencies(role) == ["node_state", "packages"], role
    assert dependencies("nvidia") == ["node_state", "packages", "container_runtime"]


@pytest.mark.parametrize(("version", "patch", "running", "runs"), [
    ("1.36", None, "v1.36.9", True), ("1.36", None, "v1.37.0", False), ("1.36.4", "1.36.4", "v1.36.4", True),
    ("1.36.4", "1.36.4", "v1.36.5", False), ("1.36.4", "1.36.4", "v1.36.4+k3s1", True),
])
def test_the_pinned_patch_is_decided_once(version: str, patch: str | None, running: str, runs: bool) -> None:
    """kubernetes.version pins a release or names a minor: the settings say which (patch) and judge a running
    version against it (is_running); the package specs (cb_kube_patch), the prepare check of the kubeadm
    installed and the API server's check all read that, and no role parses the version again."""
    settings = parse_settings({"kubernetes": {"version": version}})
    assert settings.kubernetes.patch == patch
    assert settings.kubernetes.is_running(running) is runs
    assert playbook_vars(CLUSTER, settings)["cb_kube_patch"] == patch
    # The variable, not the cb_kube_versions module (the upgrade's read of what a node runs).
    assert not any(re.search(r"\bcb_kube_version\b", text) or "split('.') | length" in text
                   for text in ROLE_TEXTS.values())
