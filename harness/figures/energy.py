"""Energy per decoded token against decode tok/s, one marker per cell (the median of its request windows), the
requests behind it faint; drawn only where the set has energy (harness/campaign/energy.py). Where it has none,
report.md's Energy section says why (no sensor, with the sources tried)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from harness.figures.base import FigureContext, register_figure
from harness.results.selection import usable_runs
from harness.results.tables import ENERGY, REQUESTS, RUNS
from harness.results.variants import variant_label

KEYS = ["run_id", "target", "request"]


def decode_energy_points(runs: pd.DataFrame, energy: pd.DataFrame, requests: pd.DataFrame,
                         params: list[str]) -> pd.DataFrame:
    """One row per measured decode window with energy: its cell (``variant``), J/token and decode tok/s."""
    if energy.empty or runs.empty or not {"decode_tps", *KEYS} <= set(requests) or "j_per_token" not in energy:
        return pd.DataFrame()
    decode = energy[(energy["phase"] == "decode") & energy["j_per_token"].notna()]
    ok = usable_runs(runs)
    if decode.empty or ok.empty:
        return pd.DataFrame()
    cells = pd.DataFrame({"run_id": ok["run_id"], "target": ok["target"],
                          "variant": ok.apply(variant_label, axis=1, params=params)})
    data = decode.merge(requests[[*KEYS, "decode_tps"]], on=KEYS).merge(cells, on=["run_id", "target"])
    return data[data["decode_tps"].notna()]


def cell_medians(points: pd.DataFrame) -> pd.DataFrame:
    grouped = points.groupby("variant", sort=False)
    return pd.DataFrame({"decode_tps": grouped["decode_tps"].median(), "j_per_token": grouped["j_per_token"].median(),
                         "windows": grouped.size(), "rail": grouped["rail"].first()})


def energy_figure(points: pd.DataFrame, context: FigureContext, runs: pd.DataFrame) -> list[Path]:
    if points.empty:
        return []
    cells = cell_medians(points)
    fig, ax = plt.subplots(figsize=(8, 6), layout="constrained")
    markers = "osD^vP*X<>"
    for i, (cell, row) in enumerate(cells.iterrows()):
        mine = points[points["variant"] == cell]
        line = ax.scatter(mine["decode_tps"], mine["j_per_token"], s=12, alpha=0.3, marker=markers[i % len(markers)])
        ax.scatter([row["decode_tps"]], [row["j_per_token"]], s=80, marker=markers[i % len(markers)],
                   color=line.get_facecolor()[0], alpha=1.0, edgecolor="black",
                   label=f"{cell}: {row['j_per_token']:.3g} J/token at {row['decode_tps']:.3g} tok/s")
    ax.set_xlabel("decode tok/s")
    ax.set_ylabel("energy per decoded token (J)")
    rails = ", ".join(dict.fromkeys(f"{source} {rail}" for source, rail in zip(points["source"], points["rail"],
                                                                                strict=True)))
    ax.set_title(f"energy per decoded token vs decode speed (rail: {rails})\nlarge: the cell's median; small: "
                 "its requests", fontsize=9)
    # log-log: cells differ by orders of magnitude (cold streaming vs warm), and at a constant power J/token is
    # 1/tok/s, a straight line
    ax.set(xscale="log", yscale="log")
    fig.legend(fontsize=7, loc="outside lower center", ncols=2)
    numbers = {str(cell): {"decode_tps": row["decode_tps"], "j_per_token": row["j_per_token"],
                           "windows": row["windows"], "rail": row["rail"]} for cell, row in cells.iterrows()}
    return context.save(fig, "energy_per_token", runs, numbers)


@register_figure("energy_per_token", needs=(RUNS, ENERGY, REQUESTS), group="streaming")
def _energy_per_token(context: FigureContext) -> list[Path]:
    runs = context.table(RUNS.name)
    points = decode_energy_points(runs, context.table(ENERGY.name), context.table(REQUESTS.name), context.params)
    return energy_figure(points, context, runs)
