"""Where the files the package ships beside its code live: playbooks and roles, manifest templates, the
trainer and the Vagrant lab. They are package data, found next to this module whether the package runs
from a checkout or from an installed wheel."""
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PLAYBOOKS_DIR = PACKAGE_DIR / "playbooks"
ROLES_DIR = PLAYBOOKS_DIR / "roles"
ANSIBLE_CFG = PLAYBOOKS_DIR / "ansible.cfg"
MANIFESTS_DIR = PACKAGE_DIR / "manifests"
TRAINER_DIR = PACKAGE_DIR / "trainer"
VAGRANT_DIR = PACKAGE_DIR / "lab"
