"""Options and helpers shared by subcommands."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, ConsoleDimensions
from rich.table import Table

# Where the stream is not a terminal (a CI log, a pipe, a file) Rich takes 80 columns (or a terminal's width found on
# another std stream) and cuts every table to fit: cells came out as "llama-s..." and verdicts one word per line.
# There, a width no table reaches, so each prints at its natural width (tables do not expand to the console's
# width); COLUMNS, where set, still wins.
UNBOUNDED_WIDTH = 10_000


class NaturalWidthConsole(Console):
    """A Rich console that is the terminal's width on a terminal and unbounded elsewhere. Decided at every print
    (``is_terminal`` looks at the file written to then, COLUMNS is read then), so a test runner's replaced stdout
    and environment get what a fresh process would."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if kwargs.get("width") is None:
            self._width = None  # Console read COLUMNS once, here; size reads it at each print instead

    @property
    def size(self) -> ConsoleDimensions:
        measured = Console.size.fget(self)  # type: ignore[attr-defined]
        if self._width is None and not self.is_terminal and not os.environ.get("COLUMNS"):
            return ConsoleDimensions(UNBOUNDED_WIDTH, measured.height)
        return measured

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


console = NaturalWidthConsole()
err_console = NaturalWidthConsole(stderr=True)  # one-line errors and notes, on stderr
DEFAULT_RESULTS = Path("results")

ResultsOpt = typer.Option(DEFAULT_RESULTS, "--results", help="directory that holds result sets")
TargetsDirOpt = typer.Option(None, "--targets-dir", help="directory of targets/NAME.yaml (default ./targets)")
BaselineValueOpt = typer.Option(None, "--baseline-value", metavar="NAME",
                                help="with --across: the axis's baseline value (default: the experiment's "
                                     "baseline: value of it, else its first)")


def frame_table(frame, title: str | None = None, floatfmt: str = "{:.1f}") -> Table:  # noqa: ANN001
    table = Table(title=title, title_justify="left")
    for column in frame.columns:
        table.add_column(str(column), justify="right" if frame[column].dtype.kind in "iuf" else "left")
    for row in frame.itertuples(index=False):
        table.add_row(*[floatfmt.format(v) if isinstance(v, float) else str(v) for v in row])
    return table
