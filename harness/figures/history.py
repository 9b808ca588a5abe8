"""One metric of one cell on one board across result sets (``harness results trend``): the median per set with
its interquartile range as whiskers, sets in the order they started, each labelled by its id and harness revision;
change points (:mod:`harness.analysis.changes`) as dashed lines between the two sets they fall between.

Not a per-set figure (it is not registered, ``harness report`` never draws it): it is drawn from
:func:`harness.results.history.metric_by_set`'s frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from harness.analysis.changes import SetChange
from harness.figures.base import save
from harness.results.metrics import Metric


def set_label(set_id: str, harness_rev: object) -> str:
    """``20261201-003539`` over ``abc1234``: the set's start stamp and the revision that measured it."""
    stamp = "-".join(set_id.split("-")[:2])
    return f"{stamp}\n{harness_rev}" if isinstance(harness_rev, str) and harness_rev else stamp


def trend_numbers(frame: pd.DataFrame, metric: Metric, cell: str, target: str,
                  changes: Sequence[SetChange] = ()) -> dict[str, object]:
    """What the figure shows, for its metadata: every set's median, quartiles and count, and the change points."""
    points = frame.assign(started=frame["started"].astype(str)).to_dict(orient="records")
    steps = [{"test": c.test, "set_before": c.set_before, "set_after": c.set_after, "before": c.change.before,
              "after": c.change.after, "effect_pct": c.change.effect_pct} for c in changes]
    return {"metric": metric.name, "unit": metric.unit, "cell": cell, "target": target, "points": points,
            "changes": steps}


def draw_trend(frame: pd.DataFrame, metric: Metric, cell: str, target: str, out: Path,
               changes: Sequence[SetChange] = ()) -> list[Path]:
    """Draw ``frame`` (one row per set, and per test for a metric with tests) into ``out`` (PNG, plus an SVG
    beside it), ``changes`` marked; returns the paths."""
    order = list(dict.fromkeys(frame["set_id"]))
    revs = dict(zip(frame["set_id"], frame["harness_rev"], strict=False))
    x_of = {set_id: i for i, set_id in enumerate(order)}
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(order) + 2), 4))
    groups = frame.groupby("test", sort=True) if "test" in frame else [(None, frame)]
    for test, rows in groups:
        x = rows["set_id"].map(x_of)
        whiskers = [(rows["median"] - rows["q1"]).clip(lower=0), (rows["q3"] - rows["median"]).clip(lower=0)]
        ax.errorbar(x, rows["median"], yerr=whiskers, marker="o", capsize=3, label=test)
    for change in changes:  # between the last set of the old level and the first of the new one
        ax.axvline(x_of[change.set_after] - 0.5, color="tab:red", linestyle="--", linewidth=1)
        ax.annotate(f"{change.change.effect_pct:+.1f} %", (x_of[change.set_after] - 0.5, 1.0),
                    xycoords=("data", "axes fraction"), xytext=(3, -12), textcoords="offset points",
                    color="tab:red", fontsize=7)
    ax.set_xticks(range(len(order)), [set_label(s, revs[s]) for s in order], rotation=90, fontsize=6)
    better = "higher" if metric.higher_is_better else "lower"
    ax.set_ylabel(f"{metric.name} ({metric.unit}), {better} is better")
    ax.set_title(f"{metric.name} · {cell} · {target}: median per set, whiskers IQR", fontsize=9)
    ax.grid(True, alpha=0.3)
    if "test" in frame:
        ax.legend(fontsize=7)
    span = f"{order[0]} … {order[-1]} ({len(order)} sets)" if order else "no sets"
    return save(fig, out.parent, out.stem, span, f"history of {metric.name}, {cell}, {target}",
                numbers=trend_numbers(frame, metric, cell, target, changes))
