"""Statistics used by figures, reports and the gate. Each function says where its method comes from.

- Pearson correlation: scipy.stats.pearsonr (two-sided p-value under normality), as the seed
  article reports decode tok/s against NVMe MB/s (r = 0.90 over 8 requests), with its 95 % interval by
  Fisher's z transformation (``PearsonRResult.confidence_interval``; Fisher 1915, 1921). Only within a
  cell: pooling cells that differ in kind (warm requests read nothing and decode fast, cold ones of every
  readahead stream) gives an r that says only that the cells differ (the quickstart set pooled -0.96 over 39
  requests; within its cold cells r is 0.90, -0.45 and 0.95), so ``correlations_by_cell`` is what a report shows.
- Same-session comparison against a baseline: every variant is compared with the baseline measured
  in the same round of the same result set (the rounds interleave A B A B), as a per-round ratio,
  then summarised as mean ± sample sd over rounds. Pairing by round cancels slow drift, which the
  seed article saw between sessions (2.26-2.60 tok/s for one setting); asv compares benchmarks by
  ratio for the same reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
from scipy import stats


@dataclass(frozen=True)
class Correlation:
    r: float
    p: float
    n: int
    low: float = math.nan  # the 95 % interval of r (Fisher z); NaN with 3 pairs (its standard error is 1/sqrt(n-3))
    high: float = math.nan


def pearson(x: pd.Series, y: pd.Series) -> Correlation | None:
    """Pearson's r of paired, finite observations; None when fewer than 3 or when one side is constant."""
    pairs = pd.DataFrame({"x": x, "y": y}).replace([math.inf, -math.inf], math.nan).dropna()
    if len(pairs) < 3 or pairs["x"].nunique() < 2 or pairs["y"].nunique() < 2:
        return None
    result = stats.pearsonr(pairs["x"], pairs["y"])
    low = high = math.nan
    if len(pairs) > 3:
        interval = result.confidence_interval(confidence_level=0.95)
        low, high = float(interval.low), float(interval.high)
    return Correlation(float(result.statistic), float(result.pvalue), len(pairs), low, high)


CORRELATION_COLUMNS = ["cell", "n", "r", "low", "high", "p"]


def correlations_by_cell(frame: pd.DataFrame, x: str, y: str, cell: str = "cell") -> pd.DataFrame:
    """Per cell (in the frame's order): n paired observations, Pearson r with its 95 % interval and p; r, the
    interval and p are NaN where the cell has fewer than 3 pairs or a constant side."""
    rows = []
    for name, group in frame.groupby(cell, sort=False):
        corr = pearson(group[x], group[y])
        n = corr.n if corr else int(group[[x, y]].replace([math.inf, -math.inf], math.nan).dropna().shape[0])
        rows.append({"cell": name, "n": n, "r": corr.r if corr else math.nan, "low": corr.low if corr else math.nan,
                     "high": corr.high if corr else math.nan, "p": corr.p if corr else math.nan})
    return pd.DataFrame(rows, columns=CORRELATION_COLUMNS)


def change_vs_baseline(frame: pd.DataFrame, value: str, cell: list[str], baseline: dict[str, Any],
                       round_col: str = "round") -> pd.DataFrame:
    """Per cell: mean and sd of ``value``, and its change vs the baseline cell in the same round.

    ``frame`` has one row per observation with the ``cell`` columns and ``round``. Observations of a
    cell within one round are averaged first, so a cell with more requests per round does not weigh
    more. Returns columns: the cell columns, ``n_rounds``, ``mean``, ``sd``, ``change_pct`` (mean of
    the per-round ratios - 1, in %), ``change_sd_pct`` (their sample sd), ``is_baseline``.
    """
    if frame.empty:
        return pd.DataFrame()
    per_round = frame.groupby(cell + [round_col], dropna=False)[value].mean().reset_index()
    mask = pd.Series(True, index=per_round.index)
    for column, wanted in baseline.items():
        mask &= per_round[column].astype(str) == str(wanted)
    base = per_round[mask].groupby(round_col)[value].mean().rename("baseline")
    joined = per_round.join(base, on=round_col)
    joined["ratio"] = joined[value] / joined["baseline"]
    rows = []
    for key, group in joined.groupby(cell, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        ratios = group["ratio"].dropna()
        rows.append({**dict(zip(cell, key, strict=True)), "n_rounds": int(group[round_col].nunique()),
                     "mean": group[value].mean(), "sd": group[value].std(ddof=1),
                     "change_pct": (ratios.mean() - 1) * 100 if len(ratios) else math.nan,
                     "change_sd_pct": ratios.std(ddof=1) * 100 if len(ratios) > 1 else math.nan,
                     "is_baseline": all(str(v) == str(baseline.get(c)) for c, v in zip(cell, key, strict=True))})
    return pd.DataFrame(rows)
