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

from typing import Any

from ._common import headed_rows, header_fields, iter_lines, versioned_header
from .base import ParseError, register_parser

VERSION = "v2"  # what runner/collectors/counters.py writes
READABLE_VERSIONS = ("v1", "v2")  # v1: raw data recorded before the process tree
THREAD_COLUMNS = ("t_ns", "tid", "run_ns", "runqueue_ns", "timeslices", "utime_ticks", "stime_ticks", "blkio_ticks",
                  "nvcsw", "nivcsw", "cpu_delay_ns", "blkio_delay_ns", "swapin_delay_ns", "thrashing_delay_ns",
                  "freepages_delay_ns", "compact_delay_ns")
PSI_COLUMNS = ("t_ns", "psi_memory_some_us", "psi_memory_full_us", "psi_io_some_us", "psi_io_full_us")
FACTS = ("pid", "period_ms", "clock_ticks_per_s", "schedstat", "taskstats", "delayacct", "delayacct_switched", "psi")


def _value(text: str, name: str, line: int) -> int | None:
    if text == "-":
        return None
    try:
        return int(text)
    except ValueError:
        raise ParseError(f"{name} is not an integer: {text!r}", line=line) from None


def _header(line: str, number: int) -> dict[str, Any]:
    words = line.split()
    found = words[2] if len(words) > 2 else None
    fields = versioned_header(line, number, "counters", found if found in READABLE_VERSIONS
                              else " or ".join(READABLE_VERSIONS))
    facts: dict[str, Any] = {key: fields.get(key) for key in FACTS}
    facts["_version"] = found
    for key in ("pid", "period_ms", "clock_ticks_per_s"):
        facts[key] = _value(facts[key] or "-", key, number)
    return facts


def _row(parts: list[str], number: int, facts: dict[str, Any]) -> dict[str, Any]:
    kind = parts[0]
    version, facts = facts["_version"], {key: value for key, value in facts.items() if key != "_version"}
    if kind == "t":
        width = len(THREAD_COLUMNS) + (3 if version == "v2" else 2)
        if len(parts) != width:
            raise ParseError(f"thread line: expected {width} TAB-separated fields, got {len(parts)}", line=number)
        pid = facts["pid"]
        if version == "v2":  # the thread's own process (the tree's), second
            pid = _value(parts.pop(2), "pid", number)
        row = {name: _value(text, name, number) for name, text in zip(THREAD_COLUMNS, parts[1:-1], strict=True)}
        return {"kind": "thread", **row, "comm": parts[-1], **facts, "pid": pid}
    if kind == "p":
        if len(parts) != len(PSI_COLUMNS) + 1:
            raise ParseError(f"psi line: expected {len(PSI_COLUMNS) + 1} TAB-separated fields, got {len(parts)}",
                             line=number)
        return {"kind": "psi", "tid": None, **{name: _value(text, name, number)
                                               for name, text in zip(PSI_COLUMNS, parts[1:], strict=True)},
                "psi": facts["psi"], "pid": facts["pid"]}
    raise ParseError(f"unknown line kind {kind!r} (expected t, p or a # comment)", line=number)


@register_parser("counters")
def parse_counters(data: bytes) -> list[dict[str, Any]]:
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
