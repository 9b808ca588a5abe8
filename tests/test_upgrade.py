"""`harness results upgrade`: an older set rewritten into the current schema as a new set, the original untouched.

The v1 set is made the way a v1 harness wrote it: the small campaign's set without the runs table's `variant`
column (schema 2 added it) and with schema_version 1 in its manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from harness.errors import ResultSetError
from harness.results import SCHEMA_VERSION
from harness.results.loader import load_result_set
from tests.helpers import cli_in_process

pytestmark = pytest.mark.slow  # copy_of_set: the small campaign runs once per session


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def make_v1(path: Path) -> Path:
    runs_file = path / "tables" / "runs.parquet"
    pd.read_parquet(runs_file).drop(columns=["variant"]).to_parquet(runs_file, index=False)
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps(dict(manifest, schema_version=1)))
    return path


def test_ingest_writes_each_runs_variant(copy_of_set: Path) -> None:
    runs = load_result_set(copy_of_set).table("runs")
    assert SCHEMA_VERSION == 2 and set(runs["variant"]) == {"cold", "warm"}  # the e2e set has no matrix
    assert (runs["variant"] == runs["cache"]).all()


def test_loader_refuses_a_v1_set_naming_upgrade(copy_of_set: Path) -> None:
    with pytest.raises(ResultSetError, match="schema_version 1.*harness results upgrade"):
        load_result_set(make_v1(copy_of_set))


def test_upgrade_writes_a_loadable_set_and_leaves_the_original_alone(copy_of_set: Path) -> None:
    original_runs = pd.read_parquet(copy_of_set / "tables" / "runs.parquet")
    old = make_v1(copy_of_set)
    before = snapshot(old)
    done = cli_in_process("results", "upgrade", old.name, "--results", str(old.parent))
    assert done.returncode == 0, done.stderr
    new = old.parent / f"{old.name}-v{SCHEMA_VERSION}"
    assert str(new) in done.stdout and snapshot(old) == before
    upgraded = load_result_set(new)
    assert upgraded.set_id == new.name and upgraded.complete
    assert upgraded.manifest["upgraded_from"] == {"set_id": old.name, "schema_version": 1}
    assert sorted(p.name for p in (new / "tables").iterdir()) == sorted(p.name for p in (old / "tables").iterdir())
    pd.testing.assert_frame_equal(upgraded.table("runs"), original_runs, check_like=True)  # variant as ingest wrote it
    for table in ("fio", "reads", "blockstat"):
        pd.testing.assert_frame_equal(upgraded.table(table), pd.read_parquet(old / "tables" / f"{table}.parquet"))
    raw = sorted(p for p in (old / "raw").rglob("*") if p.is_file())
    assert raw and all((new / p.relative_to(old)).read_bytes() == p.read_bytes() for p in raw)
    assert all(os.stat(new / p.relative_to(old)).st_ino == os.stat(p).st_ino for p in raw)  # hard links here
    again = cli_in_process("results", "upgrade", old.name, "--results", str(old.parent))
    assert again.returncode == 2 and "already upgraded" in again.stderr


def test_upgrade_of_a_current_set_writes_nothing(copy_of_set: Path) -> None:
    before = sorted(copy_of_set.parent.iterdir())
    done = cli_in_process("results", "upgrade", str(copy_of_set))
    assert done.returncode == 0 and "nothing to do" in done.stdout and len(done.stdout.strip().splitlines()) == 1
    assert sorted(copy_of_set.parent.iterdir()) == before


def test_upgrade_of_a_newer_set_is_refused(copy_of_set: Path) -> None:
    manifest = json.loads((copy_of_set / "manifest.json").read_text())
    (copy_of_set / "manifest.json").write_text(json.dumps(dict(manifest, schema_version=SCHEMA_VERSION + 1)))
    before = sorted(copy_of_set.parent.iterdir())
    done = cli_in_process("results", "upgrade", str(copy_of_set))
    assert done.returncode == 2 and "newer than this harness" in done.stderr
    assert sorted(copy_of_set.parent.iterdir()) == before


def test_an_upgraded_set_joins_the_history(copy_of_set: Path) -> None:
    old = make_v1(copy_of_set)
    assert cli_in_process("results", "upgrade", str(old)).returncode == 0
    sql = "SELECT set_id, count(*) AS n FROM runs WHERE variant = 'cold' GROUP BY ALL"
    done = cli_in_process("results", "query", sql, "--results", str(old.parent), "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"set_id": f"{old.name}-v{SCHEMA_VERSION}", "n": 4}]
    assert old.name in done.stderr and "harness results upgrade" in done.stderr  # the v1 original, left out
