"""The native sampler in thread mode: one TAB-separated record per thread per sample instant.

::

    # harness-sampler v1 mode=threads pid=123 period_ms=5 clock_ticks_per_s=100 clock=monotonic
    <t_ns>\t<tid>\t<state>\t<majflt>\t<utime_ticks>\t<stime_ticks>\t<comm>\t<wchan>
    # exit t_ns=...
    # stop t_ns=... samples=... overruns=...

TABs separate the fields because ``comm`` may contain spaces. The macOS build (libproc) writes the same
lines; its header adds ``source=libproc majflt=none`` (no per-thread fault count there: majflt is None).

The header comes first and names the format's version: output of another version (a sampler built from other
sources) or without the header is refused, never read as v1.

An hour of 5 ms samples of 16 threads is 11.5 M lines: ingest reads them column-wise
(``harness.collectors.sampler_tables``: the same rows as :func:`parse_sampler_threads`, which stays the
reference, the reader of anything unusual, and the one that names a malformed line).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any, BinaryIO

from ._common import header_fields, iter_lines, versioned_header
from .base import ParseError, register_parser

SAMPLER_VERSION = "v1"  # the version runner/native/sampler.c writes in its header
HEADER = "# harness-sampler"
RECORD_FIELDS = 8
# /proc/PID/task/TID/stat state letters (proc(5)); 'I' (idle kernel thread) only on kernel threads.
STATES = set("RSDZTtXxIWPK")


def _int(value: str, name: str, line: int) -> int:
    try:
        return int(value)
    except ValueError:
        raise ParseError(f"{name} is not an integer: {value!r}", line=line) from None


def sampler_header(line: str, number: int) -> dict[str, str]:
    """The fields of a ``# harness-sampler v1 ...`` header line; ParseError for a header of another version."""
    return versioned_header(line, number, "sampler", SAMPLER_VERSION)


def _no_header(first: str | None, number: int | None) -> ParseError:
    """The error for output whose first non-blank line (None: there is none) is not the sampler's header."""
    if first is None:
        return ParseError(f"no sampler header: the output is empty (expected '{HEADER} {SAMPLER_VERSION} "
                          "mode=threads ...')")
    return ParseError(f"no sampler header: expected '{HEADER} {SAMPLER_VERSION} mode=threads ...' "
                      f"first, found {first.strip()[:80]!r}", line=number)


def thread_records(data: bytes | BinaryIO) -> Iterator[dict[str, Any]]:
    """The rows of :func:`parse_sampler_threads`, one at a time (the lines are read lazily too)."""
    pid: int | None = None
    majflt_known = True  # macOS (source=libproc) has no per-thread fault count: its header says majflt=none
    seen_header = False
    for number, raw in enumerate(iter_lines(data), start=1):
        if not raw.strip():
            continue
        if not seen_header:
            if not raw.startswith(HEADER):
                raise _no_header(raw, number)  # the first non-blank line must be the header
            seen_header = True
        if raw.startswith("#"):
            fields = sampler_header(raw, number) if raw.startswith(HEADER) else header_fields(raw)
            if "harness-sampler" in raw and "mode" in fields:
                if fields["mode"] != "threads":
                    raise ParseError(f"sampler output is mode={fields['mode']}, not mode=threads",
                                     line=number)
                pid = _int(fields["pid"], "pid", number) if "pid" in fields else None
                majflt_known = fields.get("majflt") != "none"
            continue  # '# exit', '# stop' and other comments are metadata
        # Only strip the newline: a trailing TAB means an empty wchan, not a missing field.
        parts = raw.rstrip("\r\n").split("\t")
        if len(parts) != RECORD_FIELDS:
            raise ParseError(f"expected {RECORD_FIELDS} TAB-separated fields, got {len(parts)}", line=number)
        t_ns, tid, state, majflt, utime, stime, comm, wchan = parts
        if state not in STATES:
            raise ParseError(f"unknown thread state {state!r}", line=number)
        yield {
            "t_ns": _int(t_ns, "t_ns", number),
            "pid": pid,
            "tid": _int(tid, "tid", number),
            "state": state,
            "majflt": _int(majflt, "majflt", number) if majflt_known else None,
            "utime_ticks": _int(utime, "utime_ticks", number),
            "stime_ticks": _int(stime, "stime_ticks", number),
            "comm": comm,
            # The sampler prints 0 for "no wait channel" (always for R) and ? when unreadable.
            "wchan": None if wchan in ("", "0") else wchan,
        }
    if not seen_header:
        raise _no_header(None, None)


@register_parser("sampler-threads")
def parse_sampler_threads(data: bytes) -> list[dict[str, Any]]:
    """One row per (sample instant, thread)."""
    return list(thread_records(data))


def thread_state_fractions(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per thread: share of its samples running (R), in uninterruptible wait (D, mostly I/O or
    page-fault I/O) and sleeping (everything else: S, idle I, stopped T...). The three add to 100."""
    counts: dict[int, dict[str, Any]] = defaultdict(lambda: {"samples": 0, "R": 0, "D": 0, "comm": None})
    for row in rows:
        entry = counts[row["tid"]]
        entry["samples"] += 1
        entry["comm"] = row["comm"]  # threads rename themselves; keep the latest name
        if row["state"] in ("R", "D"):
            entry[row["state"]] += 1
    out = []
    for tid in sorted(counts):
        entry = counts[tid]
        n = entry["samples"]
        running, io_wait = 100.0 * entry["R"] / n, 100.0 * entry["D"] / n
        out.append({
            "tid": tid,
            "comm": entry["comm"],
            "samples": n,
            "running_pct": running,
            "io_wait_pct": io_wait,
            "sleep_pct": 100.0 * (n - entry["R"] - entry["D"]) / n,
        })
    return out


def any_d_pct(rows: list[dict[str, Any]]) -> float | None:
    """Share of sample instants at which at least one thread was in D; None without samples."""
    instants: dict[int, bool] = {}
    for row in rows:
        instants[row["t_ns"]] = instants.get(row["t_ns"], False) or row["state"] == "D"
    if not instants:
        return None
    return 100.0 * sum(instants.values()) / len(instants)
