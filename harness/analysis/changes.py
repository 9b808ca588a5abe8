"""Change points in a metric's history: at which result set (and so at which revision) did it step?

Method: PELT (Killick, Fearnhead & Eckley 2012, "Optimal detection of changepoints with a linear computational
cost", JASA 107:1590) with the least-squares cost of a change in mean, as implemented by ``ruptures``
(Truong, Oudre & Vayatis 2020, Signal Processing 167; ``KernelCPD(kernel="linear")``, its C implementation).

- The series is one value per set (the set's median), oldest first, divided by a robust estimate of its noise:
  sigma = 1.4826 MAD(first differences) / sqrt(2). Differences cancel the steps themselves, so a history with a
  step still gets the noise of its flat stretches (a plain standard deviation would count the step as noise).
- Penalty per change: 4 ln n on that scaled series, the upper end of the BIC family (Schwarz 2 ln n per
  parameter; Zhang & Siegmund's modified BIC ~3 ln n): a nightly history is read for regressions to chase, so a
  false change costs more than a late one. Segments hold at least ``MIN_SEGMENT`` sets: one odd night is an
  outlier, not a step.
- A change must also move the median by at least ``MIN_EFFECT_PCT``: smaller steps are real but not a lab's
  business (the gate's own threshold is 5 %).

Measured on seeded Gaussian histories of 30 sets (bench/changes_speed.py prints it, 2026-12-03): 1.0-1.4 % of flat
histories (2 % noise) show a change, 96.5-97.3 % of 10 % steps (5 sigma) are found at exactly the right set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

PENALTY_PER_LN_N = 4.0
MIN_SEGMENT = 3
MIN_EFFECT_PCT = 2.0
CONFIRM_SETS = MIN_SEGMENT + 1  # sets on a new level before a nightly job reports the step (new_changes)
METHOD = (f"PELT (Killick et al. 2012, ruptures) on the per-set medians scaled by a MAD noise estimate, penalty "
          f"{PENALTY_PER_LN_N:g} ln n, segments of >= {MIN_SEGMENT} sets, |effect| >= {MIN_EFFECT_PCT:g} %")


@dataclass(frozen=True)
class Change:
    """A step at ``index``: the first value of the new level. ``before``/``after``: the medians of the segments on
    each side; ``effect_pct``: after against before, in per cent."""

    index: int
    before: float
    after: float
    effect_pct: float


@dataclass(frozen=True)
class SetChange:
    """A change located in a history: the last set before it and the first set after it, with their revisions."""

    change: Change
    test: str | None
    set_before: str
    set_after: str
    rev_before: str
    rev_after: str

    def line(self, unit: str = "") -> str:
        unit = f" {unit}" if unit else ""
        test = f"{self.test}: " if self.test else ""
        return (f"{test}{self.change.before:.4g} -> {self.change.after:.4g}{unit} ({self.change.effect_pct:+.1f} %) "
                f"between {self.set_before} ({self.rev_before or 'no revision'}) and {self.set_after} "
                f"({self.rev_after or 'no revision'})")


def noise_sigma(values: np.ndarray) -> float:
    """Robust noise of a piecewise-constant series: MAD of the first differences, scaled to a Gaussian sigma."""
    diffs = np.diff(values)
    mad = float(np.median(np.abs(diffs - np.median(diffs)))) if diffs.size else 0.0
    return 1.4826 * mad / math.sqrt(2)


def detect_changes(values: Sequence[float], min_effect_pct: float = MIN_EFFECT_PCT) -> list[Change]:
    """The steps in ``values`` (oldest first), by the method above; [] for a series too short to hold two
    segments or with no variation at all."""
    import ruptures

    series = np.asarray(values, dtype=float)
    series = series[np.isfinite(series)]
    n = series.size
    if n < 2 * MIN_SEGMENT:
        return []
    sigma = noise_sigma(series)
    if sigma == 0.0:  # a series with exact repeats: fall back to its spread (0 there: constant, nothing to find)
        sigma = float(np.std(series))
    if sigma == 0.0:
        return []
    scaled = (series / sigma).reshape(-1, 1)
    algo = ruptures.KernelCPD(kernel="linear", min_size=MIN_SEGMENT).fit(scaled)
    ends = [int(b) for b in algo.predict(pen=PENALTY_PER_LN_N * math.log(n))]  # segment ends, the last is n
    bounds = [0, *ends]
    changes = []
    for left, cut, right in zip(bounds, bounds[1:], bounds[2:], strict=False):
        before, after = float(np.median(series[left:cut])), float(np.median(series[cut:right]))
        effect = 100.0 * (after - before) / abs(before) if before else math.inf
        if abs(effect) >= min_effect_pct:
            changes.append(Change(cut, before, after, effect))
    return changes


def history_changes(frame: pd.DataFrame, min_effect_pct: float = MIN_EFFECT_PCT) -> list[SetChange]:
    """Change points in a history frame of :func:`harness.results.history.metric_by_set` (one row per set, and
    per test where the metric has tests; columns set_id, harness_rev, median, oldest first)."""
    groups = frame.groupby("test", sort=True) if "test" in frame else [(None, frame)]
    found = []
    for test, rows in groups:
        # the values detect_changes keeps (finite ones), so its indices are rows of this frame
        rows = rows[np.isfinite(rows["median"].to_numpy(dtype=float))].reset_index(drop=True)
        for change in detect_changes(rows["median"].to_list(), min_effect_pct):
            before, after = rows.iloc[change.index - 1], rows.iloc[change.index]
            found.append(SetChange(change, None if test is None else str(test), str(before["set_id"]),
                                   str(after["set_id"]), str(before["harness_rev"] or ""),
                                   str(after["harness_rev"] or "")))
    return found


def new_changes(frame: pd.DataFrame, min_effect_pct: float = MIN_EFFECT_PCT) -> list[SetChange]:
    """The change points the newest set confirmed: those with at least ``CONFIRM_SETS`` sets on their new level,
    less those already confirmed without the newest set (the same step, within ``MIN_SEGMENT`` sets: a step near
    the end of a history can still move by a set as more sets arrive). A nightly job thus reports each step once,
    on the night that confirms it, naming the set where it happened (a few nights back)."""
    def confirmed(rows: pd.DataFrame) -> list[tuple[SetChange, int]]:
        index = {set_id: i for i, set_id in enumerate(dict.fromkeys(rows["set_id"]))}
        return [(c, index[c.set_after]) for c in history_changes(rows, min_effect_pct)
                if len(index) - index[c.set_after] >= CONFIRM_SETS]

    if frame.empty:
        return []
    newest = frame["set_id"].iloc[-1]
    known = confirmed(frame[frame["set_id"] != newest])
    return [c for c, at in confirmed(frame)
            if not any(k.test == c.test and abs(k_at - at) < MIN_SEGMENT
                       and (k.change.effect_pct > 0) == (c.change.effect_pct > 0) for k, k_at in known)]
