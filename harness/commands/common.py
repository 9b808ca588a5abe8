"""Options and helpers shared by subcommands."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True)  # one-line errors and notes, on stderr
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
