"""F6: the campaign's timeline on each target, every signal on the runs' monotonic clock, runs shaded and labelled.

Panels, each only where its data is (a panel without data is left out, never drawn empty):

- decode tok/s: per streamed token 1000 / gap_ms, a rolling median over 8 tokens within each request (``tokens``);
- device read MB/s and average in-flight I/O (``blockstat``);
- power per rail (W), temperatures (°C), GPU and EMC clocks (MHz) (``telemetry``: tegrastats, jtop, thermal,
  power, powermetrics).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.text import Annotation

from harness.figures.base import MB, FigureContext, register_figure
from harness.figures.layout import hide_overlapping
from harness.results.tables import BLOCKSTAT, RUNS, TELEMETRY, TOKENS

TOKEN_WINDOW = 8  # tokens in the rolling median: one slow token shows, one fast token does not dominate
MAX_SERIES = 6  # lines per telemetry panel: the busiest rails, the hottest zones


@dataclass(frozen=True)
class Panel:
    name: str
    ylabel: str
    series: dict[str, tuple[pd.Series, pd.Series]]  # label -> (t_ns, value)
    log: bool = False


def _broken(t: pd.Series, values: pd.Series, gap_ns: float = 2e9) -> tuple[np.ndarray, np.ndarray]:
    """The series with a NaN after every pause longer than ``gap_ns``, so no line is drawn across the time
    between runs."""
    order = np.argsort(t.to_numpy(), kind="stable")
    t_sorted, v_sorted = t.to_numpy()[order].astype(float), values.to_numpy()[order].astype(float)
    cut = np.flatnonzero(np.diff(t_sorted) > gap_ns) + 1
    return np.insert(t_sorted, cut, np.nan), np.insert(v_sorted, cut, np.nan)


def _series(frame: pd.DataFrame, columns: list[str], scale: float = 1.0) -> dict[str, tuple[pd.Series, pd.Series]]:
    out = {}
    for column in columns:
        rows = frame[frame[column].notna()] if column in frame else frame.iloc[0:0]
        if not rows.empty and pd.to_numeric(rows[column], errors="coerce").abs().max() > 0:
            out[column] = (rows["t_ns"], pd.to_numeric(rows[column], errors="coerce") * scale)
    return out


def _busiest(frame: pd.DataFrame, columns: list[str]) -> list[str]:
    """The MAX_SERIES columns with the highest median, so a panel stays readable on a board with 12 zones."""
    numeric = frame[columns].apply(pd.to_numeric, errors="coerce")
    return list(numeric.median().dropna().sort_values(ascending=False).index[:MAX_SERIES])


def token_panel(tokens: pd.DataFrame) -> list[Panel]:
    if tokens.empty or not {"gap_ms", "t_ns", "request"} <= set(tokens.columns):
        return []
    data = tokens[tokens["gap_ms"] > 0].sort_values(["run_id", "request", "token"])
    if data.empty:
        return []
    tps = (1000 / data["gap_ms"]).groupby([data["run_id"], data["request"]]).rolling(TOKEN_WINDOW, min_periods=1)
    smooth = tps.median().reset_index(level=[0, 1], drop=True).reindex(data.index)
    return [Panel("tok/s", f"decode tok/s\n(median of {TOKEN_WINDOW} tokens)", {"tok/s": (data["t_ns"], smooth)},
                  log=True)]


def blockstat_panels(blockstat: pd.DataFrame) -> list[Panel]:
    bs = blockstat[blockstat["read_bytes_per_s"].notna()] if "read_bytes_per_s" in blockstat else blockstat.iloc[0:0]
    panels = []
    if not bs.empty:
        panels.append(Panel("device MB/s", "device read MB/s", {"MB/s": (bs["t_ns"], bs["read_bytes_per_s"] / MB)}))
    if "avg_inflight" in bs and bs["avg_inflight"].notna().any():
        panels.append(Panel("in-flight", "avg in-flight I/O", {"in-flight": (bs["t_ns"], bs["avg_inflight"])}))
    return panels


def telemetry_panels(telemetry: pd.DataFrame) -> list[Panel]:
    if telemetry.empty or "t_ns" not in telemetry:
        return []
    data = telemetry[telemetry["t_ns"].notna()]
    power = [c for c in data.columns if c.startswith("power_") and c.endswith("_mw")
             and not c.endswith(("_avg_mw", "_max_mw"))]
    temps = [c for c in data.columns if c.startswith("temp_") and c.endswith("_c")]
    clocks = [c for c in ("gpu_freq_mhz", "emc_freq_mhz") if c in data.columns]
    panels = [Panel("power", "power (W)", _series(data, _busiest(data, power), 1e-3)) if power else None,
              Panel("temperature", "temperature (°C)", _series(data, _busiest(data, temps))) if temps else None,
              Panel("clocks", "clock (MHz)", _series(data, clocks)) if clocks else None]
    return [p for p in panels if p is not None and p.series]


def _shade_runs(axes: list[Axes], runs: pd.DataFrame, t0: int) -> list[Annotation]:
    labels, spans = [], []
    for _, run in runs.iterrows():
        start, end = (run["step_start_mono_ns"] - t0) / 1e9, (run["step_end_mono_ns"] - t0) / 1e9
        spans.append((start, end - start))
        text = axes[0].annotate(f"{run['index']} {run['step_label']} {run['cache']}", ((start + end) / 2, 0.98),
                                xycoords=("data", "axes fraction"), fontsize=6, rotation=90, ha="center",
                                va="top", color="0.3")
        text.set_in_layout(False)
        labels.append(text)
    shades = ["0.85" if k % 2 else "0.93" for k in range(len(spans))]
    for ax in axes:  # one collection per panel: an axvspan per run per panel costs seconds to lay out
        ax.broken_barh(spans, (0, 1), transform=ax.get_xaxis_transform(), facecolors=shades, zorder=0, lw=0)
    return labels


def target_timeline(target: str, runs: pd.DataFrame, table: Callable[[str], pd.DataFrame],
                    context: FigureContext) -> list[Path]:
    def of_target(name: str) -> pd.DataFrame:
        frame = table(name)
        return frame[frame["target"] == target] if "target" in frame else frame.iloc[0:0]

    rs = runs[(runs["target"] == target) & runs["step_start_mono_ns"].notna()].sort_values("step_start_mono_ns")
    panels = (token_panel(of_target(TOKENS.name)) + blockstat_panels(of_target(BLOCKSTAT.name))
              + telemetry_panels(of_target(TELEMETRY.name)))
    if rs.empty or not panels:
        return []
    t0 = rs["step_start_mono_ns"].min()
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 0.8 + 1.7 * len(panels)), sharex=True, squeeze=False,
                             layout="constrained")
    column: list[Axes] = list(axes[:, 0])
    for ax, panel in zip(column, panels, strict=True):
        for label, (t, values) in panel.series.items():
            style = {"lw": 0, "marker": ".", "ms": 2} if panel.log else {"lw": 0.6}
            x, y = _broken(t, values)
            # rasterized: 10 ms samples over a campaign are ~10^5 points, which would make the SVG megabytes
            ax.plot((x - t0) / 1e9, y, label=label, rasterized=True, **style)
        if panel.log:
            ax.set_yscale("log")
        ax.set_ylabel(panel.ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        if len(panel.series) > 1:
            ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.005, 1), borderaxespad=0)
    column[-1].set_xlabel("seconds since the first step started")
    column[0].set_title(f"run timeline on {target} (runs shaded: plan index, step, cache)", fontsize=9)
    labels = _shade_runs(column, rs, t0)
    hidden = hide_overlapping(fig, labels)
    numbers = {"runs": len(rs), "run_labels_hidden": hidden, "panels": [p.name for p in panels],
               **{f"max {p.name}": max(float(v.max()) for _, v in p.series.values()) for p in panels}}
    return context.save(fig, f"timeline_{target}", rs, numbers)


@register_figure("timeline", needs=(RUNS, BLOCKSTAT), group="timeline")
def _timeline(context: FigureContext) -> list[Path]:
    runs, blockstat = context.table(RUNS.name), context.table(BLOCKSTAT.name)
    figures: list[Path] = []
    for target in dict.fromkeys(blockstat["target"]):
        figures += target_timeline(target, runs, context.table, context)
    return figures
