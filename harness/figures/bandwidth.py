"""F5: decode speed against the bandwidth bound (docs/methodology.md, "the bandwidth bound").

When every decoded token has to stream its routed experts from the device, decode can go no faster than
the device delivers them: bound tok/s = device bytes/s available / device bytes read per token. Per request:

- bytes per token: ``decode_dev_read_bytes_per_token`` (the block-stat delta over the decode window / tokens);
- bytes/s available: the fio ladder measured on the same file and target, interpolated linearly over its
  iodepths at the queue depth decode achieved (``decode_dev_avg_inflight``; clamped to the ladder's ends), for
  the block-size class nearest (in log2) to decode's average read size (``decode_dev_avg_read_io_bytes``);
  without an fio ladder for the target, the highest device MB/s any decode window reached on it (the
  device's own decode-time throughput: a bound each request's own MB/s could not give, since that divided by
  its bytes per token is its own tok/s again);
- efficiency = measured tok/s / bound tok/s; per cell, the ratio of the medians over its requests.

Cold requests only when there are any: warm ones read next to nothing per token and have no finite bound.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.figures.base import MB, FigureContext, register_figure
from harness.figures.streaming import cold_if_any, ok_requests
from harness.results.selection import usable_runs
from harness.results.tables import FIO, REQUESTS, RUNS

FROM_FIO = "fio ladder at the achieved queue depth"
FROM_DECODE = "highest decode-window device MB/s on the target (no fio ladder)"


def fio_curves(runs: pd.DataFrame, fio: pd.DataFrame) -> pd.DataFrame:
    """Mean read bytes/s per target, block size and iodepth over ok fio runs (cold ones when there are any)."""
    needed = {"bs_bytes", "iodepth", "read_bw_bytes_per_s"}
    if fio.empty or not needed <= set(fio.columns):
        return pd.DataFrame(columns=["target", "bs_bytes", "iodepth", "bps"])
    ok = fio.merge(usable_runs(runs)[["run_id", "cache"]], on="run_id")
    ok = ok[ok["cache"] == "cold"] if (ok["cache"] == "cold").any() else ok
    curves = ok.groupby(["target", "bs_bytes", "iodepth"])["read_bw_bytes_per_s"].mean()
    return curves.rename("bps").reset_index()


def throughput_at(curve: pd.DataFrame, io_bytes: float, inflight: float) -> float:
    """Bytes/s of the block-size class nearest ``io_bytes`` (log2), interpolated at ``inflight`` over iodepth."""
    sizes = curve["bs_bytes"].unique()
    if pd.notna(io_bytes) and io_bytes > 0:
        size = sizes[np.argmin(np.abs(np.log2(sizes / io_bytes)))]
    else:
        size = sizes.max()
    points = curve[curve["bs_bytes"] == size].sort_values("iodepth")
    return float(np.interp(inflight, points["iodepth"], points["bps"]))


def bound_table(runs: pd.DataFrame, requests: pd.DataFrame, fio: pd.DataFrame, params: list[str]) -> pd.DataFrame:
    """One row per request with a finite bound: cell, measured and bound tok/s, efficiency, where the bound
    comes from."""
    data = ok_requests(runs, requests, params)
    needed = {"decode_dev_read_bytes_per_token", "decode_dev_avg_inflight"}
    if data.empty or not needed <= set(data.columns):
        return pd.DataFrame()
    data, _ = cold_if_any(data)
    data = data[data["decode_dev_read_bytes_per_token"] > 0].copy()
    if "decode_dev_avg_read_io_bytes" not in data:
        data["decode_dev_avg_read_io_bytes"] = np.nan
    curves = fio_curves(runs, fio)
    parts = []
    for target, group in data.groupby("target", sort=False):
        curve = curves[curves["target"] == target]
        if curve.empty:
            bps = pd.Series(group["decode_dev_read_bytes_per_s"].max(), index=group.index)
            source = FROM_DECODE
        else:
            bps = pd.Series([throughput_at(curve, io, q) for io, q in
                             zip(group["decode_dev_avg_read_io_bytes"], group["decode_dev_avg_inflight"], strict=True)],
                            index=group.index)
            source = FROM_FIO
        parts.append(group.assign(available_bps=bps, source=source))
    out = pd.concat(parts) if parts else pd.DataFrame()
    if out.empty:
        return out
    out["bound_tps"] = out["available_bps"] / out["decode_dev_read_bytes_per_token"]
    out["efficiency"] = out["decode_tps"] / out["bound_tps"]
    return out[np.isfinite(out["bound_tps"]) & (out["bound_tps"] > 0)]


def cell_efficiency(bounds: pd.DataFrame) -> pd.DataFrame:
    """Per cell: requests, median measured and bound tok/s, efficiency = their ratio, the bound's source."""
    grouped = bounds.groupby("cell", sort=False)
    out = pd.DataFrame({"requests": grouped.size(), "measured_tps": grouped["decode_tps"].median(),
                        "bound_tps": grouped["bound_tps"].median(),
                        "available_mbps": grouped["available_bps"].median() / MB,
                        "source": grouped["source"].first()})
    out["efficiency"] = out["measured_tps"] / out["bound_tps"]
    return out


def bandwidth_bound_figure(bounds: pd.DataFrame, context: FigureContext, runs: pd.DataFrame) -> list[Path]:
    """Measured tok/s against the bound, log-log, with y = x; the legend gives each cell's efficiency."""
    if bounds.empty:
        return []
    cells = cell_efficiency(bounds)
    fig, ax = plt.subplots(figsize=(8, 6), layout="constrained")
    for cell, group in bounds.groupby("cell", sort=False):
        ax.scatter(group["bound_tps"], group["decode_tps"], s=20, alpha=0.8,
                   label=f"{cell}: {cells.loc[cell, 'efficiency'] * 100:.0f} %")
    values = pd.concat([bounds["bound_tps"], bounds["decode_tps"]])
    low, high = values[values > 0].min() / 2, values.max() * 2
    ax.plot([low, high], [low, high], color="0.4", lw=0.8, ls="--", label="y = x (at the bound)")
    ax.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high))
    ax.set_xlabel("bound tok/s = available device bytes/s / bytes read per token")
    ax.set_ylabel("measured decode tok/s")
    sources = " and ".join(dict.fromkeys(bounds["source"]))
    ax.set_title(f"decode vs the bandwidth bound\navailable bytes/s: {sources}", fontsize=9)
    fig.legend(fontsize=7, title="cell: efficiency (median measured / median bound)", title_fontsize=7,
               loc="outside lower center", ncols=2)
    numbers = {cell: {"efficiency": row["efficiency"], "measured_tps": row["measured_tps"],
                      "bound_tps": row["bound_tps"], "available_mbps": row["available_mbps"],
                      "requests": row["requests"], "source": row["source"]} for cell, row in cells.iterrows()}
    return context.save(fig, "bandwidth_bound", runs, numbers)


@register_figure("bandwidth_bound", needs=(RUNS, REQUESTS), group="streaming")
def _bandwidth_bound(context: FigureContext) -> list[Path]:
    runs = context.table(RUNS.name)
    bounds = bound_table(runs, context.table(REQUESTS.name), context.table(FIO.name), context.params)
    return bandwidth_bound_figure(bounds, context, runs)
