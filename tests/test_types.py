"""The type checker runs with the tests (docs/architecture.md, "Rules"): mypy, pinned and configured in
pyproject.toml (default rules everywhere, --strict's flags on harness/results, harness/analysis, harness/campaign
and runner/contract.py), finds no error in harness/ or runner/; and a type error added to a module fails the
check naming file:line, so the first test cannot pass by mypy checking nothing."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO


def mypy(cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """mypy as `make lint` runs it (the config's `files`), with its cache outside the repository."""
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is missing: it is a dev dependency (make setup)")
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env={"PATH": "/usr/bin:/bin"}, check=False)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module: the broken copy below reuses what the clean tree's run checked (mypy compares
    each file's hash, so only the changed module and what imports it are checked again)."""
    return tmp_path_factory.mktemp("mypy-cache")


def test_mypy_finds_no_error(cache: Path) -> None:
    done = mypy(REPO, cache)
    assert done.returncode == 0, "mypy found errors (fix them rather than silence them):\n" + done.stdout + done.stderr
    assert done.stdout.startswith("Success: no issues found"), done.stdout


# one error mypy's default rules find anywhere, one only the strict flags of the typed packages find
BROKEN = [
    ("harness/parsers/fio.py", "_WRONG: int = 'not a number'", "[assignment]"),
    ("harness/results/history.py", "def _untyped(value):\n    return value", "[no-untyped-def]"),
    ("runner/contract.py", "def _untyped(value):\n    return value", "[no-untyped-def]"),
]


def test_a_type_error_fails_naming_file_and_line(tmp_path: Path, cache: Path) -> None:
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(REPO / "pyproject.toml", copy)
    for package in ("harness", "runner"):
        shutil.copytree(REPO / package, copy / package, ignore=shutil.ignore_patterns("__pycache__", "bin", "*.o"))
    expected = []
    for module, code, error in BROKEN:
        target = copy / module
        text = target.read_text()
        target.write_text(text + f"\n\n{code}  # the type error\n")
        expected.append((f"{module}:{len(text.splitlines()) + 3}: error:", error))
    done = mypy(copy, cache)
    assert done.returncode == 1, done.stdout + done.stderr
    for where, error in expected:
        assert any(line.startswith(where) and line.endswith(error) for line in done.stdout.splitlines()), (
            where, error, done.stdout)
    assert f"Found {len(BROKEN)} errors in {len(BROKEN)} files" in done.stdout, done.stdout


def test_no_module_of_the_strict_packages_is_left_out() -> None:
    """The strict flags apply by module pattern: a package renamed or moved would fall back to default rules
    silently. Each pattern of the override must still name modules that exist."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    (strict,) = [o for o in config["overrides"] if o.get("disallow_untyped_defs")]
    for pattern in strict["module"]:
        path = REPO / pattern.removesuffix(".*").replace(".", "/")
        assert path.is_dir() if pattern.endswith(".*") else path.with_suffix(".py").is_file(), pattern
