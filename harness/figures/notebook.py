"""What the notebooks (``notebooks/<group>.py``, one per figure group) share: open a result set and draw one group's
figures exactly as ``harness report`` draws them.

- ``HARNESS_SET``: the set, a path or an id (or a unique part of one) under ``HARNESS_RESULTS`` (default
  ``results/``); unset: the newest complete set there.
- ``HARNESS_FIGURES``: where the figures go; unset: the set's own ``figures/``, where ``harness report`` writes.

The figure context is :func:`harness.figures.report.figure_context` and the drawing
:func:`harness.figures.report.draw_figures` limited to the group: a notebook run writes the same files, with the
same numbers in their metadata, as the report does for that group.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import UsageError
from harness.figures.base import FIGURES, FigureContext
from harness.figures.report import draw_figures, figure_context
from harness.results.loader import ResultSet, find_result_set, list_result_sets, load_result_set

SET_ENV, RESULTS_ENV, FIGURES_ENV = "HARNESS_SET", "HARNESS_RESULTS", "HARNESS_FIGURES"


def groups() -> list[str]:
    """Every figure group in the registry, in registry order: each one has its notebook."""
    return list(dict.fromkeys(figure.group for figure in FIGURES.values()))


def newest_complete_set(results: Path) -> Path:
    complete = [path for path in list_result_sets(results) if load_result_set(path).complete]
    if not complete:
        raise UsageError(f"no complete result set in {results}/: run one (make demo) or set {SET_ENV}=PATH")
    return complete[-1]  # set ids start with their start time: the last in name order is the newest


def open_set() -> tuple[ResultSet, FigureContext]:
    """The chosen result set and the context its figures are drawn in (see the module doc for the variables)."""
    results = Path(os.environ.get(RESULTS_ENV) or "results")
    chosen = os.environ.get(SET_ENV)
    path = find_result_set(chosen, results) if chosen else newest_complete_set(results)
    rs = load_result_set(path)
    out = os.environ.get(FIGURES_ENV)
    context = figure_context(rs, Path(out) if out else rs.path / "figures")
    print(f"set {rs.set_id} ({rs.manifest.get('status')}) from {rs.path}; figures into {context.out_dir}")
    return rs, context


def draw_group(context: FigureContext, group: str) -> list[Path]:
    """Draw every registered figure of ``group`` whose tables have rows; print one line for each of the others
    naming what it lacks. Returns the PNGs written."""
    if group not in groups():
        raise UsageError(f"no figure group {group!r} (registered: {', '.join(groups())})")
    figures, not_drawn = draw_figures(context, group)
    for skipped in not_drawn:
        print(skipped.cli_line())
    pngs = [path for path in figures if path.suffix == ".png"]
    for png in pngs:
        print(f"figure: {png}")
    return pngs
