"""A run's variant: which matrix cell and cache condition it measured, as one stable label.

``read_ahead_kb=128 threads=2 cold``: the experiment's matrix keys in the experiment's order, then the cache
condition. Figures label their cells with it, compare and gate match cells across sets by it, and history
queries select it, so one cell has one name everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas only where a table is labelled: `harness ci init` labels cells and starts fast
    import pandas as pd


def _present(value: Any) -> bool:
    """Not None, NaN, pd.NA or NaT (a matrix key this run's step does not vary over is missing in the runs table)."""
    if value is None:
        return False
    if isinstance(value, float):
        return not math.isnan(value)
    return type(value).__name__ not in ("NAType", "NaTType")


# runs of these engines keep the labels they always had (sets from before the runs table named the engine too)
UNLABELLED_ENGINES = ("llama.cpp",)


def engine_label(values: Mapping[str, Any]) -> str | None:
    """The step label of a run whose step ran an engine other than llama.cpp (``bmoe-cache256``; the runs table's
    ``engine`` and ``step_label``), else None: the same cell measured by another engine, or by another configuration
    of it, is another variant."""
    engine = values.get("engine")
    if not _present(engine) or engine in UNLABELLED_ENGINES:
        return None
    label = values.get("step_label")
    return str(label) if _present(label) else str(engine)


def variant_label(values: Mapping[str, Any], params: Sequence[str]) -> str:
    """The label of one run (a runs row or a dict) for the experiment's matrix keys ``params``; runs of another
    engine's step start with that step's label (``bmoe-cache256 read_ahead_kb=8192 threads=1 cold``)."""
    engine = engine_label(values)
    parts = [f"{p}={values[p]}" for p in params if p in values and _present(values[p])]
    cache = values.get("cache", "")
    return " ".join(([engine] if engine else []) + parts + ([str(cache)] if _present(cache) and cache != ""
                                                             else [])).strip()


def variants(runs: pd.DataFrame, params: Sequence[str]) -> pd.Series:
    """The label of every row of ``runs`` (or of any table carrying the matrix columns and ``cache``)."""
    import pandas as pd

    if runs.empty:
        return pd.Series(index=runs.index, dtype=object)
    return runs.apply(lambda row: variant_label(row, params), axis=1)
