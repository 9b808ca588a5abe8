"""Where a thread's off-CPU time went in a window, from two snapshots of the offcpu collector's cumulative times
(the ``offcpu`` table; runner/collectors/offcpu.py).

Over the span between the first and the last snapshot inside the window [t0, t1] (``covered_s``), per class
(fault_io, read_io, futex, gpu, idle, other): ``blocked`` is the share of wall time asleep in that class, and
``woken_runqueue`` the share then spent waiting for a CPU after those wake-ups -- so ``blocked + woken_runqueue``
is what a thread's own clock sees around a blocking call. ``runqueue`` is all the wait for a CPU (preempted, plus
after every wake-up: schedstat's run_delay), ``io_wait`` the time asleep in D (what delay accounting's blkio counts:
fault_io and read_io in D), ``preempted`` the share preempted per syscall it was in (``none``: user code or a
page fault's handler), ``off_cpu`` the sum of every class plus runqueue. An interval still open at a snapshot
counts at the snapshot where it closes (an error of at most one blocking call per end of the window).

Pure: rows in (dicts or a DataFrame's records), numbers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

SLEEP_CLASSES = ("fault_io", "read_io", "futex", "gpu", "idle", "other")


def _totals(rows: list[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """{class: {"blocked": ns, "runqueue": ns, "d": ns asleep in D}} of one snapshot's rows; preempted time also
    under ("preempted", syscall)."""
    out: dict[Any, dict[str, float]] = {}
    for row in rows:
        if row["class"] == "runqueue":
            preempted = out.setdefault(("preempted", row["syscall"]), {"blocked": 0.0, "runqueue": 0.0, "d": 0.0})
            preempted["runqueue"] += float(row["runqueue_ns"]) + float(row["blocked_ns"])
        total = out.setdefault(row["class"], {"blocked": 0.0, "runqueue": 0.0, "d": 0.0})
        total["blocked"] += float(row["blocked_ns"])
        total["runqueue"] += float(row["runqueue_ns"])
        total["d"] += float(row["blocked_ns"]) if row["state"] == "D" else 0.0
    return out


def offcpu_shares(rows: Iterable[Mapping[str, Any]], t0: int, t1: int) -> dict[str, Any] | None:
    """Shares of wall time for one thread's offcpu rows over the snapshots inside [t0, t1] (ns, monotonic); None
    when fewer than two snapshots fall inside."""
    by_time: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        if t0 <= row["t_ns"] <= t1:
            by_time.setdefault(int(row["t_ns"]), []).append(row)
    if len(by_time) < 2:
        return None
    first_t, last_t = min(by_time), max(by_time)
    first, last = _totals(by_time[first_t]), _totals(by_time[last_t])
    wall = float(last_t - first_t)
    zero = {"blocked": 0.0, "runqueue": 0.0, "d": 0.0}

    def delta(name: Any, part: str) -> float:
        return (last.get(name, zero)[part] - first.get(name, zero)[part]) / wall

    blocked = {name: delta(name, "blocked") for name in SLEEP_CLASSES}
    woken = {name: delta(name, "runqueue") for name in SLEEP_CLASSES}
    runqueue = sum(woken.values()) + delta("runqueue", "runqueue") + delta("runqueue", "blocked")
    io_wait = delta("fault_io", "d") + delta("read_io", "d")
    preempted = {key[1]: delta(key, "runqueue") for key in set(first) | set(last) if isinstance(key, tuple)}
    return {"blocked": blocked, "woken_runqueue": woken, "preempted": preempted, "runqueue": runqueue,
            "io_wait": io_wait,
            "off_cpu": sum(blocked.values()) + runqueue, "covered_s": wall / 1e9, "t_first_ns": first_t,
            "t_last_ns": last_t}
