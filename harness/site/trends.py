"""Trend pages: per board, cell and metric, the median of every set that measured it (the history's
``metric_by_set``), drawn inline (harness/site/chart.py) with the change points of
:func:`harness.analysis.changes.history_changes` marked and listed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.changes import METHOD, SetChange, history_changes
from harness.results.history import metric_by_set
from harness.results.metrics import Metric
from harness.site.chart import trend_svg
from harness.site.pages import Cell, esc, link, number, page, slug, table, text


@dataclass(frozen=True)
class Trend:
    """One trend page: what it shows, for the boards' and trends' tables."""

    target: str
    cell: str
    metric: Metric
    href: str  # relative to the site's top
    frame: pd.DataFrame
    changes: list[SetChange]

    @property
    def latest(self) -> float:
        return float(self.frame["median"].iloc[-1])


def trend_page(con: Any, root: Path, metric: Metric, cell: str, target: str) -> Trend | None:
    """Draw and write one trend page; None when no ok run of the cell measured the metric."""
    frame = metric_by_set(con, metric, cell, target)
    if frame.empty:
        return None
    folder = root / "trends" / slug(target)
    name = f"{slug(cell)}--{metric.name}"
    steps = history_changes(frame)
    rows = [[Cell(link(f"../../sets/{r.set_id}/index.html", r.set_id)), text(r.harness_rev), text(r.started),
             *([text(r.test)] if "test" in frame else []), number(r.median), number(r.q1), number(r.q3),
             number(r.n, "{:d}")] for r in frame.itertuples()]
    columns = ["set", "revision", "started", *(["test"] if "test" in frame else []), f"median ({metric.unit})",
               "q1", "q3", "n"]
    found = "".join(f'<li class="change">{esc(c.line(metric.unit))}</li>' for c in steps)
    body = (f'<p>board {link("../../boards/" + slug(target) + ".html", target)}, cell <code>{esc(cell)}</code>, '
            f"{esc(metric.name)} ({esc(metric.unit)}), {frame['set_id'].nunique()} set(s)</p>"
            f"{trend_svg(frame, metric, steps)}"
            f"<h2>change points: {len(steps)}</h2><ul>{found}</ul><p class=\"note\">method: {esc(METHOD)}</p>"
            f"<h2>per set</h2>{table('points', columns, rows)}")
    page(folder / f"{name}.html", root, f"{metric.name} · {cell} · {target}", body)
    return Trend(target, cell, metric, f"trends/{slug(target)}/{name}.html", frame, steps)


def trend_rows(trends: list[Trend], up: str) -> list[list[Cell]]:
    """Rows of a table of trends (board, cell, metric, newest median, sets, change points), links from ``up``."""
    return [[text(t.target), Cell(link(up + t.href, t.cell)), text(t.metric.name), number(t.latest),
             text(t.metric.unit), number(t.frame["set_id"].nunique(), "{:d}"), number(len(t.changes), "{:d}")]
            for t in trends]


TREND_COLUMNS = ["board", "cell", "metric", "newest median", "unit", "sets", "change points"]
