"""Rounds until the answer is tight: when a cell has been measured enough, with optional stopping accounted for.

A cell is *tight* when the confidence interval of its metric's mean has a half-width of at most ``target_pct`` per
cent of the mean. The interval is Student's t over the cell's observations (scipy.stats.t for the quantile).

Looking after every round and stopping at the first tight look is optional stopping: the chance that *some* look's
interval misses the true mean is larger than one look's alpha, and a cell stops exactly when its spread happens to
look small. The rule used here is the Bonferroni repeated confidence interval (Jennison & Turnbull, "Interim
analyses: the repeated confidence interval approach", JRSS B 51(3):305-361, 1989; Jennison & Turnbull, *Group
Sequential Methods with Applications to Clinical Trials*, 2000, ch. 9): with at most K looks, each look's interval
is at level 1 - alpha / K, so by Bonferroni's inequality all K intervals cover the mean together with probability at
least 1 - alpha, whatever data-dependent rule decides when to stop. K is known in advance: ``max - min + 1`` looks
(after round min, min + 1, ..., max). It is conservative (wider than a Pocock bound for the same K), which costs
rounds, not validity. The guarantee is as good as each look's t interval: exact for normal observations, a
little optimistic for skewed ones (bench/rounds_aa.py on real decode tok/s: 5.7 % missed at a fixed 12 rounds for
a stated 5 %). ``naive`` (every look at 1 - alpha) is kept only so bench/rounds_aa.py can measure the
difference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

Rule = Literal["bonferroni", "naive"]


def looks(min_rounds: int, max_rounds: int) -> int:
    """How many times the rule may look: after round min, min + 1, ..., max."""
    return max_rounds - min_rounds + 1


def look_confidence(confidence: float, n_looks: int, rule: Rule) -> float:
    """The level of each look's interval: 1 - alpha / K under Bonferroni, the plain level when naive."""
    if rule == "naive":
        return confidence
    return 1 - (1 - confidence) / max(1, n_looks)


def halfwidth_pct(values: Sequence[float] | np.ndarray, confidence: float) -> float:
    """The half-width of the t interval of the mean at ``confidence``, in per cent of the mean (inf with fewer than
    2 finite values or a mean of 0: no interval yet)."""
    data = np.asarray(values, dtype=float)
    data = data[np.isfinite(data)]
    if len(data) < 2:
        return math.inf
    mean = float(np.mean(data))
    if mean == 0:
        return math.inf
    sd = float(np.std(data, ddof=1))
    quantile = float(stats.t.ppf(1 - (1 - confidence) / 2, len(data) - 1))
    return quantile * sd / math.sqrt(len(data)) / abs(mean) * 100


@dataclass(frozen=True)
class Look:
    """One cell after one round: its observations, the interval's half-width and whether it is tight."""

    rounds: int
    n: int
    halfwidth_pct: float
    tight: bool


def look(values: Sequence[float] | np.ndarray, rounds: int, *, target_pct: float, confidence: float,
         n_looks: int, rule: Rule) -> Look:
    width = halfwidth_pct(values, look_confidence(confidence, n_looks, rule))
    n = int(np.isfinite(np.asarray(values, dtype=float)).sum())
    return Look(rounds, n, width, width <= target_pct)
