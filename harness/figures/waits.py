"""Where decode time goes: per run and window, the share of wall time per class (run, runqueue, io_wait, thrashing,
reclaim, other_sleep; harness/analysis/waits.py) averaged over the step's threads, from the ``thread_counters``
table; and beside it the threads sampler's shares of the same windows (running, and off CPU per wait class), with
the disagreement of the two where they measure the same thing, on the same threads over the same spans. The
windows are the decode windows of llama-server requests (first token to end) where the requests table has them,
else the whole step (its first to its last read or sample). report.md shows all three tables, per cell."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from harness.analysis.waits import (
    CLASSES,
    COUNTERS,
    MATCHING,
    SAMPLED,
    paired_shares,
    sampled_shares,
    wait_shares,
    worked,
)
from harness.results.loader import ResultSet
from harness.results.selection import usable_runs
from harness.results.tables import REQUESTS, RUNS, THREAD_COUNTERS, THREADS
from harness.results.variants import variants


def _windows(run_id: str, reads: pd.DataFrame, requests: pd.DataFrame) -> list[tuple[str, int, int]]:
    """(label, t0, t1) of each decode window of the run's requests, or the whole step."""
    if not requests.empty and {"t_first_token_ns", "t_end_ns"} <= set(requests.columns):
        mine = requests[(requests["run_id"] == run_id) & requests["t_first_token_ns"].notna()
                        & requests["t_end_ns"].notna()]
        if not mine.empty:
            return [("decode", int(a), int(b)) for a, b in zip(mine["t_first_token_ns"], mine["t_end_ns"], strict=True)]
    return [("step", int(reads["t_ns"].min()), int(reads["t_ns"].max()))]


def _thread_reads(counters: pd.DataFrame) -> pd.DataFrame:
    """The per-thread rows of the thread_counters table (it also holds the process's and the cgroup's)."""
    return counters[counters["kind"] == "thread"] if "kind" in counters else counters


def _clock_ticks(reads: pd.DataFrame) -> int:
    """The run's USER_HZ (for blkio_ticks), as the counters recorded it; 100 where they did not."""
    known = reads["clock_ticks_per_s"].dropna()
    return int(known.iloc[0]) if not known.empty else 100


SAMPLE_COLUMNS = ("run_id", "t_ns", "pid", "tid", "state", "class")  # what the sampled shares read


def sample_columns(threads: pd.DataFrame) -> pd.DataFrame:
    """The threads table with only the columns the sampled shares read: every mask and group of millions of rows
    then takes a few numeric and short string columns, not comm as well (the take of arrow strings was a second of
    the report)."""
    return threads[[c for c in SAMPLE_COLUMNS if c in threads]]


# the report asks for the same tables' counted threads three times (the counters' table, the paired comparison,
# F2); one computation is most of a second per 10 k counter reads. Kept by identity: a ResultSet hands out the same
# frame for a table every time, and the result is never modified by its readers.
_counted: list[tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]] = []


def counted_threads(counters: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """:func:`count_threads`, computed once for the last (counters, requests) pair asked for."""
    if _counted and _counted[0][0] is counters and _counted[0][1] is requests:
        return _counted[0][2]
    counted = count_threads(counters, requests)
    _counted[:] = [(counters, requests, counted)]
    return counted


def count_threads(counters: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """One row per run, window and thread the counters read at least twice inside the window: run_id, window (its
    label), w (its index in the run), tid, the thread's shares over it (:func:`harness.analysis.waits.wait_shares`)
    and ``worked`` (:func:`harness.analysis.waits.worked`). The one choice of a window's working threads: the
    counters' table, the paired comparison and F2 (harness/figures/threads.py) all take it from here."""
    out = []
    thread_reads = _thread_reads(counters)
    columns = [c for c in ("t_ns", *COUNTERS) if c in thread_reads]  # the rows as dicts: only what wait_shares reads
    for run_id, reads in thread_reads.groupby("run_id", sort=False):
        ticks = _clock_ticks(reads)
        by_thread: dict[int, list[dict[str, Any]]] = {}
        for tid, row in zip(reads["tid"].to_numpy(), reads[columns].to_dict("records"), strict=True):
            by_thread.setdefault(int(tid), []).append(row)
        for w, (label, t0, t1) in enumerate(_windows(str(run_id), reads, requests)):
            for tid, rows in sorted(by_thread.items()):
                shares = wait_shares(rows, t0, t1, ticks)
                if shares is not None:
                    out.append({"run_id": run_id, "window": label, "w": w, "tid": tid, **shares,
                                "worked": worked(shares)})
    return pd.DataFrame(out)


def window_shares(counters: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """One row per run and window: each class's share of wall time averaged over the threads with two reads
    inside it that worked in it (:func:`counted_threads`), the threads counted and the idle ones, the overlap the
    counters claimed beyond the off-CPU time, the counters seen."""
    out = []
    counted = counted_threads(counters, requests)
    for (run_id, _w), every in (counted.groupby(["run_id", "w"], sort=False) if not counted.empty else ()):
        frame = every[every["worked"]]
        frame = frame if not frame.empty else every  # the threads that worked (all when none did)
        out.append({"run_id": run_id, "window": every["window"].iloc[0], "threads": len(frame),
                    "idle_threads": len(every) - len(frame), **{c: frame[c].mean() for c in CLASSES},
                    "overlap_s": frame["overlap_s"].sum(),
                    "counters": ",".join(sorted(set().union(*frame["available"])))})
    return pd.DataFrame(out)


def wait_summary(rs: ResultSet, params: list[str]) -> pd.DataFrame:
    """Per cell (step, window kind, variant): windows, threads, each class's mean share (%), overlap."""
    counters = rs.table(THREAD_COUNTERS.name)
    runs = rs.table(RUNS.name)
    if counters.empty or runs.empty:
        return pd.DataFrame()
    shares = window_shares(counters, rs.table(REQUESTS.name))
    ok = usable_runs(runs)  # the one selection: ok and not perturbed, as every other summary
    if shares.empty or ok.empty:
        return pd.DataFrame()
    grouped, table = _cell_means(shares, ok, params, CLASSES)
    table["overlap s"] = grouped["overlap_s"].sum()
    return table.rename(columns={c: f"{c} %" for c in CLASSES}).reset_index()


def _cell_means(shares: pd.DataFrame, ok: pd.DataFrame, params: list[str],
                classes: Iterable[str]) -> tuple[Any, pd.DataFrame]:
    """The window shares of ``ok`` runs grouped by cell (step, window, variant), and per cell: windows, threads
    and each class's mean share (%)."""
    cells = dict(zip(ok["run_id"], variants(ok, params), strict=True))
    steps = dict(zip(ok["run_id"], ok["step"], strict=True))
    shares = shares[shares["run_id"].isin(cells)]
    shares = shares.assign(cell=[f"{steps[r]} {w} · {cells[r]}" for r, w in zip(shares["run_id"], shares["window"],
                                                                                 strict=True)])
    grouped = shares.groupby("cell", sort=False)
    table = grouped[list(classes)].mean() * 100
    table.insert(0, "windows", grouped.size())
    table.insert(1, "threads", grouped["threads"].mean())
    table.insert(2, "idle threads", grouped["idle_threads"].mean())
    return grouped, table


def sampled_window_shares(threads: pd.DataFrame, requests: pd.DataFrame, run_ids: pd.Series) -> pd.DataFrame:
    """One row per run (of ``run_ids``) and window: each SAMPLED class's share of the threads' samples inside it,
    averaged over the threads."""
    out = []
    threads = sample_columns(threads)
    for run_id, samples in threads[threads["run_id"].isin(run_ids)].groupby("run_id", sort=False):
        t_ns = samples["t_ns"]
        for label, t0, t1 in _windows(str(run_id), samples, requests):
            shares = sampled_shares(samples[(t_ns >= t0) & (t_ns <= t1)])
            if shares is not None:
                out.append({"run_id": run_id, "window": label, **shares})
    return pd.DataFrame(out)


def sampled_summary(rs: ResultSet, params: list[str]) -> pd.DataFrame:
    """Per cell (as :func:`wait_summary`): windows, threads, each SAMPLED class's mean share (%)."""
    threads, runs = rs.table(THREADS.name), rs.table(RUNS.name)
    ok = usable_runs(runs) if not runs.empty else runs
    if threads.empty or ok.empty:
        return pd.DataFrame()
    shares = sampled_window_shares(threads, rs.table(REQUESTS.name), ok["run_id"])
    if shares.empty:
        return pd.DataFrame()
    _, table = _cell_means(shares, ok, params, SAMPLED)
    return table.rename(columns={c: f"{c} %" for c in SAMPLED}).reset_index()


def paired_window_shares(counters: pd.DataFrame, threads: pd.DataFrame, requests: pd.DataFrame,
                         run_ids: pd.Series) -> pd.DataFrame:
    """One row per run (of ``run_ids``) and window: both views of the same threads over the same spans
    (:func:`harness.analysis.waits.paired_shares`), averaged over the threads that could be paired."""
    counted = counted_threads(counters, requests)
    if counted.empty:
        return pd.DataFrame()
    counted_of = dict(tuple(counted.groupby("run_id", sort=False)))
    read_tids = _thread_reads(counters).groupby("run_id")["tid"].unique()
    out = []
    threads = sample_columns(threads)
    for run_id, samples in threads[threads["run_id"].isin(run_ids)].groupby("run_id", sort=False):
        if run_id not in counted_of:
            continue
        samples_of = dict(tuple(samples.groupby("tid")))
        candidates = sum(tid in samples_of for tid in read_tids[run_id])  # read by the counters and sampled
        for (_w, label), window in counted_of[run_id].groupby(["w", "window"], sort=False):
            pairs = [p for p in (paired_shares(row, samples_of[row["tid"]]) for row in window.to_dict("records")
                                 if row["tid"] in samples_of) if p is not None]
            if pairs:
                # not paired: asleep all along by the counters, or too few samples in the counters' span
                out.append({"run_id": run_id, "window": label, "threads": len(pairs),
                            "idle_threads": candidates - len(pairs), **pd.DataFrame(pairs).mean().to_dict()})
    return pd.DataFrame(out)


def disagreement(rs: ResultSet, params: list[str]) -> pd.DataFrame:
    """Per cell: each MATCHING group's share by the samples and by the counters (%) on the same threads over the
    same spans, and sampled minus counters (percentage points)."""
    counters, threads, runs = rs.table(THREAD_COUNTERS.name), rs.table(THREADS.name), rs.table(RUNS.name)
    if counters.empty or threads.empty or runs.empty:
        return pd.DataFrame()
    ok = usable_runs(runs)
    paired = paired_window_shares(counters, threads, rs.table(REQUESTS.name), ok["run_id"])
    if paired.empty:
        return pd.DataFrame()
    columns = [f"{group}: {view}" for group in MATCHING for view in ("sampled", "counters")]
    _, table = _cell_means(paired, ok, params, columns)
    out = table[["windows", "threads", "idle threads"]].rename(
        columns={"threads": "threads paired", "idle threads": "not paired"})
    for group in MATCHING:
        out[f"{group}: sampled %"] = table[f"{group}: sampled"]
        out[f"{group}: counters %"] = table[f"{group}: counters"]
        out[f"{group}: Δ pp"] = table[f"{group}: sampled"] - table[f"{group}: counters"]
    return out.reset_index()


def sampled_wait_lines(rs: ResultSet, params: list[str]) -> list[str]:
    """report.md's lines for the sampled shares (beside :func:`wait_summary`'s table) and their disagreement with the
    counters; none without a threads table."""
    sampled = sampled_summary(rs, params)
    if sampled.empty:
        return []
    lines = ["", "### Sampled (threads collector): share of samples per class, mean over the threads that worked", "",
             _markdown(sampled)]
    if sampled[[f"{c} %" for c in SAMPLED[1:-1]]].sum().sum() == 0:
        lines += ["", "No wait classes in these samples (recorded by sampler v1, which read the state only): the "
                      "off-CPU samples are 'unknown'."]
    compared = disagreement(rs, params)
    if not compared.empty:
        lines += ["", "### Samples vs counters, on the same threads over the same spans (each thread that worked, "
                      "between the counters' first and last read in the window; Δ = sampled − counters, percentage "
                      "points; running = run + runqueue, I/O = io_wait + thrashing vs fault_io + read_io, other "
                      "sleep = other_sleep vs futex + gpu + idle + other)", "", _markdown(compared)]
    return lines


def _markdown(table: pd.DataFrame) -> str:
    return table.to_markdown(index=False, floatfmt=".1f")


def wait_lines(rs: ResultSet, params: list[str]) -> list[str]:
    """report.md's "Where decode time goes": the counters' table, then the samples' and their disagreement; none
    when the set has neither."""
    counters = wait_summary(rs, params)
    sampled = sampled_wait_lines(rs, params)
    if counters.empty and not sampled:
        return []
    return ["", "## Where decode time goes (share of wall time per class, mean over the threads that worked: on "
                "CPU, runnable or in I/O for 5 % of the window; the idle ones are counted apart)", "",
            "### Counters (thread_counters: schedstat, delay accounting)", "",
            _markdown(counters) if not counters.empty else "_no thread_counters table_", *sampled]
