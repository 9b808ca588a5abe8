"""F4 for a set that compares builds: the seed's Figure 4, each build's change against the baseline build of the
same session, cell by cell.

The seed compared every read strategy with the unpatched build measured in the same session at the same thread
count, because its baselines moved between sessions (−t 6: 2.26–2.60 tok/s). Here each cell of a non-baseline
build is paired with the baseline build's cell equal in everything else (the other matrix values, cache condition,
target, step and test) by :func:`harness.results.pairing.across`, the rule ``harness gate --across build`` decides
on, and the estimate is the gate's (:func:`harness.analysis.ratios.ratio_of_medians` on the same samples in the
same order, same seed): the figure's ratios and intervals are the gate's to the digit.

Laid out for the seed's ~16 cells per panel: along the axis one group per combination of the other matrix values
(the strategies, in the experiment's order), within a group one point per value of the colour axis (the matrix
axis with the fewest values: threads), one panel per metric and test as in every F4. Words every group shares
(``cold``) are said once in the title instead of under each group.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.text import Text

from harness.analysis.ratios import ratio_of_medians
from harness.figures.base import FigureContext
from harness.figures.layout import fine_ratio_ticks, hide_overlapping, label_width_in, ratio_axis, stacked_label
from harness.figures.streaming import BUILD
from harness.results.cell import CellKey
from harness.results.pairing import across, pair_cells

# what a pair never crosses: the gate's (target, step, test, metric), a panel being one metric and test
BUILD_GROUP = ["panel", "target", "step", "cache"]
COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
           "tab:cyan", "tab:gray")
MIN_WIDTH_IN = 7.5  # room for the title's two lines when two or three groups are compared
NUMBER_KEYS = ("ratio", "low", "high", "p", "n_baseline", "n_candidate", "baseline")


def build_ratio_table(obs: pd.DataFrame, build_base: str) -> pd.DataFrame:
    """Per panel: each cell of a build other than ``build_base`` against the cell of ``build_base`` equal in
    everything else (as ``harness gate --across build`` pairs them), its ratio of medians with the 95 % CI and p.
    No row for the baseline build's own cells, a cell without a build (a step that does not vary over it), one
    whose partner was not measured, or a side without a finite value (the gate's "insufficient")."""
    rows = []
    if obs.empty:
        return pd.DataFrame()
    for pair in pair_cells(obs, BUILD_GROUP, across(BUILD, build_base)):
        base, cand = pair.base_rows["value"], pair.cand_rows["value"]
        if not (base.abs() < float("inf")).any() or not (cand.abs() < float("inf")).any():
            continue
        panel, target, step, cache = pair.group
        est = ratio_of_medians(base, cand)
        rows.append({"panel": panel, "target": target, "cache": cache, "step": step,
                     "variant": pair.cand_rows["variant"].iloc[0], "baseline": pair.base_rows["variant"].iloc[0],
                     "build": pair.cand.build, "cell": pair.cand, "index": pair.cand_rows["index"].min(),
                     "is_baseline": False, "ratio": est.ratio, "low": est.low, "high": est.high, "p": est.p,
                     "n_baseline": est.n_baseline, "n_candidate": est.n_candidate})
    return pd.DataFrame(rows)


def colour_axis(cells: Sequence[CellKey], matrix: Mapping[str, Sequence[object]]) -> str | None:
    """The matrix axis drawn as colour: of the axes other than ``build`` that take two or more values among
    ``cells``, the one with the fewest (threads beside eight strategies), the later one in the experiment on a tie;
    None when no other axis varies."""
    keys = [k for k in matrix if k != BUILD]
    counts = {k: len({dict(c.matrix)[k] for c in cells if k in dict(c.matrix)}) for k in keys}
    varying = [k for k in reversed(keys) if counts[k] >= 2]
    return min(varying, key=lambda k: counts[k]) if varying else None


@dataclass(frozen=True)
class Slot:
    """Where a cell is drawn: its group along the axis (label, sort key) and its value of the colour axis."""

    label: str
    order: tuple[Any, ...]
    colour: str


def _position(matrix: Mapping[str, Sequence[object]], key: str, value: str) -> int:
    values = [str(v) for v in matrix.get(key) or []]
    return values.index(value) if value in values else len(values)


def _slots(ratios: pd.DataFrame, colour: str | None, matrix: Mapping[str, Sequence[object]]) -> list[Slot]:
    """Each row's slot. A group is the cell without its colour value, and without its build when only one build
    is compared (the title names it); its target when the figure holds several, its step when a panel does (the
    decode panel's llama-server and the llama-bench panels' steps are told apart by the panels)."""
    several = {column: ratios[column].nunique() > 1 for column in ("target", "build")}
    several["step"] = bool((ratios.groupby("panel")["step"].nunique() > 1).any())
    caches = list(dict.fromkeys(ratios.sort_values("index")["cache"]))
    slots = []
    for row in ratios.itertuples():
        cell: CellKey = row.cell
        rest = [(k, v) for k, v in cell.matrix if k != colour and (k != BUILD or several["build"])]
        words = ([f"{row.target}:"] if several["target"] else []) + ([str(row.step)] if several["step"] else []) \
            + ([cell.engine] if cell.engine else []) + [f"{k}={v}" for k, v in rest] + ([cell.cache] if cell.cache
                                                                                       else [])
        order = (str(row.target), caches.index(row.cache), str(row.step), cell.engine,
                 tuple(_position(matrix, k, v) for k, v in rest), tuple(v for _, v in rest))
        slots.append(Slot(" ".join(words), order, dict(cell.matrix).get(colour or "", "")))
    return slots


def _shared_words(labels: list[str]) -> list[str]:
    """The words every group label has (``cold``), in their order; none when there is one group (it keeps them)."""
    if len(labels) < 2:
        return []
    common = set.intersection(*(set(label.split()) for label in labels))
    return [w for w in labels[0].split() if w in common]


def _tick_labels(labels: list[str]) -> tuple[list[str], str]:
    """Tick labels and the axis's label: when every group is one value of one matrix key (``strategy=off``), the
    values under the ticks and the key below them, as the seed's figure reads; else each label a word per line."""
    keys = {label.partition("=")[0] for label in labels if len(label.split()) == 1 and "=" in label}
    if len(keys) == 1 and all(len(label.split()) == 1 and "=" in label for label in labels):
        return [label.partition("=")[2] for label in labels], keys.pop()
    return [stacked_label(label) for label in labels], ""


def builds_figure(ratios: pd.DataFrame, context: FigureContext, runs: pd.DataFrame, build_base: str) -> list[Path]:
    """F4 of a build comparison: one panel per metric and test, a point per candidate cell at its ratio to the
    baseline build's cell, 95 % CI as whiskers, filled when the interval excludes ×1."""
    if ratios.empty:
        return []
    ratios = ratios[ratios["ratio"].map(lambda v: 0 < v < float("inf"))].reset_index(drop=True)
    if ratios.empty:
        return []
    colour = colour_axis(list(ratios["cell"]), context.matrix)
    slots = _slots(ratios, colour, context.matrix)
    groups = sorted({s.label: s.order for s in slots}.items(), key=lambda item: item[1])
    order = [label for label, _ in groups]
    shared = _shared_words(order)
    labels = [" ".join(w for w in label.split() if w not in shared) for label in order]
    colours = sorted({s.colour for s in slots}, key=lambda v: (_position(context.matrix, colour or "", v), v))
    spread = 0.7 / len(colours)  # the points of one group side by side, centred on its tick
    x = [order.index(s.label) + (colours.index(s.colour) - (len(colours) - 1) / 2) * spread for s in slots]
    shown = ratios.assign(x=x, colour=[s.colour for s in slots])
    panels = list(dict.fromkeys(shown["panel"]))
    stacked, xlabel = _tick_labels(labels)
    per_group = max(1.0, label_width_in(stacked, 7) + 0.25, 0.75 * len(colours))
    width = max(MIN_WIDTH_IN, 1.6 + per_group * len(order))
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 1.6 + 2.2 * len(panels)),
                             sharex=True, squeeze=False, layout="constrained")
    # the groups of one target and cache condition share nothing with the next: a dotted line between them
    breaks = [i - 0.5 for i in range(1, len(order)) if groups[i][1][:2] != groups[i - 1][1][:2]]
    numbers: list[Text] = []
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        sub = shown[shown["panel"] == panel]
        numbers += _draw_panel(ax, sub, colours, len(order))
        ax.set_title(panel, fontsize=9, loc="left")
        for at in breaks:
            ax.axvline(at, color="0.6", lw=0.8, ls=":")
    bottom = axes[-1, 0]
    bottom.set_xticks(range(len(order)), stacked, fontsize=7)
    bottom.set_xlim(-0.5, len(order) - 0.5)
    bottom.set_xlabel(xlabel, fontsize=8)
    builds = list(dict.fromkeys(ratios["build"]))
    fig.supylabel(f"ratio to {BUILD}={build_base} (median, 95 % CI)", fontsize=9)
    every = f"; every cell {' '.join(shared)}" if shared else ""
    title = [f"build {', '.join(builds)} vs build {build_base}, same session: each cell against the "
             f"{BUILD}={build_base} cell equal in everything else",
             f"(harness gate --across {BUILD} --baseline-value {build_base} pairs the same); ratio of medians, "
             f"bootstrap 95 % CI, filled: CI excludes ×1{every}"]
    fig.suptitle(_wrapped(title, fig.get_figwidth(), 9), fontsize=9)
    if colour is not None:
        handles = [Line2D([], [], marker="o", ls="", color=COLOURS[i % len(COLOURS)]) for i in range(len(colours))]
        fig.legend(handles, [f"{colour}={v}" for v in colours], loc="outside lower center", ncols=len(colours),
                   fontsize=8)
    hide_overlapping(fig, numbers, [t for ax in axes[:, 0] for t in (ax.title, *ax.get_xticklabels())])
    drawn = {"across": {"axis": BUILD, "baseline_value": build_base}, "colour": colour}
    drawn.update({panel: {row["variant"]: {k: row[k] for k in NUMBER_KEYS}
                          for _, row in shown[shown["panel"] == panel].iterrows()} for panel in panels})
    return context.save(fig, "change_vs_baseline", runs, drawn)


def _wrapped(lines: list[str], width_in: float, fontsize: float) -> str:
    """The title's lines, each broken to the figure's width (a comparison of two cells is a narrow figure)."""
    chars = max(40, int((width_in - 0.4) * 72 / (fontsize * 0.6)))
    return "\n".join(part for line in lines for part in textwrap.wrap(line, chars, break_on_hyphens=False))


def _draw_panel(ax: Any, sub: pd.DataFrame, colours: list[str], groups: int) -> list[Text]:
    """The panel's points, whiskers and ratio labels; returns the labels (thinned where they would overlap)."""
    for i in range(0, groups, 2):  # every other group shaded, so a point is read against its own group's tick
        ax.axvspan(i - 0.5, i + 0.5, color="0.96", lw=0, zorder=0)
    texts = []
    for _, row in sub.iterrows():
        tint = COLOURS[colours.index(row["colour"]) % len(COLOURS)]
        clear = row["low"] > 1 or row["high"] < 1  # the CI excludes ×1
        ax.errorbar([row["x"]], [row["ratio"]], yerr=[[row["ratio"] - row["low"]], [row["high"] - row["ratio"]]],
                    fmt="o", color=tint, mfc=tint if clear else "white", capsize=3, ms=5)
        texts.append(ax.annotate(f"×{row['ratio']:.3g}", (row["x"], row["ratio"]), xytext=(5, 0),
                                 textcoords="offset points", va="center", fontsize=6.5))
    ax.axhline(1.0, color="0.3", lw=0.8)
    ratio_axis(ax, list(sub["low"]) + list(sub["high"]) + list(sub["ratio"]))
    fine_ratio_ticks(ax)  # a build changes decode by percents: ×0.9 and ×1.1 ticked, not ×1 alone
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="y", which="major", color="0.9")
    return texts
