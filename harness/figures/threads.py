"""F2: where the step's threads spend their time, from the threads collector's samples of /proc/PID/task/TID/stat.

Per cell (step and variant, ``harness.results.variants``), and for llama-server only inside the decode windows
of its requests (first token to last), each thread's fraction of samples in each state class:

- running: ``R`` (on a CPU or runnable);
- I/O wait: ``D`` (uninterruptible sleep; for an engine streaming from disk that is waiting on a page-cache
  read), or, where the sampler gave a wait class (format v2, which reads the state letter only every ~100 ms and
  writes ``-`` for "off CPU" in between), the classes ``fault_io`` and ``read_io``;
- sleeping: ``S`` and every other state (``I``, ``T``, ``Z``, ``-`` ...).

Shown as the range over the threads of the cell (min-max, median marked), plus the fraction of sample instants
at which at least one thread of the process was in I/O wait: how much of the time the process as a whole waited on
the device. Where the table has wait classes (``class``, sampler v2), a last panel stacks the shares of the cell's
off-CPU samples by class (fault_io, read_io, futex, gpu, idle, other; "unknown" where the class is missing: v1 data
or an unreadable syscall file). A threads table holds millions of rows; everything here is grouped and counted by
pandas.
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
WAIT_CLASSES = ("fault_io", "read_io", "futex", "gpu", "idle", "other", "unknown")  # off CPU, sampler v2
IO_CLASSES = ("fault_io", "read_io")
WAIT_COLORS = ("tab:red", "tab:orange", "tab:blue", "tab:purple", "0.75", "tab:brown", "0.9")


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
    cls = _state_class(threads)
    windows = _decode_windows(requests, run_names)
    windowed = np.isin(run_code, windows["run"].unique())
    keep = np.isin(run_code, run_names.get_indexer(ok["run_id"]))
    keep[windowed] &= _in_windows(run_code[windowed], threads["t_ns"].to_numpy()[windowed], windows)
    names = _group_names(ok, params, set(run_names[windows["run"].unique()]))
    order = list(dict.fromkeys(names[r] for r in ok["run_id"] if r in run_names))
    group_of_run = np.array([order.index(names[r]) if r in names else -1 for r in run_names])
    samples = pd.DataFrame({"group": group_of_run[run_code[keep]], "run": run_code[keep],
                            "t_ns": threads["t_ns"].to_numpy()[keep], "tid": threads["tid"].to_numpy()[keep],
                            "cls": cls[keep], "wait": _wait_class(threads)[keep]})
    if samples.empty:
        return pd.DataFrame(), pd.DataFrame()
    counts = samples.groupby(["group", "run", "tid", "cls"]).size().unstack("cls", fill_value=0)
    counts = counts.reindex(columns=range(len(CLASSES)), fill_value=0)
    per_thread = counts.div(counts.sum(axis=1), axis=0).set_axis(list(CLASSES), axis=1).reset_index()
    in_d = samples.assign(in_d=samples["cls"] == 1).groupby(["group", "run", "t_ns"])["in_d"].max()
    per_group = pd.DataFrame({"any_d": in_d.groupby("group").mean(), "instants": in_d.groupby("group").size(),
                              "threads": per_thread.groupby("group").size()})
    per_group = per_group.join(_off_cpu_shares(samples))
    labels = pd.Index(order)
    per_thread["group"] = labels[per_thread["group"]]
    return per_thread, per_group.set_axis(labels[per_group.index]).rename_axis("group")


def _state_class(threads: pd.DataFrame) -> np.ndarray:
    """Index into CLASSES per sample: R running; D, or an I/O wait class, I/O wait; anything else sleeping."""
    state_code, state_names = pd.factorize(threads["state"])
    cls = np.array([{"R": 0, "D": 1}.get(state, 2) for state in state_names], dtype=np.int8)[state_code]
    if "class" in threads:
        cls = np.where((cls == 2) & threads["class"].isin(IO_CLASSES).to_numpy(), 1, cls)
    return cls


def _wait_class(threads: pd.DataFrame) -> np.ndarray:
    """Index into WAIT_CLASSES per sample (off-CPU samples only mean anything): unknown without a class."""
    if "class" not in threads:
        return np.full(len(threads), len(WAIT_CLASSES) - 1, dtype=np.int8)
    codes = pd.Categorical(threads["class"], categories=WAIT_CLASSES[:-1]).codes
    return np.where(codes < 0, len(WAIT_CLASSES) - 1, codes).astype(np.int8)


def _off_cpu_shares(samples: pd.DataFrame) -> pd.DataFrame:
    """Per group: each wait class's share of the off-CPU samples (columns WAIT_CLASSES, NaN without any), and
    whether any sample had a class at all (``classified``)."""
    off = samples[samples["cls"] != 0]
    counts = off.groupby(["group", "wait"]).size().unstack("wait", fill_value=0)
    counts = counts.reindex(columns=range(len(WAIT_CLASSES)), fill_value=0)
    shares = counts.div(counts.sum(axis=1), axis=0).set_axis(list(WAIT_CLASSES), axis=1)
    shares["classified"] = shares["unknown"] < 1
    return shares


def thread_range(per_thread: pd.DataFrame) -> pd.DataFrame:
    """Per group and class: min, median and max over threads."""
    stats = per_thread.groupby("group", observed=True)[list(CLASSES)].agg(["min", "median", "max"])
    return stats


def thread_states_figure(per_thread: pd.DataFrame, per_group: pd.DataFrame, context: FigureContext,
                         runs: pd.DataFrame) -> list[Path]:
    """Four panels sharing the cells: one per state class (range over threads, median marked), then the
    fraction of instants with at least one thread in I/O wait; a fifth, where the samples have wait classes: the
    off-CPU samples' shares by class, stacked."""
    if per_group.empty:
        return []
    stats = thread_range(per_thread)
    groups = list(per_group.index)
    ys = np.arange(len(groups))
    classified = bool(per_group["classified"].eq(True).any())  # NaN: a cell without off-CPU samples
    panels = 5 if classified else 4
    fig, axes = plt.subplots(1, panels, figsize=(3 * panels, 1.8 + 0.3 * len(groups)), sharey=True,
                             layout="constrained")
    colors = ("tab:green", "tab:red", "0.5")
    for ax, cls, color in zip(axes[:3], CLASSES, colors, strict=True):
        low, mid, high = (stats.loc[groups, (cls, k)].to_numpy() for k in ("min", "median", "max"))
        ax.hlines(ys, low, high, color=color, lw=3, alpha=0.6)
        ax.plot(mid, ys, "|", color="black", ms=9, mew=2)
        ax.set_title(f"{cls}\nper thread: min-max, | median", fontsize=8)
    axes[3].barh(ys, per_group["any_d"].to_numpy(), color="tab:red", alpha=0.8)
    axes[3].set_title("at least one thread in I/O wait\n(fraction of sample instants)", fontsize=8)
    if classified:
        _wait_panel(fig, axes[4], per_group.loc[groups], ys)
    for ax in axes:
        ax.set_xlim(0, 1)
        ax.set_xticks([0, 0.5, 1], ["0 %", "50 %", "100 %"], fontsize=7)
        ax.grid(axis="x", color="0.9")
    axes[0].set_yticks(ys, groups, fontsize=7)
    axes[0].invert_yaxis()
    fig.suptitle("thread states per cell (llama-server: decode windows only), fraction of samples", fontsize=9)
    numbers = {g: {"any_d": per_group.loc[g, "any_d"], "threads": per_group.loc[g, "threads"],
                   "instants": per_group.loc[g, "instants"],
                   **{cls: {k: stats.loc[g, (cls, k)] for k in ("min", "median", "max")} for cls in CLASSES},
                   **({"off_cpu_by_class": {w: per_group.loc[g, w] for w in WAIT_CLASSES}} if classified else {})}
               for g in groups}
    return context.save(fig, "thread_states", runs, numbers)


def _wait_panel(fig: plt.Figure, ax: plt.Axes, per_group: pd.DataFrame, ys: np.ndarray) -> None:
    """Stacked shares of the off-CPU samples by wait class; the legend goes below the panels, not over them."""
    left = np.zeros(len(ys))
    for name, color in zip(WAIT_CLASSES, WAIT_COLORS, strict=True):
        share = per_group[name].fillna(0).to_numpy()
        ax.barh(ys, share, left=left, color=color, label=name, edgecolor="white", linewidth=0.5)
        left += share
    ax.set_title("off-CPU samples by wait class\n(syscall of each sampled thread)", fontsize=8)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=len(WAIT_CLASSES), fontsize=7,
               frameon=False)


@register_figure("thread_states", needs=(RUNS, THREADS), group="threads")
def _thread_states(context: FigureContext) -> list[Path]:
    runs = context.table(RUNS.name)
    per_thread, per_group = thread_state_table(runs, context.table(THREADS.name), context.table(REQUESTS.name),
                                               context.params)
    return thread_states_figure(per_thread, per_group, context, runs)
