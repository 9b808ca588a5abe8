"""Where a thread's wall time went in a window, from two reads of the kernel's cumulative counters (the
``thread_counters`` table, counters collector).

Over the span between the first and the last read inside the window [t0, t1] (its ``covered_s``):

- ``run``: on CPU (schedstat's first field, = taskstats cpu_run_real_total);
- ``runqueue``: runnable, waiting for a CPU (schedstat's second field, = taskstats cpu_delay_total);
- what is left is off CPU, asleep. Delay accounting splits it: ``thrashing`` (waiting for the refault of an evicted
  page-cache page), ``io_wait`` (blkio delay: sleeping in io_schedule -- block I/O, page-cache reads and the page
  faults that wait for them -- minus the thrashing the kernel also counts there), ``reclaim`` (freepages delay:
  direct reclaim), and ``other_sleep`` = what remains (futexes, sleeps, polls, network).

The shares add up to 1. The delay counters overlap each other and the run time (a thrashing wait is also a blkio
wait; direct reclaim is partly on CPU), and on some kernels blkio delay has been seen to exceed the thread's whole
off-CPU time: each sleep class is therefore taken out of the off-CPU time in the order thrashing, io_wait, reclaim,
clipped to what is left; what an interval claimed beyond it is first handed back to the intervals the sleep spanned
(delay accounting adds a sleep's delay when it ends: :func:`_spread_back`), and ``overlap_s`` says how much the
counters claimed beyond that (0: none). Without delay
accounting (``blkio_delay_ns`` missing) io_wait falls back to ``blkio_ticks`` (stat field 42, clock ticks), and a
class whose counter the kernel did not give is None, not 0; ``available`` names the counters that were there.

The threads sampler's view of the same window (:func:`sampled_shares`): the share of samples running and, off
CPU, per wait class (sampler v2: the syscall each thread waits in), so both can stand side by side with their
disagreement (:data:`MATCHING`), measured on the same thread over the same span (:func:`paired_shares`).

Averages over threads count only the threads that WORKED in the window: on CPU, waiting for one or waiting on I/O
for at least :data:`WORKING` of it (a llama-server has a dozen HTTP and pool threads asleep for the whole decode;
averaged in, they would bury the two compute threads' split under ~85 % other_sleep). The idle ones are counted
beside them.

Pure: rows in (dicts or a DataFrame's records), numbers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

CLASSES = ("run", "runqueue", "io_wait", "thrashing", "reclaim", "other_sleep")
WORKING = 0.05  # a thread worked in a window when on CPU, runnable or in I/O (or GPU waits, sampled) for 5 % of it


def worked(shares: Mapping[str, Any]) -> bool:
    """A thread's counter shares over a window (:func:`wait_shares`): did it work in it (not asleep ≥ 95 %)?"""
    return 1.0 - (shares.get("other_sleep") or 0.0) >= WORKING


DELAYS = ("blkio_delay_ns", "thrashing_delay_ns", "freepages_delay_ns", "swapin_delay_ns", "cpu_delay_ns")
COUNTERS = ("run_ns", "runqueue_ns", "blkio_ticks", *DELAYS)  # the cumulative counters a read's row may carry


def _delta(first: Mapping[str, Any], last: Mapping[str, Any], column: str) -> float | None:
    a, b = first.get(column), last.get(column)
    if a is None or b is None or a != a or b != b:  # missing, or NaN from a DataFrame
        return None
    return float(b) - float(a)


def _reads_in(rows: Iterable[Mapping[str, Any]], t0: int, t1: int) -> list[Mapping[str, Any]] | None:
    inside = sorted((r for r in rows if t0 <= r["t_ns"] <= t1), key=lambda r: r["t_ns"])
    if len(inside) < 2 or inside[-1]["t_ns"] == inside[0]["t_ns"]:
        return None
    return inside


def _blkio(first: Mapping[str, Any], last: Mapping[str, Any], clock_ticks_per_s: int) -> float | None:
    blkio = _delta(first, last, "blkio_delay_ns")
    ticks = _delta(first, last, "blkio_ticks")
    if blkio is None and ticks is not None:
        blkio = ticks * 1e9 / clock_ticks_per_s  # 10 ms resolution, no root needed
    return blkio


Interval = dict[str, float | None]


def _interval(first: Mapping[str, Any], last: Mapping[str, Any],
              clock_ticks_per_s: int) -> tuple[Interval, dict[str, float]]:
    """One interval between two reads, in ns: run, runqueue, then the sleep classes each clipped to the off-CPU
    time left, and other_sleep; beside it, what each sleep class claimed beyond the time left (its excess)."""
    wall = float(last["t_ns"] - first["t_ns"])
    run, runqueue = _delta(first, last, "run_ns"), _delta(first, last, "runqueue_ns")
    if runqueue is None:
        runqueue = _delta(first, last, "cpu_delay_ns")
    run = None if run is None else min(max(run, 0.0), wall)
    runqueue = None if runqueue is None else min(max(runqueue, 0.0), wall - (run or 0.0))
    thrashing, blkio = _delta(first, last, "thrashing_delay_ns"), _blkio(first, last, clock_ticks_per_s)
    left = wall - (run or 0.0) - (runqueue or 0.0)
    out: Interval = {"run": run, "runqueue": runqueue}
    excess: dict[str, float] = {}
    claims = (("thrashing", thrashing), ("io_wait", None if blkio is None else max(0.0, blkio - (thrashing or 0.0))),
              ("reclaim", _delta(first, last, "freepages_delay_ns")))
    for name, claimed in claims:
        if claimed is None:
            out[name] = None
            continue
        taken = min(max(claimed, 0.0), left)
        excess[name] = max(claimed, 0.0) - taken
        left -= taken
        out[name] = taken
    out["other_sleep"] = left
    return out, excess


def _spread_back(intervals: list[tuple[Interval, dict[str, float]]]) -> float:
    """Delay accounting adds a sleep's whole delay when the sleep ends, so a sleep longer than the read period lands
    in one interval that cannot hold it, and the intervals it began in show that time as unexplained other_sleep.
    What an interval's class claimed beyond its off-CPU time is handed back to the intervals before it, into their
    other_sleep, for as far as the sleep can have reached: through intervals spent wholly off CPU, and into the
    one where the thread last ran (where the sleep began), no further. Whatever does not fit stays ``overlap``
    (the counters claimed more than the thread slept: the kernel's over-count, or overlapping counters): returns
    that overlap, in ns."""
    overlap = 0.0
    for k, (_interval_k, excesses) in enumerate(intervals):
        for name, excess in excesses.items():
            j = k - 1
            while excess > 0 and j >= 0:
                before = intervals[j][0]
                if before.get(name) is None:
                    break
                moved = min(excess, before["other_sleep"] or 0.0)
                before["other_sleep"] = (before["other_sleep"] or 0.0) - moved
                before[name] = (before[name] or 0.0) + moved
                excess -= moved
                if (before["run"] or 0.0) > 0 or (before["runqueue"] or 0.0) > 0:
                    break  # the thread ran here: the sleep began in this interval
                j -= 1
            overlap += excess
    return overlap


def wait_shares(rows: Iterable[Mapping[str, Any]], t0: int, t1: int,
                clock_ticks_per_s: int = 100) -> dict[str, Any] | None:
    """Shares of wall time per class for one thread's counter rows over the reads inside [t0, t1] (ns, monotonic);
    None when fewer than two reads fall inside. Each interval between two reads is split on its own, so a delay
    counter that jumps by more than an interval's off-CPU time (seen on kernel 6.18) spoils that interval only --
    after what it claimed beyond the interval has been handed back to the sleep it ended (:func:`_spread_back`)."""
    reads = _reads_in(rows, t0, t1)
    if reads is None:
        return None
    wall = float(reads[-1]["t_ns"] - reads[0]["t_ns"])
    intervals = [_interval(first, last, clock_ticks_per_s) for first, last in zip(reads, reads[1:], strict=False)]
    overlap = _spread_back(intervals)
    totals: dict[str, float | None] = {}
    for interval, _excess in intervals:
        for name, value in interval.items():
            so_far = totals.get(name, 0.0)
            totals[name] = None if value is None or so_far is None else so_far + value
    available = [c for c in COUNTERS if _delta(reads[0], reads[-1], c) is not None]
    shares = {c: None if (total := totals.get(c)) is None else total / wall for c in CLASSES}
    return {**shares, "overlap_s": overlap / 1e9, "covered_s": wall / 1e9,
            "t_first_ns": int(reads[0]["t_ns"]), "t_last_ns": int(reads[-1]["t_ns"]), "available": available}


# --- the same window from the threads sampler's samples ---------------------------------------------------------

# running: state R; then the wait classes of the samples off CPU (sampler v2); unknown: off CPU without a class
# (v1 data, or an unreadable syscall file).
SAMPLED = ("running", "fault_io", "read_io", "futex", "gpu", "idle", "other", "unknown")
# What each counter class corresponds to among the sampled ones (for their disagreement).
MATCHING = {"running": (("running",), ("run", "runqueue")),
            "I/O": (("fault_io", "read_io"), ("io_wait", "thrashing")),
            "other sleep": (("futex", "gpu", "idle", "other"), ("other_sleep",))}


SAMPLED_WORK = ("running", "fault_io", "read_io", "gpu")  # the sampled classes in which a thread is working


def _labels(samples: pd.DataFrame) -> np.ndarray:
    """Each sample's SAMPLED class: running in state R, else the wait class it was sampled in."""
    off = samples["class"].fillna("unknown") if "class" in samples else pd.Series("unknown", index=samples.index)
    return np.where(samples["state"].to_numpy() == "R", "running", off.to_numpy())


def sampled_worked(shares: pd.DataFrame) -> pd.Series:
    """Per thread (a row: its share of samples per SAMPLED class), did it work: running, in I/O or in GPU waits for
    WORKING of its samples -- the samples' counterpart of :func:`worked`. A share, not "sampled running at all":
    woken from a sleep on a busy machine, a parked thread is caught runnable now and then (each of ten threads in
    200 ms sleeps beside three busy ones on 2 CPUs: 1-3 of ~350 samples), which is not work."""
    return shares.reindex(columns=list(SAMPLED_WORK), fill_value=0.0).sum(axis=1) >= WORKING


def sampled_shares(samples: pd.DataFrame) -> dict[str, float] | None:
    """Per class of SAMPLED, the share of each thread's samples (columns tid, state, class) averaged over the
    threads that worked (running, in I/O or GPU waits for WORKING of their samples; all of them when none did), as
    the counter shares are; None without samples."""
    if samples.empty:
        return None
    shares = pd.crosstab(samples["tid"].to_numpy(), _labels(samples), normalize="index").reindex(
        columns=SAMPLED, fill_value=0.0)
    working = shares[sampled_worked(shares)]
    chosen = working if not working.empty else shares
    return {**chosen.mean().to_dict(), "threads": len(chosen), "idle_threads": len(shares) - len(chosen)}


MIN_PAIRED_SAMPLES = 10  # fewer samples in a span give shares in steps of more than 10 points: not compared


def paired_shares(counted: Mapping[str, Any], samples: pd.DataFrame) -> dict[str, float] | None:
    """One thread, both views over the same span: ``counted`` is its counter shares over a window
    (:func:`wait_shares`; its first and last read inside the window bound the span), and the thread's samples
    (columns t_ns, state, class) inside that span are counted. Per MATCHING group, ``"<group>: counters"`` and
    ``"<group>: sampled"`` (shares, 0-1). None when the thread did not work in the window (by the counters:
    :func:`worked`), a counter the groups need is missing, or fewer than MIN_PAIRED_SAMPLES samples fall inside.

    The cell tables average each view over its own window and its own working threads: a warm decode of a few
    tenths of a second is one or two 100 ms counter intervals but the whole window of samples, and the two may not
    pick the same threads. Comparing those put the demo's warm llama-server decode 10-29 points apart where the same
    threads over the same spans differ by 1.4 points on average."""
    if not worked(counted) or any(counted[c] is None or counted[c] != counted[c] for c in ("run", "runqueue",
                                                                                             "io_wait")):
        return None  # (a missing counter is None in wait_shares' dict, NaN once it went through a DataFrame)
    inside = samples[(samples["t_ns"] >= counted["t_first_ns"]) & (samples["t_ns"] <= counted["t_last_ns"])]
    if len(inside) < MIN_PAIRED_SAMPLES:
        return None
    labels = pd.Series(_labels(inside)).value_counts(normalize=True)
    out: dict[str, float] = {}
    for group, (sampled_classes, counter_classes) in MATCHING.items():
        out[f"{group}: sampled"] = float(sum(labels.get(c, 0.0) for c in sampled_classes))
        out[f"{group}: counters"] = float(sum(_share(counted, c) for c in counter_classes))
    return out


def _share(counted: Mapping[str, Any], name: str) -> float:
    """A class's share of a thread's counter shares, 0 where its counter was missing (None, or NaN)."""
    value = counted.get(name)
    return 0.0 if value is None or value != value else float(value)
