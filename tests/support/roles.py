"""prepare's roles' variables and templates rendered here with Ansible's own templating, for a node of any OS the
table names: `Rendered(os, settings)` holds the role defaults, the playbooks' group_vars, prepare.yml's own
variables, the facts Ansible reports on that OS and the cb_* variables the driver passes, and renders an expression
as a task on that node would (tests/test_roles_render.py, tests/test_node_want.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import add_all_plugin_dirs, init_plugin_loader
from ansible.template import Templar, trust_as_template

from provision.inputs.inventory import Cluster, Node
from provision.inputs.settings import parse_settings
from provision.render.playbook_vars import playbook_vars, prepare_vars
from provision.resources import PLAYBOOKS_DIR
from tests.support.ansible_modules import shared

ROLES = ("node_state", "packages", "os_prep", "container_runtime", "kubernetes_packages", "nvidia")
node_want = shared("cb_node_want")
# The roles pick their OS family's values with lookup('vars'), as Ansible does once its plugins are loaded, and
# render repositories with the packages role's filters, which a play that runs the role loads.
init_plugin_loader()
add_all_plugin_dirs(str(PLAYBOOKS_DIR / "roles" / "packages"))


def facts(family: str, distribution: str, version: str, release: str, kernel: str) -> dict[str, str]:
    """What Ansible's fact gathering reports for a release (ansible/module_utils/facts/system/distribution.py)."""
    return {"ansible_os_family": family, "ansible_distribution": distribution, "ansible_distribution_version": version,
            "ansible_distribution_major_version": version.split(".")[0], "ansible_distribution_release": release,
            "ansible_kernel": kernel}


FACTS = {
    "rocky8": facts("RedHat", "Rocky", "8.10", "Green Obsidian", "4.18.0-553.el8_10.x86_64"),
    "alma8": facts("RedHat", "AlmaLinux", "8.10", "Cerulean Leopard", "4.18.0-553.el8_10.x86_64"),
    # Anolis OS names itself in /etc/redhat-release, and Ansible's os_family map does not know the name.
    "anolis8": facts("Anolis", "Anolis", "8.8", "", "5.10.134-13.an8.x86_64"),
    "alinux3": facts("RedHat", "Alibaba", "3", "Soaring Falcon", "5.10.134-16.al8.x86_64"),
    "rocky9": facts("RedHat", "Rocky", "9.4", "Blue Onyx", "5.14.0-427.13.1.el9_4.x86_64"),
    "rhel9": facts("RedHat", "RedHat", "9.4", "Plow", "5.14.0-427.el9.x86_64"),
    "centos9": facts("RedHat", "CentOS", "9", "Stream", "5.14.0-570.el9.x86_64"),
    "ol9": facts("RedHat", "OracleLinux", "9.4", "", "5.15.0-206.153.7.el9uek.x86_64"),
    "rocky10": facts("RedHat", "Rocky", "10.0", "Red Quartz", "6.12.0-55.el10_0.x86_64"),
    "alma10": facts("RedHat", "AlmaLinux", "10.0", "Purple Lion", "6.12.0-55.el10_0.x86_64"),
    "openeuler2203": facts("RedHat", "openEuler", "22.03", "LTS-SP4", "5.10.0-216.0.0.115.oe2203sp4.x86_64"),
    "openeuler2403": facts("RedHat", "openEuler", "24.03", "LTS-SP1", "6.6.0-72.0.0.76.oe2403sp1.x86_64"),
    "centos7": facts("RedHat", "CentOS", "7.9", "Core", "3.10.0-1160.el7.x86_64"),
    "ubuntu2004": facts("Debian", "Ubuntu", "20.04", "focal", "5.4.0-182-generic"),
    "ubuntu2204": facts("Debian", "Ubuntu", "22.04", "jammy", "5.15.0-105-generic"),
    "ubuntu2404": facts("Debian", "Ubuntu", "24.04", "noble", "6.8.0-45-generic"),
    "debian11": facts("Debian", "Debian", "11.11", "bullseye", "5.10.0-32-amd64"),
    "debian12": facts("Debian", "Debian", "12.5", "bookworm", "6.1.0-21-amd64"),
    "debian13": facts("Debian", "Debian", "13.1", "trixie", "6.12.48+deb13-amd64"),
}
SUPPORTED = [os for os in FACTS if os not in ("centos7", "ubuntu2004", "debian11")]
CLUSTER = Cluster(inventory_path=Path("hosts.ini"), nodes=(
    Node(name="cp1", address="192.0.2.10", role="control_plane", user="root"),
    Node(name="gpu-1", address="192.0.2.11", role="worker", user="root"),
))
GROUP_VARS = PLAYBOOKS_DIR / "group_vars" / "all.yml"
# The prepare play's own variables (prepare.yml: the requests the node is read for, the one transaction's packages).
PREPARE_VARS = DataLoader().load_from_file(str(PLAYBOOKS_DIR / "prepare.yml"), trusted_as_template=True)[1]["vars"]


def role_files() -> list[Path]:
    """Each role's defaults: defaults/main.yml, or every file of defaults/main/ (the common one and one per OS
    family, all loaded: each family's names end in the family)."""
    found = []
    for role in ROLES:
        defaults = PLAYBOOKS_DIR / "roles" / role / "defaults"
        found += sorted((defaults / "main").glob("*.yml")) if (defaults / "main").is_dir() else [defaults / "main.yml"]
    return found


class Rendered:
    """Role defaults plus the playbooks' group_vars, prepare.yml's own variables, facts and cb_* vars, rendered on
    demand. The family is the platform table's (node_family), as the roles pick it."""

    def __init__(self, os: str, settings: dict[str, Any] | None = None, **extra: Any) -> None:
        loader = DataLoader()
        variables: dict[str, Any] = loader.load_from_file(str(GROUP_VARS), trusted_as_template=True)
        # As the prepare playbook gets them: preflight found a GPU on gpu-1.
        variables |= playbook_vars(CLUSTER, parse_settings(settings or {})) | prepare_vars(CLUSTER, {"gpu-1": 1})
        variables |= FACTS[os] | {"ansible_architecture": "x86_64", "ansible_virtualization_type": "kvm",
                                  "inventory_hostname": "gpu-1",
                                  "groups": {"control_plane": ["cp1"], "workers": ["gpu-1"]},
                                  "ansible_managed": "Ansible managed", "ansible_version": {"full": "2.21.5"}}
        self.family = Templar(loader=loader, variables=variables).template(trust_as_template("{{ node_family }}"))
        role_vars: dict[str, Any] = {}
        for path in role_files():
            role_vars |= loader.load_from_file(str(path), trusted_as_template=True) or {}
        variables = role_vars | variables | PREPARE_VARS | extra
        self.templar = Templar(loader=loader, variables=variables)
        # A refused system (or one the table does not list) is never read: the platform assert stops it first.
        if "node_state_read" not in extra and self("node_platform.support | default('')") in ("supported", "warned"):
            self.templar = Templar(loader=loader, variables=variables | {"node_state_read": self.fresh_state()})

    def fresh_state(self) -> dict[str, Any]:
        """What library/cb_node_state.py reads on a fresh node for the requests of prepare.yml's roles (none of the
        roles' files, daemons or holds yet, every package missing), and which parts differ there (every one)."""
        reads = self("node_state_reads")
        want = [part for read in reads for part in read.get("want", [])]
        asked = {key: [item for read in [*reads, node_want.reads(want)] for item in read.get(key, [])]
                 for key in ("files", "dirs", "packages", "units", "sysctls")}
        missing = {"exists": False, "content": None, "sha256": None, "mode": None, "mtime": None}
        state = {
            "files": {path: dict(missing) for path in asked["files"]}
            | {"/etc/hosts": missing | {"exists": True, "content": "127.0.0.1 localhost\n", "mode": "0644"}},
            "dirs": dict.fromkeys(asked["dirs"], False),
            "missing": asked["packages"], "packages_asked": asked["packages"], "stale": [],
            "sysctls": dict.fromkeys(asked["sysctls"], "0"),
            "units": {unit: {"load": "not-found", "active": "inactive", "enabled": ""} for unit in asked["units"]},
            "modules_loaded": [], "swap": {"active": [], "fstab": []}, "hostname": "localhost", "cgroup_fs": "cgroup2fs",
            "holds": [], "policy_rc_d_ours": False,
            "marked": {read_glob["glob"]: [] for read in [*reads, node_want.reads(want)]
                       for read_glob in read.get("marked", [])},
            "versions": {name: None for read in reads for name in read.get("versions", {})},
        }
        state["differs"] = node_want.differs(state, want)
        return {"cb_state": state}

    def __call__(self, expression: str) -> Any:
        return self.templar.template(trust_as_template("{{ " + expression + " }}"))

    def template(self, role: str, name: str, **extra: Any) -> str:
        text = (PLAYBOOKS_DIR / "roles" / role / "templates" / name).read_text()
        return self.templar.copy_with_new_env(available_variables=self.templar.available_variables | extra) \
            .template(trust_as_template(text))

    def task(self, path: str, index: int, module: str, key: str) -> Any:
        """A task's argument (a role's tasks/<path>), templated for this node."""
        tasks = DataLoader().load_from_file(str(PLAYBOOKS_DIR / "roles" / path), trusted_as_template=True)
        return self.templar.template(tasks[index][module][key])
