"""F4: each variant against the same-session baseline, as a ratio of medians with its bootstrap 95 % CI.

The estimate is :func:`harness.analysis.ratios.ratio_of_medians` over every observation of a variant (one per
request for llama-server decode, one per run and test for llama-bench) against those of the baseline cell under
the same cache condition on the same target: the numbers ``harness gate`` decides on, so the figure's whiskers
and the gate never disagree. Ratios are drawn on a log axis, where ×0.5 and ×2 are equally far from ×1 and a
×100 change does not flatten the ones that matter. The per-round mean ± sd table stays in report.md
(:func:`harness.figures.streaming.change_table`).

A set that compares builds (a ``build`` matrix axis of two or more values,
:func:`harness.figures.streaming.build_baseline`) is drawn as the seed's Figure 4 instead
(:mod:`harness.figures.change_builds`): each cell of a non-baseline build against the baseline build's cell equal
in everything else, as ``harness gate --across build`` pairs them. Any other set is drawn as it always was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from harness.analysis.ratios import ratio_of_medians
from harness.figures.base import FigureContext, register_figure
from harness.figures.change_builds import build_ratio_table, builds_figure
from harness.figures.layout import label_width_in, ratio_axis, stacked_label
from harness.figures.streaming import baseline_cell, build_baseline
from harness.results.cell import CellKey
from harness.results.metrics import METRICS
from harness.results.pairing import BaselineRule, pair_cells
from harness.results.samples import select
from harness.results.selection import usable_runs
from harness.results.tables import BENCH, REQUESTS, RUNS

# the metrics F4 draws, one panel per metric and test; the title of each (``{test}`` filled in)
F4_PANELS = {"decode_tps": "llama-server decode", "prefill_tps": "llama-server prefill",
             "bench_tps": "llama-bench {test}"}
F4_METRICS = ("decode_tps", "bench_tps")
# the runs columns F4 carries onto its rows: the cache condition it groups by, the plan index it orders by, the step
# kind a decode panel is titled by
F4_RUN_COLUMNS = {"cache": "cache", "index": "index", "step": "step_kind"}


def observations(runs: pd.DataFrame, table: Callable[[str], pd.DataFrame], params: list[str]) -> pd.DataFrame:
    """One row per observation of an ok run: panel, target, cache, variant, plan index, value. The rows are
    :func:`harness.results.samples.select`'s, the selection compare and gate use, keeping infinite values."""
    ok = usable_runs(runs)
    if ok.empty:
        return pd.DataFrame()
    several = ok["target"].nunique() > 1  # how cells are named on the axis, not which samples are drawn
    frames = []
    for name in F4_METRICS:
        metric = METRICS[name]
        rows = select(runs, table, params, metric, keep_inf=True, run_columns=F4_RUN_COLUMNS)
        if rows.empty:
            continue
        title = _panel_title(name, rows)
        frames.append(rows.assign(
            panel=[f"{title.format(test=t)} ({metric.unit})" for t in rows["test"]],
            variant=[_shown(cell, several) for cell in rows["cell"]]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _shown(cell: CellKey, several: bool) -> str:
    """A cell's name on the figure's axis: its label, after its target when the set has several."""
    return f"{cell.target}: {cell.label()}" if several else cell.label()


def _panel_title(name: str, rows: pd.DataFrame) -> str:
    """The panel's title; decode rows name the steps that produced them when another engine (bmoe, a declared
    engine) fills the requests table beside llama-server."""
    title = F4_PANELS[name]
    if name == "decode_tps":
        steps = sorted(set(rows["step_kind"].astype(str)))
        if steps and steps != ["llama-server"]:
            title = " / ".join(steps) + " decode"
    return title


def ratio_table(obs: pd.DataFrame, params: list[str], baseline: dict[str, Any], build_base: str | None = None
                ) -> pd.DataFrame:
    """Per panel and variant: ratio of medians vs the baseline variant of the same target and cache condition,
    its 95 % CI and Mann-Whitney p (``harness.analysis.ratios``); the baseline's own row has ratio 1. The baseline
    is the experiment's ``baseline`` matrix values with no engine label (:func:`f4_baseline`), paired by
    :func:`harness.results.pairing.pair_cells` like compare's and gate's. With ``build_base`` (a set that
    compares builds) the rows are :func:`build_ratio_table`'s instead."""
    if obs.empty:
        return pd.DataFrame()
    if build_base is not None:
        return build_ratio_table(obs, build_base)
    rows = []
    for pair in pair_cells(obs, ["panel", "target", "cache"], f4_baseline(baseline, params), with_self=True):
        panel, target, cache = pair.group
        cand = pair.cand_rows
        is_base = pair.cand == pair.base
        est = ratio_of_medians(pair.base_rows["value"], cand["value"])
        rows.append({"panel": panel, "target": target, "cache": cache, "variant": cand["variant"].iloc[0],
                     "index": cand["index"].min(), "is_baseline": is_base,
                     "ratio": 1.0 if is_base else est.ratio, "low": 1.0 if is_base else est.low,
                     "high": 1.0 if is_base else est.high, "p": est.p, "n_baseline": est.n_baseline,
                     "n_candidate": est.n_candidate})
    return pd.DataFrame(rows)


def f4_baseline(baseline: dict[str, Any], params: list[str]) -> BaselineRule:
    """F4's baseline rule: the experiment's ``baseline`` values under the cell's cache condition on its target,
    with no engine label, so a bmoe or declared-engine cell is drawn against llama.cpp's baseline (compare and
    gate, unlike F4, want the same engine label)."""
    def rule(cell: CellKey, cells: Sequence[CellKey]) -> CellKey | None:
        return CellKey.of({**baseline, "cache": cell.cache}, params, target=cell.target)

    return rule


def _variant_order(ratios: pd.DataFrame) -> list[str]:
    """Variants grouped by target and cache condition (each group has its own baseline), in plan order."""
    first_cache = ratios.groupby("cache", sort=False)["index"].min()
    ordered = ratios.assign(cache_at=ratios["cache"].map(first_cache)).sort_values(["target", "cache_at", "index"])
    return list(dict.fromkeys(ordered["variant"]))


def _draw_panel(ax: Any, sub: pd.DataFrame, position: dict[str, int]) -> None:
    for _, row in sub.iterrows():
        x = position[row["variant"]]
        if row["is_baseline"]:
            ax.plot([x], [1.0], "s", color="0.5", ms=6)
            ax.annotate("baseline", (x, 1.0), xytext=(7, 0), textcoords="offset points", va="center",
                        fontsize=7, color="0.4")
            continue
        clear = row["low"] > 1 or row["high"] < 1  # the CI excludes ×1
        ax.errorbar([x], [row["ratio"]], yerr=[[row["ratio"] - row["low"]], [row["high"] - row["ratio"]]],
                    fmt="o", color="tab:blue", mfc="tab:blue" if clear else "white", capsize=4, ms=6)
        ax.annotate(f"×{row['ratio']:.3g}", (x, row["ratio"]), xytext=(7, 0), textcoords="offset points",
                    va="center", fontsize=7)
    ax.axhline(1.0, color="0.3", lw=0.8)
    values = list(sub["low"]) + list(sub["high"]) + list(sub["ratio"])
    ratio_axis(ax, values)
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="y", which="major", color="0.9")


def change_vs_baseline_figure(ratios: pd.DataFrame, context: FigureContext, runs: pd.DataFrame) -> list[Path]:
    """F4: one panel per metric (stacked, sharing the variant axis), a point per variant at its ratio of medians
    with the 95 % CI as whiskers; filled when the CI excludes ×1."""
    ratios = ratios[ratios["ratio"].map(lambda v: 0 < v < float("inf"))] if not ratios.empty else ratios
    if ratios.empty:
        return []
    order = _variant_order(ratios)
    position = {v: i for i, v in enumerate(order)}
    panels = list(dict.fromkeys(ratios["panel"]))
    labels = [stacked_label(v) for v in order]
    per_variant = max(1.0, label_width_in(labels, 7) + 0.25)
    fig, axes = plt.subplots(len(panels), 1, figsize=(1.6 + per_variant * len(order), 1.2 + 2.2 * len(panels)),
                             sharex=True, squeeze=False, layout="constrained")
    # a dotted line between groups of variants (target, cache condition) that have their own baseline
    groups = ratios.drop_duplicates("variant").set_index("variant").loc[order, ["target", "cache"]]
    breaks = [i - 0.5 for i in range(1, len(order)) if tuple(groups.iloc[i]) != tuple(groups.iloc[i - 1])]
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        _draw_panel(ax, ratios[ratios["panel"] == panel], position)
        ax.set_title(panel, fontsize=9, loc="left")
        for x in breaks:
            ax.axvline(x, color="0.6", lw=0.8, ls=":")
    bottom = axes[-1, 0]
    bottom.set_xticks(range(len(order)), labels, fontsize=7)
    bottom.set_xlim(-0.5, len(order) - 0.5)
    fig.supylabel("ratio to the baseline (median, 95 % CI)", fontsize=9)
    fig.suptitle("change vs the same-session baseline: ratio of medians per variant, bootstrap 95 % CI "
                 "(filled: CI excludes ×1)", fontsize=9)
    numbers = {panel: {row["variant"]: {k: row[k] for k in ("ratio", "low", "high", "p", "n_baseline", "n_candidate")}
                       for _, row in ratios[ratios["panel"] == panel].iterrows()} for panel in panels}
    return context.save(fig, "change_vs_baseline", runs, numbers)


@register_figure("change_vs_baseline", needs=(RUNS,), needs_any=(REQUESTS, BENCH), group="streaming")
def _change_vs_baseline(context: FigureContext) -> list[Path]:
    runs = context.table(RUNS.name)
    build_base = build_baseline(context.matrix, context.baseline)
    obs = observations(runs, context.table, context.params)
    if build_base is not None:
        return builds_figure(build_ratio_table(obs, build_base) if not obs.empty else pd.DataFrame(), context,
                             runs, build_base)
    baseline = baseline_cell(runs, context.params, context.baseline)
    return change_vs_baseline_figure(ratio_table(obs, context.params, baseline), context, runs)
