"""Which process of the step did the waiting: the "Where decode time goes" shares per process (pid, comm) of the
step's tree, per cell, for the runs whose step had more than one process (fio's job process beside its parent, an
engine behind a wrapper script, worker processes). The counters' view (thread_counters) and the samples' view
(threads), each averaged over the process's threads that worked in the window as the cell tables are; a process
whose threads all slept (fio's parent in pselect6) shows its idle shares, and is left out of the cell tables above
by the same rule. A process is named by its comm and depth in the tree (0: the step's own process, 1: its child,
...); its pids across the cell's runs are listed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from harness.analysis.waits import CLASSES, SAMPLED, sampled_shares, wait_shares, worked
from harness.figures.waits import _clock_ticks, _markdown, _thread_reads, _windows, sample_columns
from harness.results.loader import ResultSet
from harness.results.selection import usable_runs
from harness.results.tables import PROCESSES, REQUESTS, RUNS, THREAD_COUNTERS, THREADS
from harness.results.variants import variants

MAX_PIDS = 3  # pids listed per row; more are counted


def _tree_runs(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of the runs whose table names more than one process."""
    if table.empty or "pid" not in table:
        return table.iloc[0:0]
    counts = table.groupby("run_id")["pid"].nunique()
    return table[table["run_id"].isin(counts[counts > 1].index)]


def counter_process_shares(counters: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """One row per run, window and process: each counter class's share averaged over its threads that worked."""
    out: list[dict[str, Any]] = []
    trees = _tree_runs(counters if counters.empty else _thread_reads(counters))
    for run_id, reads in (trees.groupby("run_id", sort=False) if not trees.empty else ()):
        ticks = _clock_ticks(reads)
        for label, t0, t1 in _windows(str(run_id), reads, requests):
            for pid, mine in reads.groupby("pid"):
                every = [s for s in (wait_shares(group.to_dict("records"), t0, t1, ticks)
                                     for _tid, group in mine.groupby("tid")) if s is not None]
                shares = [s for s in every if worked(s)] or every
                if shares:
                    frame = pd.DataFrame(shares)
                    out.append({"run_id": run_id, "window": label, "pid": int(pid), "threads": len(shares),
                                "idle_threads": len(every) - len(shares), **{c: frame[c].mean() for c in CLASSES}})
    return pd.DataFrame(out)


def sampled_process_shares(threads: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """One row per run, window and process: each sampled class's share averaged over its threads that worked."""
    out: list[dict[str, Any]] = []
    trees = _tree_runs(sample_columns(threads))
    for run_id, samples in (trees.groupby("run_id", sort=False) if not trees.empty else ()):
        t_ns = samples["t_ns"]
        for label, t0, t1 in _windows(str(run_id), samples, requests):
            inside = samples[(t_ns >= t0) & (t_ns <= t1)]
            for pid, mine in inside.groupby("pid"):
                shares = sampled_shares(mine)
                if shares is not None:
                    out.append({"run_id": run_id, "window": label, "pid": int(pid), **shares})
    return pd.DataFrame(out)


def _names(processes: pd.DataFrame, threads: pd.DataFrame) -> dict[tuple[str, int], tuple[str, int | None]]:
    """(run_id, pid) -> (comm, depth in the tree); from the processes table, else the comm of the thread whose tid
    is the pid (depth unknown)."""
    names: dict[tuple[str, int], tuple[str, int | None]] = {}
    if not threads.empty and {"pid", "tid", "comm"} <= set(threads.columns):
        main = threads[threads["pid"] == threads["tid"]].drop_duplicates(["run_id", "pid"])
        names.update({(str(r), int(p)): (str(c), None)
                      for r, p, c in zip(main["run_id"], main["pid"], main["comm"], strict=True)})
    if processes.empty:
        return names
    for run_id, rows in processes.drop_duplicates(["run_id", "pid"]).groupby("run_id", sort=False):
        parent = {int(p): (int(q) if pd.notna(q) else None) for p, q in zip(rows["pid"], rows["ppid"], strict=True)}
        for pid, comm in zip(rows["pid"], rows["comm"], strict=True):
            depth, up = 0, parent.get(int(pid))
            while up in parent and depth < len(parent):
                depth, up = depth + 1, parent[up]
            names[(str(run_id), int(pid))] = (str(comm), depth)
    return names


def _per_process_cells(shares: pd.DataFrame, ok: pd.DataFrame, params: list[str], names: dict,
                       classes: Iterable[str]) -> pd.DataFrame:
    """Per cell and process (depth, comm): windows, its pids, threads counted and idle, each class's mean (%)."""
    cells = dict(zip(ok["run_id"], variants(ok, params), strict=True))
    steps = dict(zip(ok["run_id"], ok["step"], strict=True))
    shares = shares[shares["run_id"].isin(cells)]
    if shares.empty:
        return pd.DataFrame()
    named = [names.get((str(r), int(p)), ("?", None)) for r, p in zip(shares["run_id"], shares["pid"], strict=True)]
    shares = shares.assign(
        cell=[f"{steps[r]} {w} · {cells[r]}" for r, w in zip(shares["run_id"], shares["window"], strict=True)],
        depth=[d if d is not None else -1 for _c, d in named], process=[c for c, _d in named])
    grouped = shares.groupby(["cell", "depth", "process"], sort=False)
    table = grouped[list(classes)].mean() * 100
    table.insert(0, "windows", grouped.size())
    table.insert(1, "pids", grouped["pid"].agg(_pid_list))
    table.insert(2, "threads", grouped["threads"].mean())
    table.insert(3, "idle threads", grouped["idle_threads"].mean())
    table = table.reset_index().sort_values(["cell", "depth"], kind="stable")
    table["depth"] = table["depth"].map(lambda d: "?" if d < 0 else str(d))
    return table


def _pid_list(pids: pd.Series) -> str:
    unique = sorted(set(int(p) for p in pids))
    more = len(unique) - MAX_PIDS
    return ", ".join(map(str, unique[:MAX_PIDS])) + (f" (+{more})" if more > 0 else "")


def process_wait_lines(rs: ResultSet, params: list[str]) -> list[str]:
    """report.md's per-process tables (counters, then samples) for the cells whose steps had more than one
    process; none otherwise."""
    runs = rs.table(RUNS.name)
    if runs.empty:
        return []
    ok = usable_runs(runs)
    requests, threads = rs.table(REQUESTS.name), rs.table(THREADS.name)
    names = _names(rs.table(PROCESSES.name), threads)
    lines: list[str] = []
    tables: list[tuple[str, pd.DataFrame, Any]] = [
        ("counters (thread_counters)", counter_process_shares(rs.table(THREAD_COUNTERS.name), requests), CLASSES),
        ("samples (threads)", sampled_process_shares(threads, requests), SAMPLED)]
    for what, shares, classes in tables:
        table = pd.DataFrame() if shares.empty else _per_process_cells(shares, ok, params, names, classes)
        if not table.empty:
            lines += ["", f"### Per process of the step's tree, {what}: which process did the waiting (depth 0: the "
                          "step's own process; mean over each process's threads that worked)", "",
                      _markdown(table.rename(columns={c: f"{c} %" for c in classes}))]
    return lines
