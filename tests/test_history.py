"""History across result sets: `harness results query` and `trend`, and the Python helper open_history, over
copies of the small campaign's set under new ids (as later campaigns of the same experiment would write)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from harness.figures.base import NUMBERS_KEY
from harness.results import INCOMPLETE_SUFFIX
from harness.results.history import open_history, views
from tests.helpers import cli_in_process

pytestmark = pytest.mark.slow  # the small campaign runs once per session

# (set id, when it started, the harness revision that wrote it, complete?)
SETS = [("20300101-000000-e2e-aaaaaa", "2030-01-01T00:00:00+00:00", "rev-one", True),
        ("20300102-000000-e2e-bbbbbb", "2030-01-02T00:00:00+00:00", "rev-two", True),
        ("20300103-000000-e2e-cccccc", "2030-01-03T00:00:00+00:00", "rev-three", False)]


def copy_set(source: Path, results: Path, set_id: str, started: str, rev: str, complete: bool = True,
             **manifest_changes: object) -> Path:
    """A copy of ``source``'s manifest and tables as another set (raw data and figures are not needed here)."""
    path = results / (set_id + ("" if complete else INCOMPLETE_SUFFIX))
    shutil.copytree(source, path, ignore=shutil.ignore_patterns("raw", "figures"))
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(set_id=set_id, started=started, status="complete" if complete else "incomplete",
                    harness=dict(manifest["harness"], git_revision=rev), **manifest_changes)
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


@pytest.fixture(scope="module")
def history(small_campaign: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results directory with two complete sets and one incomplete one."""
    [source] = small_campaign["sets"]
    results = tmp_path_factory.mktemp("history") / "results"
    for set_id, started, rev, complete in SETS:
        copy_set(source, results, set_id, started, rev, complete)
    return results


@pytest.fixture(scope="module")
def source_runs(small_campaign: dict) -> pd.DataFrame:
    [source] = small_campaign["sets"]
    return pd.read_parquet(source / "tables" / "runs.parquet")


def query(results: Path, sql: str, *args: str) -> pd.DataFrame:
    done = cli_in_process("results", "query", sql, "--results", str(results), "--format", "csv", *args)
    assert done.returncode == 0, done.stderr
    return pd.read_csv(io.StringIO(done.stdout))


def test_query_spans_every_complete_set_with_the_set_columns(history: Path, source_runs: pd.DataFrame) -> None:
    found = query(history, "SELECT set_id, experiment, target, harness_rev, count(*) AS runs FROM runs "
                           "GROUP BY ALL ORDER BY set_id")
    assert found.to_dict(orient="records") == [
        {"set_id": set_id, "experiment": "e2e", "target": "local", "harness_rev": rev, "runs": len(source_runs)}
        for set_id, _, rev, complete in SETS if complete]


def test_incomplete_sets_are_left_out_unless_asked(history: Path) -> None:
    done = cli_in_process("results", "query", "SELECT set_id FROM sets", "--results", str(history), "--format", "csv")
    assert done.returncode == 0 and SETS[2][0] not in done.stdout
    assert "1 incomplete set" in done.stderr and "--include-incomplete" in done.stderr
    both = query(history, "SELECT set_id, status FROM sets ORDER BY started", "--include-incomplete")
    assert list(both["set_id"]) == [s[0] for s in SETS]
    assert list(both["status"]) == ["complete", "complete", "incomplete"]


def test_last_sets_are_ordered_by_start_and_select_a_cell_by_name(history: Path, source_runs: pd.DataFrame) -> None:
    """The question history exists for: one cell's numbers over the newest sets, by the cell's name."""
    sql = ("SELECT r.set_id, median(x.elapsed_s) AS seconds FROM reads x JOIN runs r USING (set_id, target, run_id) "
           "WHERE r.variant = 'cold' AND r.target = 'local' GROUP BY ALL ORDER BY any_value(r.started) DESC LIMIT 1")
    found = query(history, sql)
    cold = source_runs.loc[source_runs["variant"] == "cold", "run_id"]
    reads = pd.read_parquet(history / SETS[1][0] / "tables" / "reads.parquet")
    assert found["set_id"].tolist() == [SETS[1][0]]
    assert found["seconds"].iloc[0] == pytest.approx(reads[reads["run_id"].isin(cold)]["elapsed_s"].median())


def test_a_sql_error_is_one_line_naming_the_views(history: Path) -> None:
    done = cli_in_process("results", "query", "SELECT nope FROM runs", "--results", str(history))
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()[-1:]
    assert "query failed" in line and "nope" in line and "views: " in line and "runs" in line and "sets" in line
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_a_set_of_another_schema_is_left_out_and_named(history: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(history, results)
    old = results / SETS[0][0]
    manifest = json.loads((old / "manifest.json").read_text())
    (old / "manifest.json").write_text(json.dumps(dict(manifest, schema_version=1)))
    done = cli_in_process("results", "query", "SELECT DISTINCT set_id FROM runs", "--results", str(results),
                   "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["set_id", SETS[1][0]]
    assert SETS[0][0] in done.stderr and "harness results upgrade" in done.stderr


def test_python_helper_opens_every_table_and_the_sets_view(history: Path) -> None:
    said: list[str] = []
    con = open_history(results_dir=history, say=said.append)
    assert {"runs", "fio", "reads", "sets"} <= set(views(con))
    sets = con.execute("SELECT set_id, harness_rev, schema_version, targets FROM sets ORDER BY started").df()
    assert sets["set_id"].tolist() == [SETS[0][0], SETS[1][0]] and sets["targets"].map(list).tolist() == [["local"]] * 2
    per_set = con.execute("SELECT set_id, count(*) AS n FROM fio GROUP BY set_id ORDER BY set_id").df()
    assert per_set["n"].nunique() == 1 and per_set["n"].iloc[0] > 0
    assert len(said) == 1 and "incomplete" in said[0]
    only = open_history([history / SETS[1][0]], say=said.append)
    assert only.execute("SELECT DISTINCT set_id FROM runs").fetchall() == [(SETS[1][0],)]


def test_trend_draws_a_png_carrying_its_numbers(history: Path, tmp_path: Path, source_runs: pd.DataFrame) -> None:
    out = tmp_path / "trend.png"
    done = cli_in_process("results", "trend", "read_mbps", "--cell", "cold", "--target", "local", "--results",
                   str(history), "--out", str(out))
    assert done.returncode == 0, done.stderr
    numbers = json.loads(Image.open(out).text[NUMBERS_KEY])
    assert (numbers["metric"], numbers["cell"], numbers["target"]) == ("read_mbps", "cold", "local")
    assert [p["set_id"] for p in numbers["points"]] == [SETS[0][0], SETS[1][0]]
    assert [p["harness_rev"] for p in numbers["points"]] == ["rev-one", "rev-two"]
    reads = pd.read_parquet(history / SETS[0][0] / "tables" / "reads.parquet")
    cold = reads[reads["run_id"].isin(source_runs.loc[source_runs["variant"] == "cold", "run_id"])]
    expected = (cold["read_bytes_per_s"] / 1e6).median()
    # figures store their numbers to 6 significant digits (harness/figures/base.py save)
    point = numbers["points"][0]
    assert point["median"] == pytest.approx(expected, rel=1e-5) and point["n"] == len(cold)
    assert f"{expected:.4g}" in done.stdout  # the numbers are printed as a table too
    assert (tmp_path / "trend.svg").exists()


def test_trend_names_the_cells_there_are(history: Path, tmp_path: Path) -> None:
    done = cli_in_process("results", "trend", "read_mbps", "--cell", "threads=9 cold", "--target", "local",
                   "--results", str(history), "--out", str(tmp_path / "t.png"))
    assert done.returncode == 2 and "cells on local: cold, warm" in done.stderr
    unknown = cli_in_process("results", "trend", "speed", "--cell", "cold", "--target", "local",
                             "--results", str(history))
    assert unknown.returncode == 2 and "decode_tps" in unknown.stderr
