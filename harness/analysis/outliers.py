"""Outlier flags per sample: the modified z-score against the cell's median absolute deviation.

Method: Iglewicz and Hoaglin (1993), "How to Detect and Handle Outliers" (ASQC Basic References in Quality
Control, vol. 16): ``M_i = 0.6745 (x_i - median) / MAD``, where MAD is the median of ``|x_i - median|`` and
0.6745 the 0.75 quantile of the standard normal (so M is a z-score for normal data); ``|M_i| > 3.5`` flags a
potential outlier, their recommended cut. hyperfine flags outliers the same way (modified z-scores) and pyperf
warns "result may be unstable"; here a flag is shown (report.md, compare and gate notes) and a flagged sample
leaves the medians only where the experiment says so (``validity: {exclude_outliers: true}``).

A cell whose MAD is 0 (more than half its samples equal) has no scale to judge by: nothing is flagged there,
rather than every sample that differs at all. Fewer than 3 samples: nothing is flagged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

THRESHOLD = 3.5  # Iglewicz and Hoaglin's recommended cut for |M|
NORMAL_Q3 = 0.6745  # the standard normal's 0.75 quantile: MAD / 0.6745 estimates sigma for normal data
MIN_SAMPLES = 3


def modified_z(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Each value's modified z-score (NaN for all when there are fewer than 3 or the MAD is 0)."""
    x = np.asarray(values, dtype=float)
    if x.size < MIN_SAMPLES:
        return np.full(x.size, np.nan)
    median = np.median(x)
    mad = np.median(np.abs(x - median))
    if mad == 0:
        return np.full(x.size, np.nan)
    scores: np.ndarray = NORMAL_Q3 * (x - median) / mad
    return scores


def flag_outliers(frame: pd.DataFrame, by: Sequence[str], value: str = "value",
                  threshold: float = THRESHOLD) -> pd.DataFrame:
    """``frame`` with ``modified_z`` (against its group's median and MAD) and ``outlier`` (|z| > threshold) per
    row, the groups being the ``by`` columns (a cell); row order kept."""
    if frame.empty:
        return frame.assign(modified_z=pd.Series(dtype=float), outlier=pd.Series(dtype=bool))
    z = frame.groupby(list(by), sort=False, dropna=False)[value].transform(lambda s: modified_z(s.to_numpy()))
    return frame.assign(modified_z=z, outlier=z.abs() > threshold)
