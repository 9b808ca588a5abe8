"""``harness report SET``: regenerate figures and report.md from the set's tables."""

from __future__ import annotations

from pathlib import Path

import typer

from harness.commands.common import ResultsOpt, console
from harness.results.loader import find_result_set


def report(result_set: str = typer.Argument(..., metavar="SET", help="set id, unique part of it, or path"),
           results: Path = ResultsOpt) -> None:
    """Regenerate figures/ and report.md of a result set."""
    from harness.figures.report import render_report  # matplotlib: loaded only by the commands that draw

    path = find_result_set(result_set, results)
    for figure in render_report(path):
        console.print(f"figure: {figure}")
    console.print(f"report: {path / 'report.md'}")


def register(app: typer.Typer) -> None:
    app.command()(report)
