"""Ratio of medians between two samples, its bootstrap confidence interval and a rank test.

This is the one estimate ``harness compare``, ``harness gate`` and figure F4 share, so a figure's whiskers
and the gate's decision never disagree.

- Ratio of medians, candidate / baseline: medians because a single stalled request (a page-cache refill,
  a thermal step) should not move a cell; a ratio because the same change is one number whatever the
  unit, as in asv's ``asv compare`` (factor between two results).
- Confidence interval: percentile bootstrap, resampling each side independently (Efron & Tibshirani,
  *An Introduction to the Bootstrap*, 1993, ch. 13; scipy.stats.bootstrap with ``method="percentile"``;
  BCa needs more observations than a board session gives per cell). A fixed seed makes a decision
  reproducible from the same data.
- Mann-Whitney U, two-sided (scipy.stats.mannwhitneyu): asv's test for "the two samples differ"; it makes
  no normality assumption, which tok/s on a shared board does not meet.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 20261201


@dataclass(frozen=True)
class RatioEstimate:
    ratio: float  # median(candidate) / median(baseline)
    low: float  # confidence interval of the ratio
    high: float
    p: float  # Mann-Whitney U, two-sided; nan when a side has fewer than 2 values
    n_baseline: int
    n_candidate: int
    confidence: float


def _clean(values: Sequence[float] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    finite: np.ndarray = array[np.isfinite(array)]
    return finite


def ratio_of_medians(baseline: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray, *,
                     confidence: float = 0.95, resamples: int = DEFAULT_RESAMPLES,
                     seed: int = DEFAULT_SEED) -> RatioEstimate:
    """Candidate vs baseline. Non-finite values are dropped. With one value on a side the interval is the
    point itself (nothing to resample) and p is nan; a zero baseline median gives an infinite ratio."""
    a, b = _clean(baseline), _clean(candidate)
    if not len(a) or not len(b):
        raise ValueError("ratio_of_medians needs at least one finite value on each side")
    med_a, med_b = float(np.median(a)), float(np.median(b))
    ratio = med_b / med_a if med_a else math.inf
    if len(a) < 2 or len(b) < 2 or not med_a:
        return RatioEstimate(ratio, ratio, ratio, math.nan, len(a), len(b), confidence)

    def statistic(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        below = np.median(x, axis=axis)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio: np.ndarray = np.median(y, axis=axis) / below
            return ratio

    if np.ptp(a) == 0 and np.ptp(b) == 0:  # every resample is the same number: the interval is the point
        low = high = ratio
    else:
        boot = stats.bootstrap((a, b), statistic, n_resamples=resamples, confidence_level=confidence,
                               method="percentile", vectorized=True, paired=False,
                               rng=np.random.default_rng(seed))
        low, high = float(boot.confidence_interval.low), float(boot.confidence_interval.high)
    p = float(stats.mannwhitneyu(b, a, alternative="two-sided").pvalue)
    return RatioEstimate(ratio, low, high, p, len(a), len(b), confidence)
