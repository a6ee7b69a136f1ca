"""The habits CI keeps: ruff and mypy clean (configured in pyproject.toml), the import direction of the layers
(import-linter: inputs -> render -> nodes|kube -> phases -> cli), tests import shared helpers only from
tests/support/, and bench/ imports nothing from tests/."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

BIN = Path(sys.executable).parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / args[0]), *args[1:]], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


# ruff reads every Python file of the checkout: the trainer and the Ansible modules as well as the package.
@pytest.mark.parametrize("command", [("ruff", "check", "provision", "tests", "bench", "trainer", "playbooks"),
                                     ("mypy",), ("lint-imports",)], ids=["ruff", "mypy", "import-linter"])
def test_the_code_passes(command: tuple[str, ...]) -> None:
    result = _run(*command)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def _imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_tests_take_shared_helpers_only_from_tests_support() -> None:
    offenders = {}
    for path in sorted((REPO_ROOT / "tests").rglob("*.py")):
        # The lab's own package and the Vagrant slow tests' package are fixtures, like tests/support.
        borrowed = {m for m in _imported_modules(path)
                    if m.startswith("tests.") and not m.startswith(("tests.support", "tests.lab", "tests.vagrant"))}
        if borrowed:
            offenders[str(path.relative_to(REPO_ROOT))] = sorted(borrowed)
    assert offenders == {}


def test_benchmarks_import_no_test_module() -> None:
    """bench/ may use the lab harness (tests/lab, the project's real-node machinery) but no test module or test
    helper: a benchmark must not change when a test is rewritten."""
    offenders = {str(p.relative_to(REPO_ROOT)): sorted(m for m in _imported_modules(p)
                                                       if m.split(".")[0] == "tests" and not m.startswith("tests.lab"))
                 for p in sorted((REPO_ROOT / "bench").rglob("*.py"))}
    assert {path: modules for path, modules in offenders.items() if modules} == {}


@pytest.mark.parametrize("module", ["bench.prepare", "bench.trainer_cpu", "bench.upgrade", "bench.doctor", "bench.bundle",
                                    "bench.etcd"])
def test_benchmarks_import(module: str) -> None:
    """mypy checks the package only: a benchmark broken by a move must still fail here."""
    result = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of an import graph that hold more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph.get(module, ())):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            part = []
            while True:
                member = stack.pop()
                part.append(member)
                if member == module:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_one_that_imports_it_back() -> None:
    """Layers keep imports flowing down between packages; inside a package and in trainer/ (whose modules import
    each other as plain modules, as the pods run them) nothing goes round either: every import, a function's own
    included, counts."""
    import grimp

    graph = grimp.build_graph("provision")
    provision = {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    trainer_dir = REPO_ROOT / "trainer"
    names = {path.stem for path in trainer_dir.glob("*.py")}
    trainer = {path.stem: {m.split(".")[0] for m in _imported_modules(path)} & names
               for path in trainer_dir.glob("*.py")}
    assert _cycles(provision) == []
    assert _cycles(trainer) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # it can find one
