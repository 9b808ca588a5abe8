"""Figures about the storage itself (docs/methodology.md section 7): the fio QD ladder and the read step's block-stat
accounting (the run timeline is :mod:`harness.figures.timeline`). Each function returns the paths it wrote; each
is registered (``harness.figures.base``) with the tables it needs.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from harness.figures.base import MB, FigureContext, register_figure, save
from harness.parsers.fio import ordered_jobs
from harness.results.selection import usable_runs
from harness.results.tables import FIO, READS, RUNS


def fio_ladder(runs: pd.DataFrame, fio: pd.DataFrame, out_dir: Path, set_id: str, settings: str) -> list[Path]:
    """Read MB/s per fio job (the QD ladder), mean ± sd over runs, one bar per cache condition."""
    if fio.empty or "read_bw_bytes_per_s" not in fio:  # no job read (write-only or unified_rw_reporting jobs)
        return []
    data = fio.merge(usable_runs(runs)[["run_id", "cache"]], on="run_id", how="inner")
    if data.empty:
        return []
    data["read_mbps"] = data["read_bw_bytes_per_s"] / MB
    stats = data.groupby(["target", "job_name", "cache"])["read_mbps"].agg(["mean", "std", "count"]).reset_index()
    jobs = ordered_jobs(stats["job_name"])
    targets = list(dict.fromkeys(stats["target"]))
    caches = list(dict.fromkeys(stats["cache"]))
    fig, axes = plt.subplots(1, len(targets), figsize=(max(6, 1.5 * len(jobs)) * len(targets), 4), squeeze=False,
                             layout="constrained")
    width = 0.8 / max(1, len(caches))
    for ax, target in zip(axes[0], targets, strict=True):
        for i, cache in enumerate(caches):
            sub = stats[(stats["target"] == target) & (stats["cache"] == cache)].set_index("job_name")
            xs = [j + (i - (len(caches) - 1) / 2) * width for j in range(len(jobs))]
            means = [sub["mean"].get(job, float("nan")) for job in jobs]
            sds = [sub["std"].get(job, float("nan")) for job in jobs]
            bars = ax.bar(xs, means, width, yerr=[0 if pd.isna(s) else s for s in sds], capsize=3, label=cache)
            ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
        ax.set_xticks(range(len(jobs)), [job.replace("-", "-\n", 1) for job in jobs], fontsize=8)
        ax.set_ylabel("read MB/s (mean ± sd)")
        ax.set_title(f"fio ladder on {target}")
        ax.set_ylim(0, (stats["mean"] + stats["std"].fillna(0)).max() * 1.2)
        ax.legend(title="cache", fontsize=8, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    numbers = {f"{row['target']} {row['cache']} {row['job_name']}": {"mbps": row["mean"], "sd": row["std"],
                                                                     "runs": row["count"]}
               for row in stats.to_dict("records")}
    return save(fig, out_dir, "fio_ladder", set_id, settings, runs[runs["run_id"].isin(data["run_id"])], numbers)


def read_accounting(runs: pd.DataFrame, out_dir: Path, set_id: str, settings: str) -> list[Path]:
    """Bytes the device delivered per read run, relative to the file size: ~1 cold, ~0 warm."""
    reads = runs[(runs["step"] == "read") & runs.get("dev_read_bytes", pd.Series(dtype=float)).notna()]
    if reads.empty or "cache_files_bytes" not in reads:
        return []
    reads = reads.assign(ratio=reads["dev_read_bytes"] / reads["cache_files_bytes"],
                         label=reads["run_id"].str.split("-").str[1:].str.join("-"))
    fig, ax = plt.subplots(figsize=(max(6, 0.3 * len(reads)), 3.6), layout="constrained")
    colors = reads["cache"].map({"cold": "tab:blue", "warm": "tab:orange"}).fillna("0.5")
    ax.bar(range(len(reads)), reads["ratio"], color=colors)
    ax.axhline(1.0, color="0.3", lw=0.8, ls="--")
    ax.set_xticks(range(len(reads)), reads["label"], rotation=90, fontsize=6)  # upright boxes never overlap
    ax.set_ylabel("device read bytes / file bytes")
    ax.set_title("block-stat accounting: cold ≈ 1, warm ≈ 0")
    numbers = dict(zip(reads["run_id"], reads["ratio"], strict=True))
    return save(fig, out_dir, "read_accounting", set_id, settings, reads, numbers)


@register_figure("fio_ladder", needs=(RUNS, FIO))
def _fio_ladder(context: FigureContext) -> list[Path]:
    return fio_ladder(context.table(RUNS.name), context.table(FIO.name), context.out_dir, context.set_id,
                      context.settings)


@register_figure("read_accounting", needs=(RUNS, READS))
def _read_accounting(context: FigureContext) -> list[Path]:
    return read_accounting(context.table(RUNS.name), context.out_dir, context.set_id, context.settings)
