"""``harness results changes``: the sets at which a metric stepped, per cell and board, with the revisions on each
side (method: harness/analysis/changes.py). ``--new`` keeps only the steps the newest set confirmed
(``new_changes``: each step once, on the night it is confirmed); with ``$GITHUB_STEP_SUMMARY`` set, they are
appended to the job summary as markdown."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import typer
from rich.table import Table

from harness.analysis.changes import METHOD, SetChange, history_changes, new_changes
from harness.commands.common import ResultsOpt, console, frame_table
from harness.commands.gate_report import append_step_summary
from harness.commands.results import IncompleteOpt, SetsOpt, _history
from harness.errors import UsageError
from harness.results.metrics import METRICS, Metric

CHANGE_COLUMNS = ["cell", "test", "before", "after", "effect %", "last set before", "rev before", "first set after",
                  "rev after"]


def changes(metric: str = typer.Argument(..., metavar="METRIC", help="a metric name (harness/results/metrics.py)"),
            cell: list[str] = typer.Option(None, "--cell", metavar="VARIANT",
                                           help="a cell (repeatable); default: every cell measured on the target"),
            target: str = typer.Option(..., "--target", "-t", help="the board (target name)"),
            last: int = typer.Option(None, "--last", min=1, help="only the newest N sets that measured the cell"),
            new: bool = typer.Option(False, "--new", help="only the steps the newest set confirmed"),
            results: Path = ResultsOpt, set_ids: list[str] = SetsOpt, include_incomplete: bool = IncompleteOpt,
            ) -> None:
    """Find the sets where METRIC stepped (PELT change points over the per-set medians)."""
    from harness.results.history import cells, metric_by_set

    if metric not in METRICS:
        raise UsageError(f"unknown metric {metric!r}: expected one of {', '.join(METRICS)}")
    con = _history(results, set_ids, include_incomplete)
    known = cells(con, target)
    chosen = cell or known
    unknown = [c for c in chosen if c not in known]
    if unknown or not chosen:
        raise UsageError(f"no run of cell {(unknown or ['any'])[0]!r} on target {target!r} in these sets; cells on "
                         f"{target}: {', '.join(known) if known else 'none'}")
    found: list[tuple[str, SetChange]] = []
    for name in chosen:
        frame = metric_by_set(con, METRICS[metric], name, target, last)
        if frame.empty:
            continue
        found += [(name, c) for c in (new_changes(frame) if new else history_changes(frame))]
    console.print(changes_table(found, METRICS[metric], target))
    console.print(f"method: {METHOD}", highlight=False)
    if new:
        append_step_summary(markdown(found, METRICS[metric], target))


def changes_table(found: list[tuple[str, SetChange]], metric: Metric, target: str) -> Table:
    rows = [{"cell": name, "test": c.test or "", "before": c.change.before, "after": c.change.after,
             "effect %": f"{c.change.effect_pct:+.1f}", "last set before": c.set_before, "rev before": c.rev_before,
             "first set after": c.set_after, "rev after": c.rev_after} for name, c in found]
    return frame_table(pd.DataFrame(rows, columns=CHANGE_COLUMNS),
                       f"change points of {metric.name} ({metric.unit}) on {target}: {len(found)}", floatfmt="{:.4g}")


def markdown(found: list[tuple[str, SetChange]], metric: Metric, target: str) -> str:
    """The job summary's section: one line per new step (or one line saying there is none)."""
    head = f"### harness: new change points of {metric.name} on {target}"
    if not found:
        return f"{head}\n\nnone made visible by the newest set\n"
    lines = [f"- `{name}` {c.line(metric.unit)}" for name, c in found]
    return "\n".join([head, "", *lines, "", f"_{METHOD}_", ""])
