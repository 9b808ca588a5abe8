"""The gate's decision rule: is a candidate's sample a regression against a baseline's, beyond a threshold?

Pure statistics on two samples of one metric; what a cell is and where samples come from is not known here.

- The estimate is :func:`harness.analysis.ratios.ratio_of_medians` (candidate / baseline, percentile-bootstrap
  95 % interval, two-sided Mann-Whitney U p), the same numbers ``harness compare`` and figure F4 show.
- A **regression** needs all three: the ratio passes the threshold in the worse direction, the whole confidence
  interval lies beyond it, and p < alpha (0.01). asv flags a change when the ratio passes its ``--factor`` and
  the Mann-Whitney U test says the samples differ (asv ``_stats.is_different``, p < 0.002: ``asv/_stats.py``, the
  module ``asv/statistics.py`` renamed in asv commit e88a2acf, 2024-09-09; read at 7032df70); the interval is
  our addition: p alone says "different", not "different by more than the threshold", and a ratio alone moves
  with one stalled request. An **improvement** is the mirror image.
- **insufficient**: fewer than 2 values on a side, a baseline median of 0 (no ratio), or sample sizes with which
  the test can never reach alpha. The smallest two-sided exact Mann-Whitney p for sizes n and m is
  2 / C(n + m, n) (every candidate value beyond every baseline value; Mann & Whitney 1947, the null distribution
  of U); asv makes the same check (``p_min`` in ``is_different``) before it trusts the test. At alpha 0.01 that
  takes 5 values per side (2 / 252 = 0.008); 4 and 4 give 0.029.
- Direction: for a metric where higher is better (tok/s, MB/s) the limit is ``1 - threshold`` (5 %: ratio 0.95);
  where lower is better (latency, bytes per token) it is ``1 + threshold``.
- **suspected**: the ratio passes the threshold in the worse direction, significant or not. ``harness gate
  --confirm N`` takes a second look at exactly these cells: more rounds either confirm or clear them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from harness.analysis.ratios import DEFAULT_RESAMPLES, DEFAULT_SEED, RatioEstimate, ratio_of_medians

Verdict = Literal["pass", "regression", "improvement", "insufficient"]
DEFAULT_ALPHA = 0.01
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class GateDecision:
    verdict: Verdict
    estimate: RatioEstimate | None  # None when a side had no finite value
    threshold: float  # a fraction: 0.05 is 5 %
    higher_is_better: bool
    alpha: float
    reason: str  # one line: why this verdict

    @property
    def limit(self) -> float:
        """The ratio a regression must pass."""
        return regression_limit(self.threshold, self.higher_is_better)

    @property
    def suspected(self) -> bool:
        """The ratio is past the regression limit, whether or not the interval and the test agree."""
        if self.estimate is None or not math.isfinite(self.estimate.ratio):
            return False
        return _worse(self.estimate.ratio, self.limit, self.higher_is_better)


def regression_limit(threshold: float, higher_is_better: bool) -> float:
    return 1 - threshold if higher_is_better else 1 + threshold


def improvement_limit(threshold: float, higher_is_better: bool) -> float:
    return 1 + threshold if higher_is_better else 1 - threshold


def min_attainable_p(n_baseline: int, n_candidate: int) -> float:
    """The smallest two-sided exact Mann-Whitney p that samples of these sizes can give (no ties)."""
    if n_baseline < 1 or n_candidate < 1:
        return 1.0
    return min(1.0, 2 / math.comb(n_baseline + n_candidate, n_baseline))


def _worse(value: float, limit: float, higher_is_better: bool) -> bool:
    return value < limit if higher_is_better else value > limit


def _better(value: float, limit: float, higher_is_better: bool) -> bool:
    return value > limit if higher_is_better else value < limit


def decide(baseline: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray, *,
           higher_is_better: bool, threshold: float, alpha: float = DEFAULT_ALPHA,
           confidence: float = DEFAULT_CONFIDENCE, resamples: int = DEFAULT_RESAMPLES,
           seed: int = DEFAULT_SEED) -> GateDecision:
    """The verdict on candidate vs baseline (non-finite values are dropped), with the numbers behind it."""
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold {threshold!r}: expected a fraction in [0, 1)")
    a, b = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]

    def verdict(kind: Verdict, reason: str, estimate: RatioEstimate | None) -> GateDecision:
        return GateDecision(kind, estimate, threshold, higher_is_better, alpha, reason)

    if not len(a) or not len(b):
        return verdict("insufficient", f"no values (n {len(a)}/{len(b)})", None)
    with warnings.catch_warnings():  # a constant side makes scipy warn; the interval is then the point itself
        warnings.simplefilter("ignore")
        estimate = ratio_of_medians(a, b, confidence=confidence, resamples=resamples, seed=seed)
    if np.median(a) == 0:
        if np.median(b) == 0:
            same = RatioEstimate(1.0, math.nan, math.nan, math.nan, len(a), len(b), confidence)
            return verdict("pass", "both medians are 0", same)
        return verdict("insufficient", "baseline median is 0: no ratio", estimate)
    if len(a) < 2 or len(b) < 2:
        return verdict("insufficient", f"n {len(a)}/{len(b)}: at least 2 per side", estimate)
    p_min = min_attainable_p(len(a), len(b))
    if p_min >= alpha:
        return verdict("insufficient", f"n {len(a)}/{len(b)} cannot reach p < {alpha:g} (at best {p_min:.2g})",
                       estimate)
    ratio, low, high, p = estimate.ratio, estimate.low, estimate.high, estimate.p
    # regression first, then improvement; the interval's bound nearest to 1 must be past the limit too
    directions: tuple[tuple[Verdict, float, Callable[[float, float, bool], bool], float], ...] = (
        ("regression", regression_limit(threshold, higher_is_better), _worse, high if higher_is_better else low),
        ("improvement", improvement_limit(threshold, higher_is_better), _better, low if higher_is_better else high))
    for kind, limit, past, near in directions:
        if not past(ratio, limit, higher_is_better):
            continue
        if not past(near, limit, higher_is_better):
            return verdict("pass", f"ratio past {limit:.3g} but the interval reaches it", estimate)
        if not p < alpha:
            return verdict("pass", f"ratio past {limit:.3g} but p = {p:.2g} >= {alpha:g}", estimate)
        return verdict(kind, f"ratio and interval past {limit:.3g}, p < {alpha:g}", estimate)
    return verdict("pass", f"within {threshold * 100:g} % of the baseline", estimate)
