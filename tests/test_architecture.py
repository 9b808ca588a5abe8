"""The architecture is enforced, not hoped for (docs/architecture.md, "Rules"): the import contracts in
pyproject.toml hold, a new import against the flow fails `lint-imports` naming it, no module cycle exists in
harness/ or runner/, and no class or function outgrows a room."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.helpers import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
MAX_CLASS_LINES, MAX_FUNCTION_LINES = 200, 60


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} is missing: import-linter is a dev dependency (make setup)")
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)}, check=False)


def test_the_import_contracts_hold() -> None:
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout and "BROKEN" not in done.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("harness/config/target.py", "import harness.campaign.orchestrator", "data flows one way"),
    ("runner/util.py", "import harness.errors", "the runner (on the boards) imports nothing from the controller"),
    ("harness/parsers/fio.py", "import harness.results.loader", "parsers are pure"),
])
def test_an_import_against_the_flow_fails_naming_it(tmp_path: Path, module: str, line: str, contract: str) -> None:
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(REPO / "pyproject.toml", copy)
    for package in ("harness", "runner"):
        shutil.copytree(REPO / package, copy / package, ignore=shutil.ignore_patterns("__pycache__", "bin", "*.o"))
    target = copy / module
    target.write_text(target.read_text() + f"\n{line}  # the forbidden arrow\n")
    done = lint_imports(copy)
    assert done.returncode == 1, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert f"{contract}" in out and "BROKEN" in out, out
    importer = module.removesuffix(".py").replace("/", ".")
    assert importer in out, out  # the offending module is named


def _cycles(package: str) -> list[list[str]]:
    """Strongly connected module groups (imports inside functions count: they are arrows too)."""
    graph = grimp.build_graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan, iterative enough for a few hundred modules
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph.find_modules_directly_imported_by(module):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                other = stack.pop()
                group.append(other)
                if other == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


@pytest.mark.parametrize("package", ["harness", "runner"])
def test_no_module_imports_itself_back(package: str) -> None:
    assert _cycles(package) == []


@pytest.mark.parametrize("package", ["harness", "runner"])
def test_no_room_outgrows_the_house(package: str) -> None:
    too_big = []
    for path in sorted((REPO / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
            if size > limit:
                too_big.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} is {size} lines (limit {limit})")
    assert too_big == []
