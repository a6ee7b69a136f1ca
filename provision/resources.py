"""Where the files the package ships beside its code live: playbooks and roles, manifest templates, the
trainer and the Vagrant lab.

In a checkout (and an editable install) `playbooks/`, `manifests/` and `trainer/` sit at the repository's root,
beside `provision/`; the wheel maps them into the package (`provision/playbooks`, ...; pyproject.toml's
package-dir), so an installed tool finds them there. The package's own copy wins when it exists."""
import functools
import importlib.util
from pathlib import Path
from types import ModuleType

PACKAGE_DIR = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    inside = PACKAGE_DIR / name
    return inside if inside.is_dir() else PACKAGE_DIR.parent / name


PLAYBOOKS_DIR = _data_dir("playbooks")
ROLES_DIR = PLAYBOOKS_DIR / "roles"
# Roles grouped by domain on disk (kubespray's layout: roles/etcd/etcd_probe, ...) keep their names: Ansible looks
# in each group's folder too (playbooks/ansible.cfg's roles_path says the same for plays run by hand).
ROLE_GROUPS = ("etcd",)
ROLES_PATH = ":".join([str(ROLES_DIR), *(str(ROLES_DIR / group) for group in ROLE_GROUPS)])
ANSIBLE_CFG = PLAYBOOKS_DIR / "ansible.cfg"
MANIFESTS_DIR = _data_dir("manifests")
TRAINER_DIR = _data_dir("trainer")
VAGRANT_DIR = PACKAGE_DIR / "lab"


@functools.cache
def module_utils(name: str) -> ModuleType:
    """playbooks/module_utils/<name>.py loaded as a module: code the nodes run (Ansible ships it with our modules
    as ansible.module_utils.<name>) that the tool runs too, so that both read one copy."""
    path = PLAYBOOKS_DIR / "module_utils" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"provision._module_utils.{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
