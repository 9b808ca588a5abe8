"""report.md's correlation of decode speed with the device: per cell, over its cold (streaming) requests.

One r over every request of a set pools cells that differ in kind -- warm requests read nothing from the device
and decode fast, cold ones stream, at every readahead -- so its sign says only that warm is faster (the quickstart
set in tests/data: r = -0.96 over its 39 requests; within its cold cells 0.90, -0.45 and 0.95 over 6, 6 and 3
requests, the middle one's interval spanning 0). The seed's r = 0.90
was over the cold requests of one setting; this is the same number per cell, with its n and 95 % interval
(``harness.analysis.stats.correlations_by_cell``), and no pooled one.
"""

from __future__ import annotations

import math

import pandas as pd

from harness.analysis.stats import correlations_by_cell
from harness.figures.streaming import cold_if_any


def _number(value: float, fmt: str) -> str:
    return "—" if math.isnan(value) else format(value, fmt)


def correlation_table(points: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """(cell, requests, r, 95% CI, p) over each cell's cold requests (all of them where none is cold), and which."""
    if points.empty:
        return pd.DataFrame(), "requests"
    chosen, which = cold_if_any(points)
    table = correlations_by_cell(chosen, "decode_dev_mbps", "decode_tps")
    shown = pd.DataFrame({
        "cell": table["cell"], "requests": table["n"], "r": [_number(r, ".2f") for r in table["r"]],
        "95% CI": ["—" if math.isnan(lo) else f"{lo:.2f} to {hi:.2f}" for lo, hi in zip(table["low"], table["high"],
                                                                                       strict=True)],
        "p": [_number(p, ".2g") for p in table["p"]]})
    return shown, which


def correlation_lines(points: pd.DataFrame) -> list[str]:
    """The section's lines: the per-cell table under a line saying over what; none without requests."""
    table, which = correlation_table(points)
    if table.empty:
        return []
    return ["", f"Pearson r of decode tok/s with device MB/s within each cell, over its {which} (95 % interval by "
                "Fisher's z; — with fewer than 4 requests or a constant side; no r over several cells: they differ "
                "in kind, warm from cold and readahead from readahead):", "",
            table.to_markdown(index=False, disable_numparse=True, colalign=("left", *["right"] * 4))]
