"""Figures about expert streaming (docs/methodology.md section 7, F1/F3) from ``requests`` and ``fio``, and the
request and baseline helpers F4 (:mod:`harness.figures.change`), F5 (:mod:`harness.figures.bandwidth`) and
report.md share.

F1: decode tok/s against device MB/s during decode, one point per request, with Pearson r within each cell (the seed
article found r = 0.90 over 8 requests of one setting). F3: decode-time device throughput placed against the fio QD
ladder measured on the same file. report.md's change table: each cell against the same-session baseline cell, mean ±
sd over interleaved rounds; in a set that compares builds (:func:`build_baseline`), each cell against the baseline
build's cell equal in everything else, the pairing of ``harness gate --across build``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from harness.analysis.stats import change_vs_baseline, pearson
from harness.figures.base import MB, FigureContext, register_figure, save
from harness.parsers.fio import ordered_jobs
from harness.results.selection import usable_runs
from harness.results.tables import FIO, REQUESTS, RUNS
from harness.results.variants import variant_label


def cell_label(row: pd.Series, params: list[str]) -> str:
    return variant_label(row, params)


def ok_requests(runs: pd.DataFrame, requests: pd.DataFrame, params: list[str]) -> pd.DataFrame:
    if requests.empty or not {"decode_tps", "decode_dev_read_bytes_per_s"} <= set(requests):
        return pd.DataFrame()  # an engine that reports no device bytes has no point on these figures
    # step and step_label: another engine's requests are another cell (harness.results.variants)
    cols = ["run_id", "round", *[c for c in ("engine", "step_label") if c in runs], *[p for p in params if p in runs]]
    ok = usable_runs(runs)[cols]
    data = requests.drop(columns=[c for c in cols[1:] if c in requests]).merge(ok, on="run_id", how="inner")
    data = data[data["decode_tps"].notna() & data["decode_dev_read_bytes_per_s"].notna()]
    if data.empty:
        return data
    return data.assign(cell=data.apply(cell_label, axis=1, params=params),
                       decode_dev_mbps=data["decode_dev_read_bytes_per_s"] / MB)


def cold_if_any(data: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Cold requests when there are any (warm ones sit at ~0 MB/s and say nothing about streaming), and which."""
    if (data["cache"] == "cold").any():
        return data[data["cache"] == "cold"], "cold requests"
    return data, "requests"


def decode_vs_device(runs: pd.DataFrame, requests: pd.DataFrame, params: list[str], out_dir: Path,
                     set_id: str, settings: str) -> list[Path]:
    """F1: one point per request; colour = cell with its own r and n (the seed's r = 0.90 was within one
    setting). No r over all requests: it pools cells that differ in kind (harness.figures.correlation_report)."""
    data = ok_requests(runs, requests, params)
    if data.empty:
        return []
    data, which = cold_if_any(data)
    fig, ax = plt.subplots(figsize=(8, 5.5), layout="constrained")
    per_cell: dict[str, dict[str, float]] = {}
    for cell, group in data.groupby("cell", sort=False):
        within = pearson(group["decode_dev_mbps"], group["decode_tps"])
        label = f"{cell} (r = {within.r:.2f}, n = {within.n})" if within else f"{cell} (n = {len(group)})"
        per_cell[cell] = {"r": within.r, "p": within.p, "n": within.n, "low": within.low, "high": within.high} \
            if within else {"n": len(group)}
        ax.scatter(group["decode_dev_mbps"], group["decode_tps"], s=18, label=label, alpha=0.8)
    ax.set_xlabel("device read MB/s during decode")
    ax.set_ylabel("decode tok/s")
    ax.set_title(f"decode speed vs device throughput, {which}\nPearson r within each cell (legend)", fontsize=9)
    fig.legend(fontsize=7, title="cell (r within the cell, its requests)", title_fontsize=7,
               loc="outside lower center", ncols=2)
    numbers = {"n": len(data), "which": which, "cells": per_cell}
    return save(fig, out_dir, "decode_vs_device", set_id, settings, runs, numbers)


def decode_vs_fio(runs: pd.DataFrame, requests: pd.DataFrame, fio: pd.DataFrame, params: list[str],
                  out_dir: Path, set_id: str, settings: str) -> list[Path]:
    """F3: decode-time device MB/s per cell (mean ± sd over requests) next to the fio ladder bars; horizontal,
    so the long cell names read without rotation."""
    data = ok_requests(runs, requests, params)
    if data.empty or fio.empty or "read_bw_bytes_per_s" not in fio:  # no fio job read: no ladder to place
        return []
    ok_fio = fio.merge(usable_runs(runs)[["run_id", "cache"]], on="run_id")
    ok_fio = ok_fio[ok_fio["cache"] == "cold"] if (ok_fio["cache"] == "cold").any() else ok_fio
    ladder = (ok_fio.assign(mbps=ok_fio["read_bw_bytes_per_s"] / MB).groupby("job_name")["mbps"]
              .agg(["mean", "std"]))
    ladder = ladder.loc[ordered_jobs(ladder.index)]
    decode = data.groupby("cell", sort=False)["decode_dev_mbps"].agg(["mean", "std"])
    labels = [f"fio {j}" for j in ladder.index] + [f"decode {c}" for c in decode.index]
    means = list(ladder["mean"]) + list(decode["mean"])
    sds = [0 if pd.isna(s) else s for s in list(ladder["std"]) + list(decode["std"])]
    colors = ["0.6"] * len(ladder) + ["tab:blue"] * len(decode)
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.32 * len(labels)), layout="constrained")
    bars = ax.barh(range(len(labels)), means, xerr=sds, color=colors, capsize=3)
    ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=4)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, max(m + s for m, s in zip(means, sds, strict=True)) * 1.15)
    ax.set_xlabel("read MB/s (mean ± sd)")
    ax.set_title("device throughput while decoding vs fio on the same file (grey: fio ladder)", fontsize=9)
    numbers = {"fio_mbps": dict(zip(ladder.index, ladder["mean"], strict=True)),
               "decode_mbps": dict(zip(decode.index, decode["mean"], strict=True))}
    return save(fig, out_dir, "decode_vs_fio", set_id, settings, runs, numbers)


def baseline_cell(runs: pd.DataFrame, params: list[str], chosen: dict[str, Any] | None) -> dict[str, Any]:
    """The experiment's ``baseline`` if given, else the first matrix cell in plan order."""
    if chosen:
        return dict(chosen)
    first = runs.sort_values("index").iloc[0]
    return {p: first[p] for p in params}


BUILD = "build"  # the matrix axis naming which of the experiment's builds a cell ran (docs/methodology.md section 8)


def build_baseline(matrix: Mapping[str, Sequence[object]] | None, chosen: Mapping[str, Any] | None = None
                   ) -> str | None:
    """The baseline build of a set that compares builds, i.e. whose matrix has a ``build`` axis of two or more
    values: the experiment's ``baseline: {build: ...}`` when it names one of them, else the axis's first value
    (what ``harness gate --across build`` takes without ``--baseline-value``). None for any other set, which is
    compared with its ``baseline`` cell as it always was."""
    values = [str(v) for v in (matrix or {}).get(BUILD) or []]
    if len(values) < 2:
        return None
    named = str((chosen or {}).get(BUILD, ""))
    return named if named in values else values[0]


def change_table(runs: pd.DataFrame, requests: pd.DataFrame, bench: pd.DataFrame, params: list[str],
                 baseline: dict[str, Any], build_base: str | None = None) -> pd.DataFrame:
    """F4's numbers: per metric, cache condition and cell: mean, sd, change vs baseline ± sd. With ``build_base``
    (:func:`build_baseline`) each cell's baseline is the cell of build ``build_base`` equal in every other matrix
    value, per round; a cell without a build (a step whose ``over:`` leaves it out) has none."""
    ok = usable_runs(runs)[["run_id", "round", "cache", *[p for p in params if p in runs]]]
    frames = []
    if not requests.empty and "decode_tps" in requests:
        req = requests[["run_id", "decode_tps"]].merge(ok, on="run_id")
        frames.append(("decode tok/s (server)", req, "decode_tps"))
    if not bench.empty and "avg_tps" in bench:
        b = bench[["run_id", "test", "avg_tps"]].merge(ok, on="run_id")
        for test, group in b.groupby("test", sort=False):
            frames.append((f"{test} tok/s (bench)", group, "avg_tps"))
    out = []
    for metric, frame, value in frames:
        for cache, group in frame.groupby("cache", sort=False):
            cells = [p for p in params if p in group]
            if build_base is not None and BUILD in cells:
                table = _across_builds(group, value, cells, build_base)
            else:
                table = change_vs_baseline(group, value, cells, baseline)
            if not table.empty:
                out.append(table.assign(metric=metric, cache=cache))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def _across_builds(group: pd.DataFrame, value: str, cells: list[str], build_base: str) -> pd.DataFrame:
    """:func:`change_vs_baseline` per combination of the other matrix values, against its ``build_base`` cell:
    rows come per combination (its baseline build first, as the experiment orders the cells)."""
    others = [c for c in cells if c != BUILD]
    built = group[BUILD].notna()
    parts = [sub for _, sub in group[built].groupby(others, dropna=False, sort=False)] if others else [group[built]]
    parts += [group[~built]] if (~built).any() else []  # no build, no baseline build: change left empty
    tables = [change_vs_baseline(sub, value, cells, {BUILD: build_base}) for sub in parts if not sub.empty]
    tables = [t.assign(is_baseline=t[BUILD].astype(str) == build_base).sort_values("is_baseline", ascending=False,
                                                                                  kind="stable")
              for t in tables if not t.empty]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


@register_figure("decode_vs_device", needs=(RUNS, REQUESTS), group="streaming")
def _decode_vs_device(context: FigureContext) -> list[Path]:
    return decode_vs_device(context.table(RUNS.name), context.table(REQUESTS.name), context.params,
                            context.out_dir, context.set_id, context.settings)


@register_figure("decode_vs_fio", needs=(RUNS, REQUESTS, FIO), group="streaming")
def _decode_vs_fio(context: FigureContext) -> list[Path]:
    return decode_vs_fio(context.table(RUNS.name), context.table(REQUESTS.name), context.table(FIO.name),
                         context.params, context.out_dir, context.set_id, context.settings)
