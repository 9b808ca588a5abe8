"""F2: where the step's threads spend their time, from the threads collector's samples of /proc/PID/task/TID/stat.

Per cell (step and variant, ``harness.results.variants``), and for llama-server only inside the decode windows
of its requests (first token to last), each thread's fraction of samples in each state class:

- running: ``R``;
- I/O wait: ``D`` (uninterruptible sleep; for an engine streaming from disk that is waiting on a page-cache
  read: the ``wchan`` column says where, e.g. ``folio_wait_bit_common``);
- sleeping: ``S`` and every other state (``I``, ``T``, ``Z`` ...).

Shown as the range over the threads of the cell (min-max, median marked), plus the fraction of sample instants
at which at least one thread of the process was in D: how much of the time the process as a whole waited on the
device. A threads table holds millions of rows; everything here is grouped and counted by pandas.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.figures.base import FigureContext, register_figure
from harness.results.selection import usable_runs
from harness.results.tables import REQUESTS, RUNS, THREADS
from harness.results.variants import variants

CLASSES = ("running (R)", "I/O wait (D)", "sleeping (S, other)")


def _in_windows(run: np.ndarray, t_ns: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """Which samples (run code, time) fall inside one of their run's windows (run code, start, end)."""
    samples = pd.DataFrame({"run": run, "t_ns": t_ns, "i": np.arange(len(run))}).sort_values("t_ns")
    found = pd.merge_asof(samples, windows.sort_values("start"), left_on="t_ns", right_on="start", by="run",
                          direction="backward")
    inside = np.zeros(len(run), dtype=bool)
    inside[found["i"].to_numpy()] = (found["t_ns"] <= found["end"]).to_numpy()
    return inside


def _decode_windows(requests: pd.DataFrame, run_names: pd.Index) -> pd.DataFrame:
    """Request windows (first token to end) by run code; empty when the set has no requests with times."""
    if requests.empty or not {"run_id", "t_first_token_ns", "t_end_ns"} <= set(requests.columns):
        return pd.DataFrame(columns=["run", "start", "end"], dtype="int64")
    rows = requests[requests["t_first_token_ns"].notna() & requests["t_end_ns"].notna()]
    run = run_names.get_indexer(rows["run_id"])
    found = run >= 0
    return pd.DataFrame({"run": run[found], "start": rows["t_first_token_ns"].to_numpy("int64")[found],
                         "end": rows["t_end_ns"].to_numpy("int64")[found]})


def _group_names(ok: pd.DataFrame, params: list[str], windowed: set[str]) -> dict[str, str]:
    """Run id -> '<step> · <variant>', or '<step> decode · <variant>' for a run whose samples are windowed."""
    steps = ok["step_label"].fillna(ok["step"]).astype(str)
    return {run: f"{step}{' decode' if run in windowed else ''} · {label}"
            for run, step, label in zip(ok["run_id"], steps, variants(ok, params), strict=True)}


def thread_state_table(runs: pd.DataFrame, threads: pd.DataFrame, requests: pd.DataFrame,
                       params: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per thread: group, run, tid and its fraction of samples per class; per group: the fraction of sample
    instants with at least one thread in D, instants, threads). Groups are '<step> · <variant>', with 'decode'
    after the step when a run's samples were limited to its request windows. Works on integer codes: string
    columns of millions of rows are factorized once."""
    ok = usable_runs(runs).sort_values("index")
    if ok.empty or threads.empty:
        return pd.DataFrame(), pd.DataFrame()
    run_code, run_names = pd.factorize(threads["run_id"])
    run_names = pd.Index(run_names)
    state_code, state_names = pd.factorize(threads["state"])
    cls_of_state = np.array([{"R": 0, "D": 1}.get(state, 2) for state in state_names])  # index into CLASSES
    windows = _decode_windows(requests, run_names)
    windowed = np.isin(run_code, windows["run"].unique())
    keep = np.isin(run_code, run_names.get_indexer(ok["run_id"]))
    keep[windowed] &= _in_windows(run_code[windowed], threads["t_ns"].to_numpy()[windowed], windows)
    names = _group_names(ok, params, set(run_names[windows["run"].unique()]))
    order = list(dict.fromkeys(names[r] for r in ok["run_id"] if r in run_names))
    group_of_run = np.array([order.index(names[r]) if r in names else -1 for r in run_names])
    samples = pd.DataFrame({"group": group_of_run[run_code[keep]], "run": run_code[keep],
                            "t_ns": threads["t_ns"].to_numpy()[keep], "tid": threads["tid"].to_numpy()[keep],
                            "cls": cls_of_state[state_code[keep]]})
    if samples.empty:
        return pd.DataFrame(), pd.DataFrame()
    counts = samples.groupby(["group", "run", "tid", "cls"]).size().unstack("cls", fill_value=0)
    counts = counts.reindex(columns=range(len(CLASSES)), fill_value=0)
    per_thread = counts.div(counts.sum(axis=1), axis=0).set_axis(list(CLASSES), axis=1).reset_index()
    in_d = samples.assign(in_d=samples["cls"] == 1).groupby(["group", "run", "t_ns"])["in_d"].max()
    per_group = pd.DataFrame({"any_d": in_d.groupby("group").mean(), "instants": in_d.groupby("group").size(),
                              "threads": per_thread.groupby("group").size()})
    labels = pd.Index(order)
    per_thread["group"] = labels[per_thread["group"]]
    return per_thread, per_group.set_axis(labels[per_group.index]).rename_axis("group")


def thread_range(per_thread: pd.DataFrame) -> pd.DataFrame:
    """Per group and class: min, median and max over threads."""
    stats = per_thread.groupby("group", observed=True)[list(CLASSES)].agg(["min", "median", "max"])
    return stats


def thread_states_figure(per_thread: pd.DataFrame, per_group: pd.DataFrame, context: FigureContext,
                         runs: pd.DataFrame) -> list[Path]:
    """Four panels sharing the cells: one per state class (range over threads, median marked), then the
    fraction of instants with at least one thread in D."""
    if per_group.empty:
        return []
    stats = thread_range(per_thread)
    groups = list(per_group.index)
    ys = np.arange(len(groups))
    fig, axes = plt.subplots(1, 4, figsize=(12, 1.4 + 0.3 * len(groups)), sharey=True, layout="constrained")
    colors = ("tab:green", "tab:red", "0.5")
    for ax, cls, color in zip(axes[:3], CLASSES, colors, strict=True):
        low, mid, high = (stats.loc[groups, (cls, k)].to_numpy() for k in ("min", "median", "max"))
        ax.hlines(ys, low, high, color=color, lw=3, alpha=0.6)
        ax.plot(mid, ys, "|", color="black", ms=9, mew=2)
        ax.set_title(f"{cls}\nper thread: min-max, | median", fontsize=8)
    axes[3].barh(ys, per_group["any_d"].to_numpy(), color="tab:red", alpha=0.8)
    axes[3].set_title("at least one thread in D\n(fraction of sample instants)", fontsize=8)
    for ax in axes:
        ax.set_xlim(0, 1)
        ax.set_xticks([0, 0.5, 1], ["0 %", "50 %", "100 %"], fontsize=7)
        ax.grid(axis="x", color="0.9")
    axes[0].set_yticks(ys, groups, fontsize=7)
    axes[0].invert_yaxis()
    fig.suptitle("thread states per cell (llama-server: decode windows only), fraction of samples", fontsize=9)
    numbers = {g: {"any_d": per_group.loc[g, "any_d"], "threads": per_group.loc[g, "threads"],
                   "instants": per_group.loc[g, "instants"],
                   **{cls: {k: stats.loc[g, (cls, k)] for k in ("min", "median", "max")} for cls in CLASSES}}
               for g in groups}
    return context.save(fig, "thread_states", runs, numbers)


@register_figure("thread_states", needs=(RUNS, THREADS), group="threads")
def _thread_states(context: FigureContext) -> list[Path]:
    runs = context.table(RUNS.name)
    per_thread, per_group = thread_state_table(runs, context.table(THREADS.name), context.table(REQUESTS.name),
                                               context.params)
    return thread_states_figure(per_thread, per_group, context, runs)
