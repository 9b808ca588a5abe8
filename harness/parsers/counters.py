"""The counters collector's capture (``counters.txt``, runner/collectors/counters.py): the kernel's cumulative
per-thread counters of the step's process and of its descendants (v2), one TAB-separated line per thread per read.

::

    # harness-counters v2 pid=123 period_ms=100 clock=monotonic clock_ticks_per_s=100 schedstat=yes taskstats=v16 \
delayacct=on delayacct_switched=yes psi=system reader=native tree=ppid
    # unavailable taskstats: <why>
    # proc t_ns=... pid=124 ppid=123<TAB>comm=fio<TAB>cmd=fio ...   (a process of the tree, at its first read)
    t  t_ns pid tid run_ns runqueue_ns timeslices utime_ticks stime_ticks blkio_ticks nvcsw nivcsw cpu_delay_ns
       blkio_delay_ns swapin_delay_ns thrashing_delay_ns freepages_delay_ns compact_delay_ns comm
    p  t_ns memory_some_us memory_full_us io_some_us io_full_us
    # proc_end pid=124 first_ns=... last_ns=... gone=1
    # stop t_ns=... reads=... overruns=... cpu_s=... delayacct_restored=... [sched_taskstats=N sched_proc=N]

``-`` is a counter the kernel did not give (None here). run_ns, runqueue_ns and timeslices are schedstat's numbers
whichever source gave them (the native reader takes them from taskstats' cpu_run_virtual_total, cpu_delay_total
and cpu_count, the same kernel fields; the stop line counts the thread reads of each source). Thread rows carry
the header's facts (``taskstats``, ``delayacct``, ``delayacct_switched``, ``psi``) so each row says which counters
were there; PSI rows have ``tid`` None. Output of another version, or without the header, is refused.

v2 (``tree=ppid``) follows the step's process and its descendants, as the thread sampler does: every thread line
carries its process's pid (a row's ``pid``), and the ``# proc`` / ``# proc_end`` lines record the tree
(:func:`harness.parsers.sampler.process_records` reads them: the same lines). v1 (older raw data) had no pid field:
its rows take the header's pid, the step's process.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, TypedDict

from ._common import headed_rows, header_fields, iter_lines, versioned_header
from .base import ParseError, register_parser

VERSION = "v2"  # what runner/collectors/counters.py writes
READABLE_VERSIONS = ("v1", "v2")  # v1: raw data recorded before the process tree
THREAD_COLUMNS = ("t_ns", "tid", "run_ns", "runqueue_ns", "timeslices", "utime_ticks", "stime_ticks", "blkio_ticks",
                  "nvcsw", "nivcsw", "cpu_delay_ns", "blkio_delay_ns", "swapin_delay_ns", "thrashing_delay_ns",
                  "freepages_delay_ns", "compact_delay_ns")
PSI_COLUMNS = ("t_ns", "psi_memory_some_us", "psi_memory_full_us", "psi_io_some_us", "psi_io_full_us")


def _value(text: str, name: str, line: int) -> int | None:
    if text == "-":
        return None
    try:
        return int(text)
    except ValueError:
        raise ParseError(f"{name} is not an integer: {text!r}", line=line) from None


class CountersHeader(NamedTuple):
    """The ``# harness-counters`` line: its version, and the facts every thread row carries (in this order)."""

    version: str | None
    pid: int | None
    period_ms: int | None
    clock_ticks_per_s: int | None
    schedstat: str | None
    taskstats: str | None
    delayacct: str | None
    delayacct_switched: str | None
    psi: str | None


class CounterThreadRow(TypedDict):
    """One thread at one read: its cumulative counters (None: the kernel did not give it) and the header's facts."""

    kind: Literal["thread"]
    t_ns: int | None
    tid: int | None
    run_ns: int | None
    runqueue_ns: int | None
    timeslices: int | None
    utime_ticks: int | None
    stime_ticks: int | None
    blkio_ticks: int | None
    nvcsw: int | None
    nivcsw: int | None
    cpu_delay_ns: int | None
    blkio_delay_ns: int | None
    swapin_delay_ns: int | None
    thrashing_delay_ns: int | None
    freepages_delay_ns: int | None
    compact_delay_ns: int | None
    comm: str
    pid: int | None
    period_ms: int | None
    clock_ticks_per_s: int | None
    schedstat: str | None
    taskstats: str | None
    delayacct: str | None
    delayacct_switched: str | None
    psi: str | None


class CounterPsiRow(TypedDict):
    """One read of PSI's cumulative stall times (``psi``: whose, from the header)."""

    kind: Literal["psi"]
    tid: None
    t_ns: int | None
    psi_memory_some_us: int | None
    psi_memory_full_us: int | None
    psi_io_some_us: int | None
    psi_io_full_us: int | None
    psi: str | None
    pid: int | None


CounterRow = CounterThreadRow | CounterPsiRow


def _header(line: str, number: int) -> CountersHeader:
    words = line.split()
    found = words[2] if len(words) > 2 else None
    fields = versioned_header(line, number, "counters", found if found in READABLE_VERSIONS
                              else " or ".join(READABLE_VERSIONS))
    pid, period_ms, clock_ticks_per_s = (_value(fields.get(key) or "-", key, number)
                                         for key in ("pid", "period_ms", "clock_ticks_per_s"))
    return CountersHeader(found, pid, period_ms, clock_ticks_per_s, fields.get("schedstat"), fields.get("taskstats"),
                          fields.get("delayacct"), fields.get("delayacct_switched"), fields.get("psi"))


def _thread_row(parts: list[str], number: int, header: CountersHeader) -> CounterThreadRow:
    width = len(THREAD_COLUMNS) + (3 if header.version == "v2" else 2)
    if len(parts) != width:
        raise ParseError(f"thread line: expected {width} TAB-separated fields, got {len(parts)}", line=number)
    pid = header.pid
    if header.version == "v2":  # the thread's own process (the tree's), second
        pid = _value(parts.pop(2), "pid", number)
    (t_ns, tid, run_ns, runqueue_ns, timeslices, utime_ticks, stime_ticks, blkio_ticks, nvcsw, nivcsw, cpu_delay_ns,
     blkio_delay_ns, swapin_delay_ns, thrashing_delay_ns, freepages_delay_ns, compact_delay_ns) = (
        _value(text, name, number) for name, text in zip(THREAD_COLUMNS, parts[1:-1], strict=True))
    return {"kind": "thread", "t_ns": t_ns, "tid": tid, "run_ns": run_ns, "runqueue_ns": runqueue_ns,
            "timeslices": timeslices, "utime_ticks": utime_ticks, "stime_ticks": stime_ticks,
            "blkio_ticks": blkio_ticks, "nvcsw": nvcsw, "nivcsw": nivcsw, "cpu_delay_ns": cpu_delay_ns,
            "blkio_delay_ns": blkio_delay_ns, "swapin_delay_ns": swapin_delay_ns,
            "thrashing_delay_ns": thrashing_delay_ns, "freepages_delay_ns": freepages_delay_ns,
            "compact_delay_ns": compact_delay_ns, "comm": parts[-1], "pid": pid, "period_ms": header.period_ms,
            "clock_ticks_per_s": header.clock_ticks_per_s, "schedstat": header.schedstat,
            "taskstats": header.taskstats, "delayacct": header.delayacct,
            "delayacct_switched": header.delayacct_switched, "psi": header.psi}


def _row(parts: list[str], number: int, header: CountersHeader) -> CounterRow:
    kind = parts[0]
    if kind == "t":
        return _thread_row(parts, number, header)
    if kind == "p":
        if len(parts) != len(PSI_COLUMNS) + 1:
            raise ParseError(f"psi line: expected {len(PSI_COLUMNS) + 1} TAB-separated fields, got {len(parts)}",
                             line=number)
        t_ns, memory_some, memory_full, io_some, io_full = (
            _value(text, name, number) for name, text in zip(PSI_COLUMNS, parts[1:], strict=True))
        return {"kind": "psi", "tid": None, "t_ns": t_ns, "psi_memory_some_us": memory_some,
                "psi_memory_full_us": memory_full, "psi_io_some_us": io_some, "psi_io_full_us": io_full,
                "psi": header.psi, "pid": header.pid}
    raise ParseError(f"unknown line kind {kind!r} (expected t, p or a # comment)", line=number)


@register_parser("counters")
def parse_counters(data: bytes) -> list[CounterRow]:
    """One row per thread per read (kind "thread") and one per read of PSI (kind "psi"); the ``# unavailable`` and
    ``# stop`` lines are metadata (:func:`counter_notes`)."""
    return headed_rows(data, "counters", VERSION, _header, _row)


def counter_notes(data: bytes) -> dict[str, str]:
    """The capture's ``# unavailable SOURCE: why`` lines and its ``# stop`` fields, for the run's record."""
    notes: dict[str, str] = {}
    for raw in iter_lines(data):
        if raw.startswith("# unavailable "):
            source, _, why = raw[len("# unavailable "):].partition(":")
            notes[f"unavailable_{source.strip()}"] = why.strip()
        elif raw.startswith("# stop "):
            stop = header_fields(raw)
            notes.update({f"collector_{key}": stop[key] for key in ("reads", "overruns", "cpu_s") if key in stop})
            if "delayacct_restored" in stop:
                notes["delayacct_restored"] = stop["delayacct_restored"]
    return notes
