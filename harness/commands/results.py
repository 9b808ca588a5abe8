"""``harness results list|show``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from harness.commands.common import ResultsOpt, console, frame_table
from harness.errors import ResultSetError
from harness.results.loader import find_result_set, list_result_sets, load_result_set


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
        table.add_row(path.name, status, rs.manifest["experiment"]["name"], str(len(runs)), str(ok),
                      str(rs.manifest.get("started")))
    console.print(table)


def show(result_set: str = typer.Argument(..., metavar="SET"), results: Path = ResultsOpt) -> None:
    """Summary of one result set: status, runs, tables, figures."""
    from harness.figures.report import fio_summary, read_summary

    rs = load_result_set(find_result_set(result_set, results))
    m = rs.manifest
    console.print(f"[bold]{rs.path}[/]  status: {'complete' if rs.complete else 'INCOMPLETE'}")
    console.print(f"experiment {m['experiment']['name']}, harness {m['harness']['version']} "
                  f"({m['harness'].get('git_revision')}), started {m.get('started')}, ended {m.get('ended')}")
    runs = rs.table("runs")
    if not runs.empty:
        counts = runs.groupby(["target", "step", "cache", "status"]).size().reset_index(name="runs")
        console.print(frame_table(counts, "runs"))
    for frame, title in ((fio_summary(rs), "fio ladder"), (read_summary(rs), "read baseline")):
        if not frame.empty:
            console.print(frame_table(frame, title))
    tables = sorted(p.stem for p in (rs.path / "tables").glob("*.parquet"))
    console.print("tables: " + ", ".join(tables))
    for figure in sorted((rs.path / "figures").glob("*.png")):
        console.print(f"figure: {figure}")


def register(app: typer.Typer) -> None:
    app.command("list")(list_sets)
    app.command("show")(show)
