"""Where decode time goes: per run and window, the share of wall time per class (run, runqueue, io_wait, thrashing,
reclaim, other_sleep; harness/analysis/waits.py) averaged over the step's threads, from the ``thread_counters``
table. The windows are the decode windows of llama-server requests (first token to end) where the requests table
has them, else the whole step (its first to its last read). report.md shows the table, per cell."""

from __future__ import annotations

import pandas as pd

from harness.analysis.waits import CLASSES, wait_shares
from harness.results.loader import ResultSet
from harness.results.selection import usable_runs
from harness.results.tables import REQUESTS, RUNS, THREAD_COUNTERS
from harness.results.variants import variants


def _windows(run_id: str, reads: pd.DataFrame, requests: pd.DataFrame) -> list[tuple[str, int, int]]:
    """(label, t0, t1) of each decode window of the run's requests, or the whole step."""
    if not requests.empty and {"t_first_token_ns", "t_end_ns"} <= set(requests.columns):
        mine = requests[(requests["run_id"] == run_id) & requests["t_first_token_ns"].notna()
                        & requests["t_end_ns"].notna()]
        if not mine.empty:
            return [("decode", int(a), int(b)) for a, b in zip(mine["t_first_token_ns"], mine["t_end_ns"], strict=True)]
    return [("step", int(reads["t_ns"].min()), int(reads["t_ns"].max()))]


def window_shares(counters: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """One row per run and window: each class's share of wall time averaged over the threads with two reads
    inside it, the threads counted, the overlap the counters claimed beyond the off-CPU time, the counters seen."""
    threads = counters[counters["kind"] == "thread"] if "kind" in counters else counters
    out = []
    for run_id, reads in threads.groupby("run_id", sort=False):
        ticks = int(reads["clock_ticks_per_s"].dropna().iloc[0]) if reads["clock_ticks_per_s"].notna().any() else 100
        by_thread = [group.to_dict("records") for _tid, group in reads.groupby("tid")]
        for label, t0, t1 in _windows(str(run_id), reads, requests):
            shares = [s for s in (wait_shares(rows, t0, t1, ticks) for rows in by_thread) if s is not None]
            if not shares:
                continue
            frame = pd.DataFrame(shares)
            out.append({"run_id": run_id, "window": label, "threads": len(shares),
                        **{c: frame[c].mean() for c in CLASSES}, "overlap_s": frame["overlap_s"].sum(),
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
    cells = pd.Series(variants(ok, params).to_numpy(), index=ok["run_id"])
    steps = pd.Series(ok["step"].to_numpy(), index=ok["run_id"])
    shares = shares[shares["run_id"].isin(cells.index)]
    shares = shares.assign(cell=[f"{steps[r]} {w} · {cells[r]}" for r, w in zip(shares["run_id"], shares["window"],
                                                                                 strict=True)])
    grouped = shares.groupby("cell", sort=False)
    table = grouped[list(CLASSES)].mean() * 100
    table.insert(0, "windows", grouped.size())
    table.insert(1, "threads", grouped["threads"].mean())
    table["overlap s"] = grouped["overlap_s"].sum()
    return table.rename(columns={c: f"{c} %" for c in CLASSES}).reset_index()
