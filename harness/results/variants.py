"""A run's variant: which matrix cell and cache condition it measured, as one stable label.

``read_ahead_kb=128 threads=2 cold``: the experiment's matrix keys in the experiment's order, then the cache
condition. Figures label their cells with it, compare and gate match cells across sets by it, and history
queries select it, so one cell has one name everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from harness.results.cell import CellKey

if TYPE_CHECKING:  # pandas only where a table is labelled: `harness ci init` labels cells and starts fast
    import pandas as pd


def engine_label(values: Mapping[str, Any]) -> str | None:
    """The step label of a run whose step ran an engine other than llama.cpp (``bmoe-cache256``; the runs table's
    ``engine`` and ``step_label``), else None (:meth:`CellKey.of` decides)."""
    return CellKey.of(values, ()).engine or None


def variant_label(values: Mapping[str, Any], params: Sequence[str]) -> str:
    """The label of one run (a runs row or a dict) for the experiment's matrix keys ``params``: its
    :class:`CellKey`'s label (``bmoe-cache256 read_ahead_kb=8192 threads=1 cold``)."""
    return CellKey.of(values, params).label()


def variants(runs: pd.DataFrame, params: Sequence[str]) -> pd.Series:
    """The label of every row of ``runs`` (or of any table carrying the matrix columns and ``cache``)."""
    import pandas as pd

    if runs.empty:
        return pd.Series(index=runs.index, dtype=object)
    return runs.apply(lambda row: variant_label(row, params), axis=1)
