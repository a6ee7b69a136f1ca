"""The playbooks' own Ansible modules, loaded or run here the way Ansible runs them on a node.

A module lives in playbooks/library/ (shared by several roles) or in its role's library/ (roles/<role>/library/);
what modules share lives in playbooks/module_utils/ and is imported as `ansible.module_utils.<name>`, which
Ansible ships with the module. Here the shared files are registered under those names first, so each module is
tested alone, as it runs: imported for its functions (`load`), or run with its arguments as JSON (`run`).
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from provision.resources import PLAYBOOKS_DIR

MODULE_UTILS = PLAYBOOKS_DIR / "module_utils"

# Run in the child: the shared files registered as ansible.module_utils.<name>, then the module as __main__ with
# its arguments file as its only argument (AnsibleModule reads it from sys.argv[1]).
_BOOT = """
import importlib.util, runpy, sys
from pathlib import Path
import ansible.module_utils
for path in sorted(Path(sys.argv[1]).glob("*.py")):
    name = "ansible.module_utils." + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    shared = importlib.util.module_from_spec(spec)
    sys.modules[name] = shared
    spec.loader.exec_module(shared)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def module_path(name: str) -> Path:
    """Where the module `name` lives: the playbooks' library, or the one role's library that has it."""
    found = [PLAYBOOKS_DIR / "library" / f"{name}.py", *sorted(PLAYBOOKS_DIR.glob(f"roles/*/library/{name}.py"))]
    existing = [path for path in found if path.exists()]
    if len(existing) != 1:
        raise LookupError(f"module {name}: found {len(existing)} files ({', '.join(map(str, existing)) or 'none'})")
    return existing[0]


def _register_module_utils() -> None:
    import ansible.module_utils  # noqa: F401 (the package the shared files join)

    for path in sorted(MODULE_UTILS.glob("*.py")):
        name = f"ansible.module_utils.{path.stem}"
        if name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        shared = importlib.util.module_from_spec(spec)
        sys.modules[name] = shared
        spec.loader.exec_module(shared)


def load(name: str) -> ModuleType:
    """The module `name` imported here (not run), for its functions."""
    _register_module_utils()
    spec = importlib.util.spec_from_file_location(name, module_path(name))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(name: str, arguments: dict[str, Any], work: Path, *, timeout: float = 120) -> dict[str, Any]:
    """Run the module `name` as Ansible does (its arguments as JSON in a file under `work`), and return the result
    it printed."""
    path = work / f"{name}-args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": arguments}))
    done = subprocess.run([sys.executable, "-c", _BOOT, str(MODULE_UTILS), str(module_path(name)), str(path)],
                          capture_output=True, text=True, timeout=timeout)
    try:
        result: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"{name} printed no result (exit {done.returncode}): {done.stderr[-2000:]}") from None
    return result


def shared(name: str) -> ModuleType:
    """What the modules share (playbooks/module_utils/<name>.py), imported as a module imports it."""
    _register_module_utils()
    return sys.modules[f"ansible.module_utils.{name}"]
