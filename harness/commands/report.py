"""``harness report SET``: regenerate figures and report.md from the set's tables."""

from __future__ import annotations

from pathlib import Path

import typer

from harness.commands.common import ResultsOpt, console
from harness.errors import ResultSetError
from harness.results.loader import find_result_set


def report(result_set: str = typer.Argument(..., metavar="SET", help="set id, unique part of it, or path"),
           results: Path = ResultsOpt,
           include_perturbed: bool = typer.Option(False, "--include-perturbed",
                                                  help="count runs marked perturbed in the summaries and figures")
           ) -> None:
    """Regenerate figures/ and report.md of a result set; name every figure not drawn and the table it lacks."""
    from harness.figures.report import render  # matplotlib: loaded only by the commands that draw

    path = find_result_set(result_set, results)
    try:
        done = render(path, include_perturbed=include_perturbed, verify=True)
    except OSError as exc:  # a read-only or immutable set: its tables are intact, only the drawings are not written
        raise ResultSetError(f"{exc.filename or path}: cannot write the report ({exc.strerror or exc}); the set is "
                             "unchanged: make it writable and run harness report again") from None
    for figure in done.figures:
        console.print(f"figure: {figure}", soft_wrap=True)
    for skipped in done.not_drawn:
        console.print(skipped.cli_line(), soft_wrap=True, markup=False)
    console.print(f"report: {done.path}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command()(report)
