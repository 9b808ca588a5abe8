"""A trend as inline SVG: the per-set medians with their interquartile range as whiskers, sets in start order, the
change points as dashed lines between the two sets they fall between, each point titled with its set, revision and
median (the browser shows it on hover).

Why not the matplotlib figure of ``results trend`` (harness/figures/history.py): it costs 1-3 s a trend here (its
width grows with the sets, one rotated label each), and a site of 100 sets has about 40 trends; this costs
milliseconds and is part of the page (its numbers are text a test and a search can read). Tick values come from
matplotlib's MaxNLocator (matplotlib.ticker, not pyplot: no backend to load), so the axes read as the figures' do.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib.ticker import MaxNLocator

from harness.analysis.changes import SetChange
from harness.results.metrics import Metric
from harness.site.pages import esc

WIDTH, HEIGHT = 1000, 340
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 20, 50
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
MAX_X_LABELS = 8  # a start stamp is ~95 px wide at 11 px: 8 fit the axis


def stamp(set_id: str) -> str:
    """``20261201-003539``: a set's start stamp, the first two parts of its id (as the trend figure labels it)."""
    return "-".join(set_id.split("-")[:2])


def y_scale(frame: pd.DataFrame) -> tuple[list[float], float, float]:
    """Tick values and the axis's bottom and top (the quartiles included)."""
    low = float(min(frame["q1"].min(), frame["median"].min()))
    high = float(max(frame["q3"].max(), frame["median"].max()))
    if high == low:
        low, high = low - 0.5 * abs(low or 1.0), high + 0.5 * abs(high or 1.0)
    ticks = [float(t) for t in MaxNLocator(nbins=6).tick_values(low, high)]
    return ticks, min(ticks[0], low), max(ticks[-1], high)


def trend_svg(frame: pd.DataFrame, metric: Metric, changes: Sequence[SetChange] = ()) -> str:
    """``frame``: :func:`harness.results.history.metric_by_set`'s (one row per set, and per test)."""
    order = list(dict.fromkeys(frame["set_id"]))
    x_of = {set_id: i for i, set_id in enumerate(order)}
    step = (WIDTH - LEFT - RIGHT) / max(len(order), 1)
    ticks, bottom, top = y_scale(frame)

    def x(i: float) -> float:
        return LEFT + (i + 0.5) * step

    def y(value: float) -> float:
        return TOP + (top - value) / (top - bottom) * (HEIGHT - TOP - BOTTOM)

    parts = [f'<line x1="{LEFT}" y1="{y(t):.1f}" x2="{WIDTH - RIGHT}" y2="{y(t):.1f}" class="grid"/>'
             f'<text x="{LEFT - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{t:.4g}</text>' for t in ticks]
    every = max(1, -(-len(order) // MAX_X_LABELS))
    parts += [f'<text x="{x(i):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
              f"{esc(stamp(s))}</text>" for i, s in enumerate(order) if i % every == 0]
    groups = frame.groupby("test", sort=True) if "test" in frame else [(None, frame)]
    for k, (test, rows) in enumerate(groups):
        colour = COLOURS[k % len(COLOURS)]
        xs = [x(x_of[s]) for s in rows["set_id"]]
        points = " ".join(f"{a:.1f},{y(v):.1f}" for a, v in zip(xs, rows["median"], strict=True))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        for a, r in zip(xs, rows.itertuples(), strict=True):
            label = f"{r.set_id} ({r.harness_rev or 'no revision'}){' ' + str(test) if test else ''}: {r.median:.4g}"
            parts.append(f'<line x1="{a:.1f}" y1="{y(r.q1):.1f}" x2="{a:.1f}" y2="{y(r.q3):.1f}" stroke="{colour}"/>'
                         f'<circle cx="{a:.1f}" cy="{y(r.median):.1f}" r="3.5" fill="{colour}">'
                         f"<title>{esc(label)}</title></circle>")
        if test is not None:
            parts.append(f'<text x="{WIDTH - RIGHT - 4}" y="{TOP + 14 + 14 * k}" text-anchor="end" '
                         f'fill="{colour}">{esc(test)}</text>')
    for change in changes:
        at = x(x_of[change.set_after] - 0.5)
        parts.append(f'<line x1="{at:.1f}" y1="{TOP}" x2="{at:.1f}" y2="{HEIGHT - BOTTOM}" class="change-line"/>'
                     f'<text x="{at + 4:.1f}" y="{TOP + 12}" class="change">{change.change.effect_pct:+.1f} %</text>')
    better = "higher" if metric.higher_is_better else "lower"
    parts.append(f'<text x="14" y="{(TOP + HEIGHT - BOTTOM) / 2:.0f}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {(TOP + HEIGHT - BOTTOM) / 2:.0f})">'
                 f"{esc(metric.name)} ({esc(metric.unit)}), {better} is better</text>")
    return (f'<svg class="trend" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
            f'xmlns="http://www.w3.org/2000/svg"><rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
            f'height="{HEIGHT - TOP - BOTTOM}" class="frame"/>{"".join(parts)}</svg>')
