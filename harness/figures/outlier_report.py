"""report.md's outlier flags: each sample of a headline metric whose modified z-score against its cell's median
absolute deviation passes 3.5 (harness/analysis/outliers.py, Iglewicz and Hoaglin 1993), with its run, value and
the cell's median, and whether the experiment left such samples out of compare's and the gate's medians
(``validity: {exclude_outliers: true}``) or kept them (the default)."""

from __future__ import annotations

import pandas as pd

from harness.analysis.outliers import THRESHOLD, flag_outliers
from harness.results.loader import ResultSet
from harness.results.metrics import METRICS
from harness.results.samples import CELL, missing_columns, samples

HEADLINE = ("decode_tps", "prefill_tps", "bench_tps", "fio_read_mbps")  # the metrics a reader compares first
SHOWN = 20  # rows of the table at most; the line says how many there were


def outlier_rows(rs: ResultSet) -> pd.DataFrame:
    """metric, cell, run, value, cell median, modified z of every flagged sample of the headline metrics."""
    rows = []
    for name in HEADLINE:
        metric = METRICS[name]
        if missing_columns(rs, metric):
            continue
        found = samples(rs, metric)
        if found.empty:
            continue
        flagged = flag_outliers(found, CELL)
        medians = flagged.groupby(CELL, sort=False, dropna=False)["value"].transform("median")
        for row, median in zip(flagged.itertuples(), medians, strict=True):
            if row.outlier:
                cell = " ".join(str(part) for part in (row.variant, row.step, row.test) if part)
                rows.append({"metric": name, "cell": cell, "run": row.run_id, "value": row.value,
                             "cell median": median, "modified z": row.modified_z})
    return pd.DataFrame(rows, columns=["metric", "cell", "run", "value", "cell median", "modified z"])


def outlier_lines(rs: ResultSet) -> list[str]:
    """The section's lines (none when no sample is flagged)."""
    rows = outlier_rows(rs)
    if rows.empty:
        return []
    excluded = bool((rs.manifest.get("validity") or {}).get("exclude_outliers"))
    fate = "left out of compare's and the gate's medians (validity.exclude_outliers)" if excluded else \
        "kept in the medians (validity.exclude_outliers is off): result may be unstable"
    more = f"; the first {SHOWN} shown" if len(rows) > SHOWN else ""
    return ["", f"**{len(rows)} outlier sample(s)** (|modified z| > {THRESHOLD:g} against their cell's median "
                f"absolute deviation, Iglewicz and Hoaglin), {fate}{more}:", "",
            rows.head(SHOWN).to_markdown(index=False, floatfmt=".4g"), ""]
