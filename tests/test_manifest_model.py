"""The manifest of a result set: one reader (the versioned loader), one writer (``ResultSetWriter``).

A manifest read past the loader skips its ``schema_version`` and field checks: an old or damaged set then fails
as a KeyError deep in --resume or --confirm instead of one line. A manifest written past the writer skips its lock
(the campaign's target threads share it) and its whole-or-nothing save."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

# The modules that may name manifest.json in code, and why
ALLOWED = {
    "harness/results/loader.py": "the one reader: checks schema_version and the fields readers index",
    "harness/results/store.py": "the one writer: its lock and its whole-or-nothing save",
    "harness/results/upgrade.py": "rewrites sets of an older schema, which the loader refuses by design",
    "harness/results/checksums.py": "names the file among those SHA256SUMS seals (hashes its bytes, reads nothing)",
}


def manifest_mentions(path: Path) -> list[int]:
    """The lines of ``path`` whose code (not a docstring or comment) holds the string "manifest.json"."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return sorted({node.lineno for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)
                   and "manifest.json" in node.value and id(node) not in docstrings})


def test_only_the_loader_and_the_writer_touch_manifest_json() -> None:
    found = {}
    for path in sorted((REPO / "harness").rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        lines = manifest_mentions(path)
        if lines and name not in ALLOWED:
            found[name] = lines
    assert found == {}, ("read manifests with harness.results.loader.read_manifest and change them through "
                         f"harness.results.store.ResultSetWriter: {found}")


def test_the_scan_sees_a_bare_read(tmp_path: Path) -> None:
    """The scan above must be able to fail: a bare read as --resume had it is found, a docstring is not."""
    module = tmp_path / "bare.py"
    module.write_text('"""Reads manifest.json."""\nimport json\n\n\ndef load(path):\n'
                      '    return json.loads((path / "manifest.json").read_text())\n')
    assert manifest_mentions(module) == [6]
