"""A run's variant: which matrix cell and cache condition it measured, as one stable label.

``read_ahead_kb=128 threads=2 cold``: the experiment's matrix keys in the experiment's order, then the cache
condition. Figures label their cells with it, compare and gate match cells across sets by it, and history
queries select it, so one cell has one name everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd


def variant_label(values: Mapping[str, Any], params: Sequence[str]) -> str:
    """The label of one run (a runs row or a dict) for the experiment's matrix keys ``params``."""
    parts = [f"{p}={values[p]}" for p in params if p in values and pd.notna(values[p])]
    cache = values.get("cache", "")
    return " ".join(parts + ([str(cache)] if pd.notna(cache) and cache != "" else [])).strip()


def variants(runs: pd.DataFrame, params: Sequence[str]) -> pd.Series:
    """The label of every row of ``runs`` (or of any table carrying the matrix columns and ``cache``)."""
    if runs.empty:
        return pd.Series(index=runs.index, dtype=object)
    return runs.apply(lambda row: variant_label(row, params), axis=1)
