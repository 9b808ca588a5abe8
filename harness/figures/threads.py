"""F2: where the step's threads spend their time, from the threads collector's samples of /proc/PID/task/TID/stat.

Per cell (step and variant, ``harness.results.variants``), and for llama-server only inside the decode windows
of its requests (first token to last), each thread's fraction of samples in each state class:

- running: ``R`` (on a CPU or runnable);
- I/O wait: ``D`` (uninterruptible sleep; for an engine streaming from disk that is waiting on a page-cache
  read), or, where the sampler gave a wait class (format v2, which reads the state letter only every ~100 ms and
  writes ``-`` for "off CPU" in between), the classes ``fault_io`` and ``read_io``;
- sleeping: ``S`` and every other state (``I``, ``T``, ``Z``, ``-`` ...).

Shown as the range over the threads of the cell that WORKED in its windows (min-max, median marked), each row
saying how many of how many threads that is: a llama-server has a dozen HTTP and pool threads parked in futex or
poll through the decode, and ranged over with its two compute threads they had stretched every range down to 0 %
and put the median there, on the axis. Which threads worked is the report's choice: by the kernel counters where
the run has them (``harness.figures.waits.counted_threads``: on CPU, runnable or in I/O for 5 % of a window), else
by the samples as the report's sampled table takes them (``harness.analysis.waits.sampled_worked``: running, in
I/O or GPU waits for 5 % of its samples). A thread is one (pid, tid) where the table has a pid per row. A cell
where no thread worked says so instead of drawing 0-0. Beside the ranges, the fraction of sample instants at which
at least one thread of the process (any thread) was in I/O wait: how much of the time the process as a whole
waited on the device. Where the table has wait classes (``class``, sampler v2), a last panel stacks the shares of
the working threads' off-CPU samples by class (fault_io, read_io, futex, gpu, idle, other; "unknown" where the
class is missing: v1 data or an unreadable syscall file) -- what the compute threads waited in, as in the seed's
figure, not the parked threads' epoll. A threads table holds millions of rows;
everything here is grouped and counted by pandas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.analysis.waits import SAMPLED, sampled_worked
from harness.figures.base import FigureContext, register_figure
from harness.figures.waits import counted_threads
from harness.results.selection import usable_runs
from harness.results.tables import REQUESTS, RUNS, THREAD_COUNTERS, THREADS
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


KEY = ["group", "run", "pid", "tid"]  # one thread: (pid, tid) within its run; pid -1 where the table has none


def thread_state_table(runs: pd.DataFrame, threads: pd.DataFrame, requests: pd.DataFrame, params: list[str],
                       counters: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per thread: group, run, pid, tid, its fraction of samples per class, whether it ``worked`` in the run's
    windows and ``worked_by`` what: :func:`_working`; per group: the fraction of sample instants with at least one
    thread in D (over all the threads), instants, threads, threads_worked, runs, working_by, and the working
    threads' off-CPU samples by class). Groups are '<step> · <variant>', with 'decode' after the step when a run's
    samples were limited to its request windows. ``counters``: the thread_counters table (None or empty: the
    samples decide which threads worked). Works on integer codes: string columns of millions of rows are
    factorized once."""
    ok = usable_runs(runs).sort_values("index")
    if ok.empty or threads.empty:
        return pd.DataFrame(), pd.DataFrame()
    run_code, run_names = pd.factorize(threads["run_id"])
    run_names = pd.Index(run_names)
    windows = _decode_windows(requests, run_names)
    windowed = np.isin(run_code, windows["run"].unique())
    keep = np.isin(run_code, run_names.get_indexer(ok["run_id"]))
    keep[windowed] &= _in_windows(run_code[windowed], threads["t_ns"].to_numpy()[windowed], windows)
    names = _group_names(ok, params, set(run_names[windows["run"].unique()]))
    order = list(dict.fromkeys(names[r] for r in ok["run_id"] if r in run_names))
    group_of_run = np.array([order.index(names[r]) if r in names else -1 for r in run_names])
    samples = _samples(threads, keep, group_of_run[run_code], run_code)
    if samples.empty:
        return pd.DataFrame(), pd.DataFrame()
    counts = samples.groupby(KEY + ["cls"]).size().unstack("cls", fill_value=0)
    counts = counts.reindex(columns=range(len(CLASSES)), fill_value=0)
    per_thread = counts.div(counts.sum(axis=1), axis=0).set_axis(list(CLASSES), axis=1)
    counted = counted_threads(counters, requests) if counters is not None and not counters.empty else pd.DataFrame()
    per_thread["worked"], per_thread["worked_by"] = _working(samples, per_thread.index, counted, run_names)
    per_thread = per_thread.reset_index()
    per_group = _per_group(samples, per_thread).join(_off_cpu_shares(samples, per_thread))
    labels = pd.Index(order)
    per_thread["group"] = labels[per_thread["group"]]
    return per_thread, per_group.set_axis(labels[per_group.index]).rename_axis("group")


def _samples(threads: pd.DataFrame, keep: np.ndarray, group: np.ndarray, run: np.ndarray) -> pd.DataFrame:
    """The kept samples as integer columns: group, run, pid, tid, t_ns, class, wait class."""
    pid = (threads["pid"].fillna(-1).to_numpy("int64") if "pid" in threads else np.full(len(threads), -1))
    return pd.DataFrame({"group": group[keep], "run": run[keep], "pid": pid[keep],
                         "tid": threads["tid"].to_numpy("int64")[keep], "t_ns": threads["t_ns"].to_numpy()[keep],
                         "cls": _state_class(threads)[keep], "wait": _wait_class(threads)[keep]})


def _working(samples: pd.DataFrame, keys: pd.MultiIndex, counted: pd.DataFrame,
             run_names: pd.Index) -> tuple[np.ndarray, np.ndarray]:
    """Per thread (``keys``: group, run, pid, tid), did it work in its run's windows, and by what. By the counters
    in a run they counted (:func:`harness.figures.waits.counted_threads`, the report's choice: on CPU, runnable or
    in I/O for 5 % of at least one window; matched on the tid, which is unique machine-wide while the threads
    live); else by the samples, as the report's sampled table chooses them
    (:func:`harness.analysis.waits.sampled_worked`: running, in I/O or GPU waits for 5 % of its samples)."""
    label = np.where(samples["cls"].to_numpy() == 0, 0, samples["wait"].to_numpy() + 1)  # index into SAMPLED
    counts = samples[KEY].assign(label=label).groupby(KEY + ["label"]).size().unstack("label", fill_value=0)
    shares = counts.div(counts.sum(axis=1), axis=0).set_axis([SAMPLED[i] for i in counts.columns], axis=1)
    worked = sampled_worked(shares).reindex(keys, fill_value=False).to_numpy(bool)
    by_counters = np.zeros(len(keys), dtype=bool)
    if not counted.empty:
        code = run_names.get_indexer(counted["run_id"])
        by_tid = counted.assign(run=code).groupby(["run", "tid"])["worked"].any()
        run = keys.get_level_values("run").to_numpy()
        by_counters = np.isin(run, code[code >= 0])
        counters_say = by_tid.reindex(pd.MultiIndex.from_arrays([run, keys.get_level_values("tid")]),
                                      fill_value=False).to_numpy(bool)
        worked = np.where(by_counters, counters_say, worked)
    return worked, np.where(by_counters, "counters", "samples")


def _per_group(samples: pd.DataFrame, per_thread: pd.DataFrame) -> pd.DataFrame:
    """Per group: the fraction of sample instants with at least one thread (of all of them) in D, the instants,
    the threads, those that worked, the runs, and what decided which worked (``counters``, ``samples`` or both)."""
    in_d = samples.assign(in_d=samples["cls"] == 1).groupby(["group", "run", "t_ns"])["in_d"].max()
    by_group = per_thread.groupby("group")
    return pd.DataFrame({"any_d": in_d.groupby("group").mean(), "instants": in_d.groupby("group").size(),
                         "threads": by_group.size(), "threads_worked": by_group["worked"].sum(),
                         "runs": by_group["run"].nunique(),
                         "working_by": by_group["worked_by"].agg(lambda by: ", ".join(sorted(set(by))))})


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


def _off_cpu_shares(samples: pd.DataFrame, per_thread: pd.DataFrame) -> pd.DataFrame:
    """Per group: each wait class's share of the off-CPU samples of the threads that worked (columns WAIT_CLASSES,
    NaN without any), and whether any sample had a class at all (``classified``)."""
    off = samples[samples["cls"] != 0].groupby(KEY + ["wait"]).size()
    working = per_thread.set_index(KEY)["worked"]
    off = off[working.reindex(off.index.droplevel("wait")).to_numpy(bool)]
    counts = off.groupby(["group", "wait"]).sum().unstack("wait", fill_value=0)
    counts = counts.reindex(columns=range(len(WAIT_CLASSES)), fill_value=0)
    shares = counts.div(counts.sum(axis=1), axis=0).set_axis(list(WAIT_CLASSES), axis=1)
    shares["classified"] = shares["unknown"] < 1
    return shares


def thread_range(per_thread: pd.DataFrame) -> pd.DataFrame:
    """Per group and class: min, median and max over the threads that worked (all of them in a table without
    ``worked``); every group, NaN where no thread worked."""
    working = per_thread[per_thread["worked"]] if "worked" in per_thread else per_thread
    stats = working.groupby("group", observed=True)[list(CLASSES)].agg(["min", "median", "max"])
    return stats.reindex(per_thread["group"].unique())


def _row_label(group: str, cell: pd.Series) -> str:
    """The cell's name, and under it how many of its threads the ranges cover and what chose them."""
    runs = f"{cell['runs']} runs, " if cell["runs"] > 1 else ""
    return f"{group}\n{cell['threads_worked']} of {cell['threads']} threads worked ({runs}by {cell['working_by']})"


def thread_states_figure(per_thread: pd.DataFrame, per_group: pd.DataFrame, context: FigureContext,
                         runs: pd.DataFrame) -> list[Path]:
    """Four panels sharing the cells: one per state class (range over the threads that worked, median marked),
    then the fraction of instants with at least one thread (of all) in I/O wait; a fifth, where the samples have
    wait classes: the working threads' off-CPU samples by class, stacked -- the compute threads' waits, as in the
    seed's figure, not the parked HTTP and pool threads'."""
    if per_group.empty:
        return []
    stats = thread_range(per_thread)
    groups = list(per_group.index)
    ys = np.arange(len(groups))
    classified = bool(per_group["classified"].eq(True).any())  # NaN: a cell without off-CPU samples
    panels = 5 if classified else 4
    fig, axes = plt.subplots(1, panels, figsize=(3 * panels, 2.0 + 0.42 * len(groups)), sharey=True,
                             layout="constrained")
    for ax, cls, color in zip(axes[:3], CLASSES, ("tab:green", "tab:red", "0.5"), strict=True):
        low, mid, high = (stats.loc[groups, (cls, k)].to_numpy(float) for k in ("min", "median", "max"))
        ax.hlines(ys, low, high, color=color, lw=3, alpha=0.6)
        # the ends as dots: a range of one value (min = max), which draws no line, still shows under its median;
        # none clipped, and the axis reaches past 0 and 1: a mark at either end stays off the spines
        for end in (low, high):
            ax.plot(end, ys, "o", color=color, ms=4, clip_on=False, zorder=2, linestyle="none")
        ax.plot(mid, ys, "|", color="black", ms=9, mew=2, clip_on=False, zorder=3, linestyle="none")
        for y in ys[np.isnan(mid)]:
            ax.text(0.0, y, "no thread worked", fontsize=6, color="0.4", style="italic", va="center")
        ax.set_title(f"{cls}\nper working thread: min-max, | median", fontsize=8)
    axes[3].barh(ys, per_group["any_d"].to_numpy(), color="tab:red", alpha=0.8)
    axes[3].set_title("at least one thread (of all) in I/O wait\n(fraction of sample instants)", fontsize=8)
    if classified:
        _wait_panel(fig, axes[4], per_group.loc[groups], ys)
    for ax in axes:
        ax.set_xlim(-0.04, 1.04)
        ax.set_xticks([0, 0.5, 1], ["0 %", "50 %", "100 %"], fontsize=7)
        ax.grid(axis="x", color="0.9")
    axes[0].set_yticks(ys, [_row_label(g, per_group.loc[g]) for g in groups], fontsize=7)
    axes[0].invert_yaxis()
    fig.suptitle("thread states per cell (llama-server: decode windows only), fraction of samples\n"
                 "ranges over the threads that worked: by the kernel counters where the run has them (on CPU, "
                 "runnable or in I/O for 5 % of a window), else by the samples (running or in I/O for 5 % of them)",
                 fontsize=8)
    return context.save(fig, "thread_states", runs, _numbers(per_group, stats, classified))


def _numbers(per_group: pd.DataFrame, stats: pd.DataFrame, classified: bool) -> dict[str, Any]:
    """The figure's numbers per cell, for its metadata: the ranges over the working threads (None where none
    worked), how many threads worked of how many and what chose them, the I/O-wait instants, the class shares."""
    return {g: {**{k: per_group.loc[g, k] for k in ("any_d", "threads", "threads_worked", "runs", "working_by",
                                                      "instants")},
                **{cls: {k: stats.loc[g, (cls, k)] for k in ("min", "median", "max")} for cls in CLASSES},
                **({"off_cpu_by_class": {w: per_group.loc[g, w] for w in WAIT_CLASSES}} if classified else {})}
            for g in per_group.index}


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
                                               context.params, context.table(THREAD_COUNTERS.name))
    return thread_states_figure(per_thread, per_group, context, runs)
