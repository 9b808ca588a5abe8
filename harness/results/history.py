"""History across result sets: many sets as one DuckDB database, so a question over time is one SQL query.

Every table any set holds becomes one view over the parquet files of all the sets (read in place, nothing is
copied or imported), with the set's ``set_id``, ``experiment``, ``harness_rev`` (the git revision that wrote it)
and ``started`` (when its campaign began) added to each row; rows already carry ``target``. The ``sets`` view has
one row per set. "Decode tok/s of one cell on one board over the last 20 sets" is then::

    SELECT r.set_id, r.started, median(q.decode_tps) AS decode_tps
    FROM requests q JOIN runs r USING (set_id, target, run_id)
    WHERE r.variant = 'read_ahead_kb=128 threads=2 cold' AND r.target = 'orin-01'
    GROUP BY ALL ORDER BY r.started DESC LIMIT 20

(every view has the set columns, so a join names its table for them: ``r.started``, or puts them in ``USING``).

DuckDB is embedded: the database lives in memory for as long as the connection; there is nothing to start.
Sets are read through the one loader, so a set of another schema is left out with one line naming it and
``harness results upgrade``, and the rest are still queried.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from harness.errors import ResultSetError, UsageError
from harness.results.loader import ResultSet, list_result_sets, load_result_set, unreadable_table
from harness.results.metrics import Metric
from harness.results.tables import TABLES_DIR

SETS_VIEW = "sets"
SET_COLUMNS = ("set_id", "experiment", "harness_rev", "started")  # added to every row of every table view
SETS_COLUMNS = {  # the sets view
    "set_id": "VARCHAR", "experiment": "VARCHAR", "started": "TIMESTAMPTZ", "ended": "TIMESTAMPTZ",
    "status": "VARCHAR", "harness_version": "VARCHAR", "harness_rev": "VARCHAR", "schema_version": "INTEGER",
    "targets": "VARCHAR[]", "runs": "INTEGER", "upgraded_from": "VARCHAR", "path": "VARCHAR"}
_FILES = "_history_files"  # parquet file -> its set's columns; internal (names starting with _ are not listed)
_TABLES = "_history_tables"  # every table name any set holds, whether its view was made or not
_FILE_COLUMN = "_history_file"  # read_parquet's file-name column (fio rows have a column named "filename")

Say = Callable[[str], None]


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def history_sets(sets: Sequence[Path] | None = None, results_dir: Path = Path("results"),
                 include_incomplete: bool = False, say: Say = _to_stderr) -> list[ResultSet]:
    """The sets a history reads: ``sets`` or every set in ``results_dir``, complete ones only unless asked.
    A set the loader refuses (another schema, an unreadable manifest) is left out with one line from ``say``."""
    paths = list(sets) if sets is not None else list_result_sets(results_dir)
    loaded: list[ResultSet] = []
    incomplete: list[str] = []
    seen: dict[str, Path] = {}
    for path in paths:
        try:
            one = load_result_set(path)
        except ResultSetError as exc:
            say(f"left out {exc}")
            continue
        if one.set_id in seen:  # a copied directory: its rows would count twice
            say(f"left out {path}: set {one.set_id} is already read from {seen[one.set_id]}")
            continue
        seen[one.set_id] = path
        if one.complete or include_incomplete:
            loaded.append(one)
        else:
            incomplete.append(one.set_id)
    if incomplete:
        say(f"left out {len(incomplete)} incomplete set(s) ({', '.join(incomplete)}); --include-incomplete adds them")
    return loaded


def set_row(one: ResultSet) -> dict[str, Any]:
    """One row of the ``sets`` view."""
    manifest = one.manifest
    harness: Mapping[str, object] = manifest.get("harness") or {}
    return {
        "set_id": one.set_id,
        "experiment": manifest["experiment"]["name"] if "experiment" in manifest else None,
        "started": manifest.get("started"),  # ISO 8601 with the offset: DuckDB casts it to TIMESTAMPTZ
        "ended": manifest.get("ended"),
        "status": "complete" if one.complete else "incomplete",
        "harness_version": harness.get("version"),
        "harness_rev": harness.get("git_revision"),
        "schema_version": manifest.get("schema_version"),
        "targets": [target["name"] for target in manifest.get("targets", [])],
        "runs": len(manifest.get("runs", [])),
        "upgraded_from": manifest["upgraded_from"]["set_id"] if "upgraded_from" in manifest else None,
        "path": str(one.path),
    }


def open_history(sets: Sequence[Path] | None = None, results_dir: Path = Path("results"), *,
                 include_incomplete: bool = False, for_query: str | None = None,
                 say: Say = _to_stderr) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per table over every set (see the module docstring).

    With ``for_query`` (SQL text) only the views of the tables it names are made (``sets`` always is): making a
    view reads the schema of that table's file in every set (about 50 ms per table for 100 sets here), so a
    one-off query does not pay for the tables it never reads."""
    chosen = history_sets(sets, results_dir, include_incomplete, say)
    con = duckdb.connect()
    con.register("_sets_frame", pd.DataFrame([set_row(one) for one in chosen], columns=list(SETS_COLUMNS)))
    # typed whatever the values: a column of None (no git revision anywhere) would otherwise be of type NULL
    typed = ", ".join(f"CAST({name} AS {kind}) AS {name}" for name, kind in SETS_COLUMNS.items())
    con.execute(f"CREATE TABLE {SETS_VIEW} AS SELECT {typed} FROM _sets_frame ORDER BY started, set_id")
    con.unregister("_sets_frame")
    files: dict[str, list[str]] = {}
    mapping = []
    for one in chosen:
        for path in sorted((one.path / TABLES_DIR).glob("*.parquet")):
            files.setdefault(path.stem, []).append(str(path))
            mapping.append({_FILE_COLUMN: str(path), "set_id": one.set_id})
    con.register("_files_frame", pd.DataFrame(mapping, columns=[_FILE_COLUMN, "set_id"]))
    con.execute(f"CREATE TABLE {_FILES} AS SELECT f.{_FILE_COLUMN}, "
                + ", ".join(f"s.{column}" for column in SET_COLUMNS)
                + f" FROM _files_frame f JOIN {SETS_VIEW} s USING (set_id)")
    con.unregister("_files_frame")
    con.execute(f"CREATE TABLE {_TABLES} AS SELECT unnest(?::VARCHAR[]) AS name", [sorted(files)])
    wanted = set(files) if for_query is None else set(tables_named(for_query, files))
    for table, paths in files.items():
        if table in wanted:
            try:
                con.execute(_table_view(table, paths))
            except duckdb.Error as exc:  # a file of the table is truncated or not parquet: name it
                raise damaged(paths, exc) from None
    return con


def damaged(paths: Sequence[str], exc: BaseException) -> UsageError:
    """The one line for a DuckDB error reading these parquet files: the first file pyarrow cannot read either (its
    footer: cheap, and only looked at once DuckDB failed), else DuckDB's first line."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for path in paths:
        try:
            pq.ParquetFile(path).close()
        except (OSError, ValueError, pa.ArrowException) as bad:
            return unreadable_table(Path(path), bad)
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return UsageError(f"reading the history's tables failed: {first}")


def tables_named(sql: str, names: Iterable[str]) -> list[str]:
    """The names that ``sql`` mentions as a word: every table it reads, and perhaps a few more."""
    return [name for name in names if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", sql, re.IGNORECASE)]


def _table_view(table: str, paths: list[str]) -> str:
    """A view over one table of every set: the files read as one (columns matched by name), joined to their set."""
    listed = ", ".join(_sql_text(path) for path in paths)
    added = ", ".join(f"f.{column}" for column in SET_COLUMNS)
    return (f"CREATE VIEW {_identifier(table)} AS SELECT t.* EXCLUDE ({_FILE_COLUMN}), {added} "
            f"FROM read_parquet([{listed}], union_by_name = true, filename = '{_FILE_COLUMN}') t "
            f"JOIN {_FILES} f USING ({_FILE_COLUMN})")


def views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The views a history offers: ``sets`` and every table any of its sets holds (made or not)."""
    rows = con.execute(f"SELECT name FROM {_TABLES} UNION SELECT '{SETS_VIEW}' ORDER BY name").fetchall()
    return [name for (name,) in rows]


def _made(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    return {name for (name,) in rows}


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def columns_of(con: duckdb.DuckDBPyConnection, view: str) -> list[str]:
    return [row[0] for row in con.execute(f"DESCRIBE {_identifier(view)}").fetchall()]


def cells(con: duckdb.DuckDBPyConnection, target: str | None = None) -> list[str]:
    """The variant labels the history's runs measured (on ``target``, if given)."""
    if "runs" not in _made(con):
        return []
    where, args = ("WHERE target = ?", [target]) if target else ("", [])
    rows = con.execute(f"SELECT DISTINCT variant FROM runs {where} ORDER BY variant", args).fetchall()
    return [label for (label,) in rows if label]


def metric_by_set(con: duckdb.DuckDBPyConnection, metric: Metric, cell: str, target: str,
                  last: int | None = None) -> pd.DataFrame:
    """One row per set (and per test, for a metric with tests) of the ``last`` sets that measured ``metric`` in
    ``cell`` on ``target``, oldest first: median, quartiles and count of the observations of its ok runs."""
    table = metric.table.name
    have = columns_of(con, table) if table in _made(con) else []
    missing = [c for c in (*metric.needs, *([metric.test] if metric.test else [])) if c not in have]
    if missing:
        raise UsageError(f"metric {metric.name}: no set in the history has a {table} table with "
                         f"{', '.join(missing)}")
    picked = ", ".join(f"m.{_identifier(c)}" for c in dict.fromkeys((*metric.needs, metric.test)) if c)
    try:
        frame = con.execute(f"SELECT m.set_id, m.started, m.harness_rev, {picked} FROM {_identifier(table)} m "
                            "JOIN runs r USING (set_id, target, run_id) "
                            "WHERE r.variant = ? AND r.target = ? AND r.status = 'ok'", [cell, target]).df()
    except duckdb.Error as exc:  # a table file whose footer read but whose data does not
        files = [path for (path,) in con.execute(f"SELECT {_FILE_COLUMN} FROM {_FILES}").fetchall()]
        raise damaged(files, exc) from None
    frame["value"] = metric.observations(frame).to_numpy() if not frame.empty else []
    frame["harness_rev"] = frame["harness_rev"].fillna("")  # a set written outside a git checkout has none
    keys = ["set_id", "started", "harness_rev"] + (["test"] if metric.test else [])
    frame = frame.rename(columns={metric.test: "test"} if metric.test else {}).dropna(subset=["value"])
    groups = frame.groupby(keys, dropna=False)["value"]  # vectorised quantiles: a lambda per set cost 3 s at 1,000
    summary = (pd.DataFrame({"median": groups.median(), "q1": groups.quantile(0.25), "q3": groups.quantile(0.75),
                             "n": groups.count()})
               .reset_index().sort_values(["started", "set_id"]))
    if last is not None:
        kept = summary.drop_duplicates("set_id")["set_id"].tail(last)
        summary = summary[summary["set_id"].isin(kept)]
    return summary.reset_index(drop=True)
