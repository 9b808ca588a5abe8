"""``harness results list|show|query|trend|upgrade`` (``changes``: harness/commands/changes.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import typer
from rich.table import Table

from harness.commands.common import ResultsOpt, console, err_console, frame_table
from harness.errors import ResultSetError, UsageError
from harness.results.loader import check_tables, find_result_set, list_result_sets, load_result_set


def list_sets(results: Path = ResultsOpt) -> None:
    """List result sets, newest last; incomplete ones are marked."""
    table = Table(title=str(results), title_justify="left")
    for col in ("set", "status", "experiment", "runs", "ok", "started"):
        table.add_column(col)
    for path in list_result_sets(results):
        try:
            rs = load_result_set(path)
        except ResultSetError as exc:
            table.add_row(path.name, "unreadable", str(exc), "", "", "")
            continue
        runs = rs.manifest.get("runs", [])
        ok = sum(1 for r in runs if r.get("status") == "ok")
        status = "complete" if rs.complete else "[yellow]incomplete[/]"
        table.add_row(path.name, status, str(_named(rs.manifest.get("experiment"), "name")), str(len(runs)),
                      str(ok), str(rs.manifest.get("started")))
    console.print(table)


def show(result_set: str = typer.Argument(..., metavar="SET"), results: Path = ResultsOpt) -> None:
    """Summary of one result set: status, runs, tables, figures."""
    from harness.figures.report import fio_summary, read_summary

    rs = load_result_set(find_result_set(result_set, results), verify=True)
    tables = [p.stem for p in check_tables(rs)]  # a damaged table is named before anything is shown
    m = rs.manifest
    console.print(f"[bold]{rs.path}[/]  status: {'complete' if rs.complete else 'INCOMPLETE'}")
    experiment, harness = m.get("experiment"), m.get("harness")
    console.print(f"experiment {_named(experiment, 'name')}, harness {_named(harness, 'version')} "
                  f"({_named(harness, 'git_revision')}), started {m.get('started')}, ended {m.get('ended')}")
    runs = rs.table("runs")
    if not runs.empty:
        counts = runs.groupby(["target", "step", "cache", "status"]).size().reset_index(name="runs")
        console.print(frame_table(counts, "runs"))
    for frame, title in ((fio_summary(rs), "fio ladder"), (read_summary(rs), "read baseline")):
        if not frame.empty:
            console.print(frame_table(frame, title))
    console.print("tables: " + ", ".join(tables))
    console.print("SHA256SUMS: " + ("verified" if rs.verified else "none (an incomplete or older set): not verified"))
    for figure in sorted((rs.path / "figures").glob("*.png")):
        console.print(f"figure: {figure}")



def err_line(line: str) -> None:
    """A note on stderr (a set left out of a history), so csv and json on stdout stay clean."""
    err_console.print(line, highlight=False, soft_wrap=True, markup=False)


SetsOpt = typer.Option(None, "--set", metavar="ID", help="only this set (id, unique part of it, or path; repeatable)")
IncompleteOpt = typer.Option(False, "--include-incomplete", help="also read sets whose campaign did not complete")
FORMATS = ("table", "csv", "json")


def _history(results: Path, set_ids: list[str] | None, include_incomplete: bool,
             for_query: str | None = None):  # noqa: ANN202 - a DuckDB connection (duckdb loads on first use)
    from harness.results.history import open_history

    chosen = [find_result_set(name, results) for name in set_ids] if set_ids else None
    return open_history(chosen, results, include_incomplete=include_incomplete, for_query=for_query, say=err_line)


def query(sql: str = typer.Argument(..., metavar="SQL"), results: Path = ResultsOpt,
          set_ids: list[str] = SetsOpt, include_incomplete: bool = IncompleteOpt,
          output: str = typer.Option("table", "--format", help="table | csv | json")) -> None:
    """Query every complete result set as one DuckDB database: a view per table (with set_id, experiment,
    harness_rev, started on every row) and `sets`."""
    import duckdb

    from harness.results.history import views

    if output not in FORMATS:
        raise UsageError(f"--format {output!r}: expected one of {', '.join(FORMATS)}")
    con = _history(results, set_ids, include_incomplete, for_query=sql)
    try:
        frame = con.execute(sql).df()
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"query failed: {first} (views: {', '.join(views(con))})") from None
    if output == "csv":
        typer.echo(frame.to_csv(index=False), nl=False)
    elif output == "json":
        typer.echo(frame.to_json(orient="records", date_format="iso"))
    else:
        console.print(frame_table(frame, floatfmt="{:.6g}"))


def trend(metric: str = typer.Argument(..., metavar="METRIC", help="a metric name (harness/results/metrics.py)"),
          cell: str = typer.Option(..., "--cell", metavar="VARIANT", help='e.g. "read_ahead_kb=128 threads=2 cold"'),
          target: str = typer.Option(..., "--target", "-t", help="the board (target name)"),
          last: int = typer.Option(20, "--last", min=1, help="the newest N sets that measured the cell"),
          out: Path = typer.Option(None, "--out", help="the PNG to write (default: trend-METRIC.png here)"),
          results: Path = ResultsOpt, set_ids: list[str] = SetsOpt, include_incomplete: bool = IncompleteOpt,
          ) -> None:
    """Draw one metric of one cell on one board over the last sets (median per set, IQR whiskers, change points
    as dashed lines)."""
    from harness.analysis.changes import history_changes
    from harness.figures.history import draw_trend
    from harness.results.history import cells, metric_by_set
    from harness.results.metrics import METRICS

    if metric not in METRICS:
        raise UsageError(f"unknown metric {metric!r}: expected one of {', '.join(METRICS)}")
    con = _history(results, set_ids, include_incomplete)
    frame = metric_by_set(con, METRICS[metric], cell, target, last)
    if frame.empty:
        known = cells(con, target)
        raise UsageError(f"no ok run of cell {cell!r} on target {target!r} has {metric} in these sets; cells on "
                         f"{target}: {', '.join(known) if known else 'none'}")
    console.print(frame_table(frame.assign(started=frame["started"].astype(str)),
                              f"{metric} ({METRICS[metric].unit}), {cell}, {target}", floatfmt="{:.4g}"))
    steps = history_changes(frame)
    for step in steps:
        console.print(f"change point: {step.line(METRICS[metric].unit)}", highlight=False)
    paths = draw_trend(frame, METRICS[metric], cell, target, out or Path(f"trend-{metric}.png"), steps)
    console.print(f"figure: {paths[0]}")


def upgrade(result_set: str = typer.Argument(..., metavar="SET"), results: Path = ResultsOpt) -> None:
    """Rewrite an older result set into the current schema as a new set beside it (the original is kept as is)."""
    from harness.results import SCHEMA_VERSION
    from harness.results.upgrade import read_manifest, upgrade_set

    path = find_result_set(result_set, results)
    old = read_manifest(path).get("schema_version")
    new = upgrade_set(path)
    if new is None:
        console.print(f"{path}: already schema_version {SCHEMA_VERSION}; nothing to do")
        return
    console.print(f"upgraded {path} (schema_version {old}) -> [bold]{new}[/] (schema_version {SCHEMA_VERSION}); "
                  f"its figures and report.md are the original's until `harness report {new.name}` draws them")


def register(app: typer.Typer) -> None:
    app.command("list")(list_sets)
    app.command("show")(show)
    app.command("query")(query)
    app.command("trend")(trend)
    app.command("upgrade")(upgrade)


def _named(part: Mapping[str, object] | None, key: str) -> object:
    """A field of a manifest's part that an older or hand-made set may lack (None then)."""
    return None if part is None else part.get(key)
