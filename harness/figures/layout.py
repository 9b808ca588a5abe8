"""Layout helpers the figures share: labels that never overlap, ratio axes, readable variant labels.

Figures are checked for overlapping text (tests/test_figures.py): labels placed along data (run names on a
timeline) are thinned here instead of drawn over each other, and variant labels are broken into lines rather
than rotated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter


def hide_overlapping(fig: Figure, texts: Iterable[Text], keep_clear_of: Sequence[Text] = ()) -> int:
    """Hide each text whose box meets an earlier kept one (or one of ``keep_clear_of``), in the given order;
    returns how many were hidden. Draws the figure first so the boxes are where they will be saved."""
    fig.draw_without_rendering()  # lays the figure out (text boxes and all) without rasterizing it
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg canvas method, not on FigureCanvasBase
    kept = [t.get_window_extent(renderer) for t in keep_clear_of if t.get_visible() and t.get_text()]
    hidden = 0
    for text in texts:
        box = text.get_window_extent(renderer)
        if any(box.overlaps(other) for other in kept):
            text.set_visible(False)
            hidden += 1
        else:
            kept.append(box)
    return hidden


def _ratio_text(value: float, style: str) -> str:
    if style == "percent":
        return f"{(value - 1) * 100:+.0f} %" if value != 1 else "0 %"
    return f"×{value:g}"


def ratio_axis(ax: Axes, values: Iterable[float], style: str = "times") -> None:
    """A log y axis for ratios: ticks from the 1-2-5 series spanning ``values`` (always including 1), labelled
    ``×0.5 ×1 ×2`` (or ``-50 % 0 % +100 %`` with ``style="percent"``); only powers of ten when that is too many."""
    finite = [v for v in values if math.isfinite(v) and v > 0] + [1.0]
    low, high = min(finite) / 1.3, max(finite) * 1.3
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    ticks = [m * 10.0 ** d for d in decades for m in (1, 2, 5) if low <= m * 10.0 ** d <= high]
    if len(ticks) > 7:
        ticks = [10.0 ** d for d in decades if low <= 10.0 ** d <= high]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _ratio_text(v, style)))
    ax.yaxis.set_minor_formatter(NullFormatter())


def fine_ratio_ticks(ax: Axes, max_ticks: int = 7) -> None:
    """On a :func:`ratio_axis` too narrow for the 1-2-5 series to tick more than ×1 (a build's ±20 %), ticks
    every 1, 2, 5, 10, 20 or 50 %, the finest step that gives at most ``max_ticks``, labelled ``×0.9``."""
    low, high = ax.get_ylim()
    if sum(low <= t <= high for t in ax.get_yticks()) >= 3:
        return
    ticks: list[float] = []
    for step in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5):
        ticks = [k * step for k in range(math.ceil(low / step), math.floor(high / step) + 1)]
        if len(ticks) <= max_ticks:
            break
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _ratio_text(round(v, 6), "times")))


def stacked_label(label: str) -> str:
    """``read_ahead_kb=128 threads=2 cold`` as one line per part, so tick labels need no rotation."""
    return "\n".join(label.split())


def label_width_in(labels: Iterable[str], fontsize: float) -> float:
    """Rough width in inches of the widest line of ``labels`` at ``fontsize`` (for sizing a figure)."""
    widest = max((len(line) for label in labels for line in label.splitlines()), default=1)
    return widest * fontsize * 0.6 / 72


def plain(value: Any) -> Any:
    """A number as JSON will keep it from run to run: 6 significant digits, None when not finite; containers
    converted throughout."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(f"{float(value):.6g}") if math.isfinite(value) else None
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    return value
