"""The repository stands alone: a clone in an empty directory has every file its tests, benchmarks, notebooks and
demo read. No tracked file may point outside the repository (a development machine has a ``shared`` folder beside
the project; a user's machine does not)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

# What a path out of the repository looks like. Built from parts so this file does not match itself.
SHARED = "sha" + "red"
OUTSIDE = [
    (re.compile(r"\.\./" + SHARED + r"\b"), "a path to the development machine's shared folder"),
    (re.compile(SHARED + r"/(fixtures|engines|seeds)\b"), "a path into the development machine's shared folder"),
    (re.compile(r"[\"']" + SHARED + r"[\"']\s*/"), "a path into the development machine's shared folder"),
    (re.compile(r"/wo" + r"rk/"), "an absolute path of the development machine"),
    (re.compile(r"\.py" + r"env/versions"), "a hard-coded pyenv location (find interpreters through a variable)"),
    (re.compile(r"REPO\.pa" + r"rent\b"), "a path beside the repository"),
]
# Test, benchmark and notebook files sit one level down: two levels up from them is outside the repository.
BESIDE = (re.compile(r"pare" + r"nts\[[2-9]\]"), "a path above the repository")
BINARY = {".png", ".svg", ".parquet", ".gguf", ".bin", ".ipynb", ".tar", ".gz", ".xz"}


def tracked_files() -> list[str]:
    """The files a clone has: git's list where this is a checkout, else every file (a copied tree)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if listed.returncode == 0 and listed.stdout:
        return [name for name in listed.stdout.decode().split("\0") if name and (REPO / name).is_file()]
    skip = {".venv", ".git", "__pycache__", ".pytest_cache", ".ruff_cache", "bin"}
    return [str(p.relative_to(REPO)) for p in REPO.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(REPO).parts)]


def references_outside(name: str, text: str) -> list[str]:
    """``file:line: what`` for every reference to a path outside the repository."""
    checks = list(OUTSIDE)
    if name.split("/")[0] in {"tests", "bench", "notebooks"} and name.count("/") == 1:
        checks.append(BESIDE)
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if name == ".ci/run" and "HARNESS_ENGINE_SOURCES=" in line:
            continue  # CI names the optional engine-archive folder through the one variable meant for it
        for pattern, what in checks:
            if pattern.search(line):
                found.append(f"{name}:{number}: {what}: {line.strip()[:120]}")
    return found


def test_no_tracked_file_refers_outside_the_repository() -> None:
    found = []
    for name in tracked_files():
        if Path(name).suffix in BINARY:
            continue
        try:
            text = (REPO / name).read_text()
        except UnicodeDecodeError:
            continue
        found += references_outside(name, text)
    assert not found, "\n".join(found)


# a path inside the repository named in code, comments or docs: it must exist (placeholders like NAME, x, my*)
INSIDE = re.compile(r"(?<![\w/.-])((?:harness|runner|docs|tests|bench|experiments|notebooks|targets)/[\w./-]*"
                    r"\.(?:py|md|yaml|c|toml|jsonl))\b")
PLACEHOLDER = re.compile(r"/(NAME|x|my\w*|mine|orin|test_x)\.\w+$")


def test_every_path_the_repository_names_exists() -> None:
    missing = []
    for name in tracked_files():
        if Path(name).suffix not in {".py", ".md", ".c", ".toml"} or name.startswith("tests/data/"):
            continue
        for number, line in enumerate((REPO / name).read_text().splitlines(), 1):
            for match in INSIDE.finditer(line):
                path = match.group(1)
                if not PLACEHOLDER.search(path) and not (REPO / path).exists():
                    missing.append(f"{name}:{number}: {path} does not exist")
    assert not missing, "\n".join(missing)


def test_the_check_names_file_and_line() -> None:
    text = "ok\nFIX = REPO.pa" + "rent / 'x'\n"
    assert references_outside("tests/test_x.py", text) == [
        "tests/test_x.py:2: a path beside the repository: FIX = REPO.pa" + "rent / 'x'"]
    assert references_outside("tests/test_x.py", "p = Path(__file__).pare" + "nts[2] / 'x'")
    assert not references_outside("harness/config/target.py", "p = Path(__file__).pare" + "nts[2] / 'targets'")


def _reads_captures(path: Path) -> bool:
    text = path.read_text()
    return "DATA" in text or "FIXTURES" in text or "tests/data" in text or "fakeboard" in text


@pytest.mark.slow
def test_capture_reading_tests_pass_from_a_copy_with_nothing_beside_it(tmp_path: Path) -> None:
    """Copy the tracked tree into an empty directory and run every test module that reads tests/data there
    (its quick tests: the slow ones start campaigns the rest of this suite runs from the checkout)."""
    copy = tmp_path / "empty" / "harness"
    for name in tracked_files():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, copy / name)
    assert sorted(p.name for p in copy.parent.iterdir()) == ["harness"]
    modules = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py")
                     if p.name != Path(__file__).name and _reads_captures(p))
    assert "tests/test_parsers.py" in modules and "tests/test_parsers_tegrastats.py" in modules
    # python -m pytest puts the copy first on sys.path: the copy's harness and tests are the ones imported
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider",
                           "-o", "addopts=", *modules], cwd=copy, capture_output=True, text=True, env=env,
                          timeout=500, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " error" not in done.stdout
    imported = subprocess.run([sys.executable, "-c", "import harness, tests.helpers as h; "
                               "print(harness.__file__); print(h.REPO)"],
                              cwd=copy, capture_output=True, text=True, check=True).stdout.split()
    assert all(line.startswith(str(copy)) for line in imported), imported


