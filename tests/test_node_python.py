"""Node-side Python runs on the oldest interpreter the platform table hands it.

Ansible runs our modules (playbooks/library, roles/*/library, with playbooks/module_utils) with each node's own
Python, and the etcd snapshot timer runs module_utils/cb_etcd.py with it too; preflight's probe runs a line of
Python on every interpreter it finds, EL8's platform-python 3.6 among them. The controller runs 3.11+, so nothing
run here would notice a 3.10 call (`zip(strict=)`) or a 3.11 name (`datetime.UTC`) in that code: on a Rocky 9 node
(Python 3.9) the module dies at import or midway. vermin knows which standard library members, arguments and
syntax each Python version has; it is run here at the floor the table gives (NODE_PYTHON_FLOOR), so a platform
added with an older Python moves the floor, and ruff's per-file target in pyproject.toml is held to the same
files and version.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path

import ansible
import pytest

from provision.inputs.platforms import MIN_NODE_PYTHON, NODE_PYTHON_FLOOR, PLATFORMS, Platform, node_python_floor
from provision.nodes.preflight.probe import PYTHON_PROBE

REPO_ROOT = Path(__file__).resolve().parents[1]
PLAYBOOKS = REPO_ROOT / "playbooks"
VERMIN = Path(sys.executable).parent / "vermin"
# The oldest interpreters preflight's probe line meets: any `python` on a node, EL8's platform-python 3.6.
PROBE_TARGETS = ((2, 7), (3, 6))


def node_python_files() -> list[Path]:
    """Every Python file under playbooks/ that runs on a node: all of them but Ansible's controller-side plugins
    (filter_plugins/, action_plugins/, ...: run by ansible-playbook here)."""
    return sorted(path for path in PLAYBOOKS.rglob("*.py")
                  if not any(part.endswith("_plugins") or part == "__pycache__" for part in path.parts))


def dotted(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))


def vermin(paths: list[Path], targets: tuple[tuple[int, int], ...]) -> list[str]:
    """What vermin finds in `paths` that needs a newer Python than every target: `path:line: feature needs X.Y`."""
    result = subprocess.run([str(VERMIN), "--no-tips", "--violations", "--format", "parsable", "--no-parse-comments",
                             *(f"-t={dotted(target)}-" for target in targets), *map(str, paths)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode in (0, 1), result.stderr
    found = []
    for line in result.stdout.splitlines():
        # file:line:column:py2:py3:feature; the summary lines have no file.
        path, number, _column, py2, py3, feature = line.split(":", 5)
        if path and feature:
            needs = " and ".join(f"Python {v}" for v in (py2, py3) if v and v != "!2")
            found.append(f"{Path(path).relative_to(REPO_ROOT) if Path(path).is_relative_to(REPO_ROOT) else path}:"
                         f"{number}: {feature} needs {needs}")
    return found


def test_the_floor_is_the_oldest_python_the_table_runs_modules_with() -> None:
    assert min(row.python_version for row in PLATFORMS if isinstance(row, Platform)) == NODE_PYTHON_FLOOR
    assert NODE_PYTHON_FLOOR == (3, 9)  # EL9's python3 (Rocky, AlmaLinux, RHEL, CentOS Stream, Oracle Linux 9)
    assert NODE_PYTHON_FLOOR >= MIN_NODE_PYTHON
    # A platform added with an older Python moves it; one with a newer Python does not.
    rocky9 = next(row for row in PLATFORMS if isinstance(row, Platform) and row.name == "Rocky Linux 9")
    newer = [row for row in PLATFORMS if isinstance(row, Platform) and row.python_version > (3, 9)]
    assert node_python_floor(newer) == (3, 10)
    assert node_python_floor([*newer, replace(rocky9, name="Rocky Linux 9 (again)")]) == (3, 9)
    # Every row states its Python: a row without one is refused when the table is read.
    with pytest.raises(ValueError, match="state the version"):
        replace(rocky9, python_version=(0, 0))


def test_node_code_needs_nothing_newer_than_the_floor() -> None:
    files = node_python_files()
    names = {path.name for path in files}
    # What runs where: the modules of every role and of playbooks/library, module_utils (also the snapshot timer's
    # script), and nothing of the controller's plugins.
    assert {"cb_certs.py", "cb_node_state.py", "cb_etcd.py", "cb_package_lock.py", "cb_nvidia_mig.py"} <= names
    assert not any("filter_plugins" in path.parts for path in files)
    assert vermin(files, (NODE_PYTHON_FLOOR,)) == []


def test_preflights_probe_line_runs_on_python_2_7_and_3_6(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PYTHON_PROBE)
    assert vermin([probe], PROBE_TARGETS) == []


def test_the_checker_finds_what_the_floor_lacks(tmp_path: Path) -> None:
    """What broke Rocky 9 nodes before: a 3.11 name and a 3.10 argument, each found and named, with the line."""
    snippet, fixed = tmp_path / "snippet.py", tmp_path / "fixed.py"
    snippet.write_text("from datetime import UTC, datetime\n"
                       "def pairs(a, b):\n    return list(zip(a, b, strict=True)), datetime.now(UTC)\n")
    fixed.write_text("from datetime import datetime, timezone\n"
                     "def pairs(a, b):\n    return list(zip(a, b)), datetime.now(timezone.utc)\n")
    found = vermin([snippet], (NODE_PYTHON_FLOOR,))
    assert any("'datetime.UTC' member needs Python 3.11" in line for line in found), found
    assert any(":3: 'zip(strict)' needs Python 3.10" in line for line in found), found
    assert vermin([fixed], (NODE_PYTHON_FLOOR,)) == []


def test_ruff_lints_node_code_for_the_floor() -> None:
    """pyproject.toml's per-file target names every node file and no other, at the floor's version."""
    ruff = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    targets = ruff["per-file-target-version"]
    assert set(targets.values()) == {f"py{NODE_PYTHON_FLOOR[0]}{NODE_PYTHON_FLOOR[1]}"}
    assert ruff["target-version"] != targets[next(iter(targets))]  # the controller's own target stays its own
    every = sorted(PLAYBOOKS.parent.glob("playbooks/**/*.py"))
    covered = [path for path in every
               if any(fnmatch(str(path.relative_to(REPO_ROOT)), pattern) for pattern in targets)]
    assert covered == node_python_files()
    for pattern in targets:
        assert re.fullmatch(r"playbooks/[\w/*]+\.py", pattern), pattern



# Each node module imported by a real CPython 3.9: the rocky9 lab base's (Debian bullseye's python3.9), run here
# with the base as its home and the three libraries bookworm lacks beside it. Only `lab`: the base is built from
# Debian's archive (minutes, once per machine). The lab stories run the modules themselves on 3.9
# (tests/test_upgrade_rhel_lab.py, tests/test_lab_flavours.py); this imports every one, those no story reaches too.
IMPORT_ALL = """import importlib.util, sys
for path in sys.argv[1:]:
    name = path.rsplit("/", 1)[-1][:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print(name, "%d.%d" % sys.version_info[:2])
"""


@pytest.mark.lab
def test_every_node_module_imports_on_a_real_python_3_9(tmp_path: Path) -> None:
    from tests.lab.lab import ensure_base

    base = ensure_base("rocky9")
    libs = tmp_path / "lib"
    libs.mkdir()
    for pattern in ("libssl.so.1.1", "libcrypto.so.1.1", "libffi.so.7*", "libmpdec.so.3*"):
        for lib in (base / "usr/lib/x86_64-linux-gnu").glob(pattern):
            shutil.copy2(lib, libs / lib.name)
    # ansible.module_utils as AnsiballZ lays it out on a node: Ansible's own and playbooks/module_utils beside it.
    package = tmp_path / "ansible"
    shutil.copytree(Path(ansible.__file__).parent / "module_utils", package / "module_utils")
    (package / "__init__.py").write_text("")
    for helper in (PLAYBOOKS / "module_utils").glob("*.py"):
        shutil.copy2(helper, package / "module_utils" / helper.name)
    modules = [path for path in node_python_files() if "module_utils" not in path.parts]
    result = subprocess.run([str(base / "usr/bin/python3.9"), "-B", "-c", IMPORT_ALL, *map(str, modules)],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path,
                            env={"PYTHONHOME": str(base / "usr"), "LD_LIBRARY_PATH": str(libs),
                                 "PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:-1] == [f"{path.stem} 3.9" for path in modules]
