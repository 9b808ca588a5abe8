"""The native sampler in thread mode: one TAB-separated record per thread per sample instant, of every process of
the step's tree (v3).

::

    # harness-sampler v3 mode=threads pid=123 period_ms=5 clock_ticks_per_s=100 stat_every=20 wchan=0 arch=x86_64
      gate=schedstat tree=ppid tree_every=20 slice_us=100 clock=monotonic                (one line)
    # proc t_ns=... pid=124 ppid=123<TAB>comm=fio<TAB>cmd=fio --name=job ...
                      (a process found, at its first sample; again, same pid, when its comm changed: an exec)
    <t_ns>\t<pid>\t<tid>\t<state>\t<majflt>\t<utime_ticks>\t<stime_ticks>\t<comm>\t<wchan>\t<class>\t<syscall>
    # proc_end pid=124 first_ns=... last_ns=... gone=1             (gone=1: it exited; gone=0: still there at the stop)
    # exit t_ns=... [late_us_p50=... late_us_p90=... late_us_p99=... late_us_max=...]
    # stop t_ns=... samples=... overruns=... [late_us_p50=... late_us_p90=... late_us_p99=... late_us_max=...]

v3 follows the step's process and its descendants (``tree=ppid``: found by a scan of /proc every ``tree_every``
samples, runner/native/proctree.h; ``tree=none``: the step's process only, as before -- ``--no-tree``, and macOS);
every record carries the pid (tgid) of its thread, and the tree is recorded in the ``# proc`` / ``# proc_end``
lines (:func:`process_records`: pid, ppid, comm and the head of the command line -- as found, or as it was after
an exec that renamed it -- its first and last sample, whether it exited). ``last_ns`` is the last sample with a
record of one of its threads.

v2 reads ``/proc/.../syscall`` of every thread every sample and ``stat`` every ``stat_every`` samples (runner/native/
sampler.c says why). So in v2 and v3: ``state`` is ``R`` (running or runnable), the stat letter where stat was
read, or ``-`` (off CPU, D or S not read); majflt/utime/stime are empty (None) where stat was not read; ``comm`` is
the name at the thread's last stat read; ``wchan`` is empty unless the header says ``wchan=1``; ``class`` is the
wait class of a thread off CPU (:data:`CLASSES`; empty for a running thread, ``?`` where syscall was unreadable:
both None) and ``syscall`` its syscall number for the header's ``arch`` (-1: not in a syscall, i.e. a page fault).
v2 (older raw data) had no pid field (its rows take the header's pid) and followed the step's process only.

v1 (older raw data): the first eight fields of v2, stat and wchan of every thread every sample; its rows have class
and syscall None.

TABs separate the fields because ``comm`` may contain spaces. The macOS build (libproc) writes the same
lines; its header adds ``source=libproc majflt=none class=none tree=none`` (no per-thread fault count there: majflt
is None; no syscall: class None).

The header comes first and names the format's version: output of another version (a sampler built from other
sources) or without the header is refused, never read as another version.

An hour of 5 ms samples of 16 threads is 11.5 M lines: ingest reads them column-wise
(``harness.collectors.sampler_tables``: the same rows as :func:`parse_sampler_threads`, which stays the
reference, the reader of anything unusual, and the one that names a malformed line).
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Iterator
from typing import BinaryIO, TypedDict

from ._common import header_fields, iter_lines, versioned_header
from .base import ParseError, register_parser

SAMPLER_VERSION = "v3"  # the version runner/native/sampler.c writes in its header
# v1: raw data recorded before the wait classes; v2: before the process tree (block mode is the same in all three)
READABLE_VERSIONS = ("v1", "v2", "v3")
HEADER = "# harness-sampler"
RECORD_FIELDS = {"v1": 8, "v2": 10, "v3": 11}
PROC_LINE, PROC_END_LINE = "# proc ", "# proc_end "
BLOCK_BYTES = 16 << 20  # process_records reads a capture this much at a time
# /proc/PID/task/TID/stat state letters (proc(5)); 'I' (idle kernel thread) only on kernel threads.
STATES = set("RSDZTtXxIWPK")
STATES_V2 = STATES | {"-"}  # v2: off CPU, stat not read in that sample
# The wait classes of a thread off CPU (v2), from its syscall: fault_io (-1: a page fault), read_io (read, pread64,
# readv, preadv, preadv2, and the async I/O waits io_uring_enter, io_getevents, io_pgetevents; a read of a pipe,
# socket or eventfd is idle), futex (futex, futex_waitv),
# gpu (ioctl on a GPU device fd), idle (epoll, poll, select, nanosleep), other.
CLASSES = ("fault_io", "read_io", "futex", "gpu", "idle", "other")
NO_CLASS = ("", "?")  # running; syscall unreadable

# one thread at one sample instant; a counter, wchan, class or syscall the sampler did not read is None ("class" is
# a keyword: functional form)
ThreadSample = TypedDict("ThreadSample", {
    "t_ns": int, "pid": int | None, "tid": int, "state": str, "majflt": int | None, "utime_ticks": int | None,
    "stime_ticks": int | None, "comm": str, "wchan": str | None, "class": str | None, "syscall": int | None})


class ProcessRow(TypedDict):
    """One process of the step's tree, from its ``# proc`` line(s) and its ``# proc_end`` line."""

    pid: int
    ppid: int | None  # None: 0 printed (its parent was not known)
    comm: str | None
    cmd: str | None
    t_ns: int
    first_ns: int
    last_ns: int | None  # None: the capture ends before its end line
    gone: bool | None  # True: it exited; False: still there at the stop; None: unknown


class ThreadStates(TypedDict):
    """A thread's samples running, in I/O wait and sleeping, in per cent of its samples."""

    tid: int
    comm: str | None
    samples: int
    running_pct: float
    io_wait_pct: float
    sleep_pct: float


def _int(value: str, name: str, line: int) -> int:
    try:
        return int(value)
    except ValueError:
        raise ParseError(f"{name} is not an integer: {value!r}", line=line) from None


def sampler_header(line: str, number: int) -> dict[str, str]:
    """The fields of a ``# harness-sampler v1|v2|v3 ...`` header line, plus ``version``; ParseError for a header of
    another version."""
    words = line.split()
    found = words[2] if len(words) > 2 else None
    fields = versioned_header(line, number, "sampler", found if found in READABLE_VERSIONS
                              else " or ".join(READABLE_VERSIONS))
    return {**fields, "version": str(found)}


def _no_header(first: str | None, number: int | None) -> ParseError:
    """The error for output whose first non-blank line (None: there is none) is not the sampler's header."""
    if first is None:
        return ParseError(f"no sampler header: the output is empty (expected '{HEADER} {SAMPLER_VERSION} "
                          "mode=threads ...')")
    return ParseError(f"no sampler header: expected '{HEADER} {SAMPLER_VERSION} mode=threads ...' "
                      f"first, found {first.strip()[:80]!r}", line=number)


def _optional_int(value: str, name: str, line: int) -> int | None:
    return None if value == "" else _int(value, name, line)


def _v2_fields(parts: list[str], number: int) -> tuple[str | None, int | None]:
    """(class, syscall) of a v2 record."""
    cls, nr = parts[8], parts[9]
    if cls not in CLASSES and cls not in NO_CLASS:
        raise ParseError(f"unknown wait class {cls!r}", line=number)
    return (None if cls in NO_CLASS else cls), _optional_int(nr, "syscall", number)


def thread_records(data: bytes | BinaryIO) -> Iterator[ThreadSample]:
    """The rows of :func:`parse_sampler_threads`, one at a time (the lines are read lazily too)."""
    pid: int | None = None
    majflt_known = True  # macOS (source=libproc) has no per-thread fault count: its header says majflt=none
    version = SAMPLER_VERSION
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
                version = fields.get("version", version)
            continue  # '# exit', '# stop' and other comments are metadata
        # Only strip the newline: a trailing TAB means an empty wchan, not a missing field.
        parts = raw.rstrip("\r\n").split("\t")
        if len(parts) != RECORD_FIELDS[version]:
            raise ParseError(f"expected {RECORD_FIELDS[version]} TAB-separated fields, got {len(parts)}", line=number)
        record_pid = _int(parts.pop(1), "pid", number) if version == "v3" else pid  # v3: the thread's own
        t_ns, tid, state, majflt, utime, stime, comm, wchan = parts[:8]
        if state not in (STATES if version == "v1" else STATES_V2):
            raise ParseError(f"unknown thread state {state!r}", line=number)
        # v2 and v3 leave the counters empty where stat was not read; v1 always printed them
        number_of = _int if version == "v1" else _optional_int
        cls, nr = (None, None) if version == "v1" else _v2_fields(parts, number)
        yield {
            "t_ns": _int(t_ns, "t_ns", number),
            "pid": record_pid,
            "tid": _int(tid, "tid", number),
            "state": state,
            "majflt": number_of(majflt, "majflt", number) if majflt_known else None,
            "utime_ticks": number_of(utime, "utime_ticks", number),
            "stime_ticks": number_of(stime, "stime_ticks", number),
            "comm": comm,
            # The sampler prints 0 for "no wait channel" (always for R) and ? when unreadable; v2: empty if not read.
            "wchan": None if wchan in ("", "0") else wchan,
            "class": cls,
            "syscall": nr,
        }
    if not seen_header:
        raise _no_header(None, None)


def _proc_fields(raw: str, number: int) -> dict[str, str]:
    """The fields of a ``# proc`` line: key=value words, then TAB-separated ``comm=`` and ``cmd=`` (which may hold
    spaces)."""
    head, *rest = raw.rstrip("\r\n").split("\t")
    fields = header_fields(head)
    for part in rest:
        key, sep, value = part.partition("=")
        if not sep:
            raise ParseError(f"proc line: expected KEY=VALUE after a TAB, found {part[:40]!r}", line=number)
        fields[key] = value
    return fields


def _comment_lines(data: bytes | BinaryIO, prefix: bytes) -> Iterator[tuple[int, str]]:
    """(line number, text) of the lines that start with ``prefix``, found with bytes.find a block at a time: an hour's
    capture is millions of record lines and a handful of these."""
    stream = io.BytesIO(data) if isinstance(data, bytes | bytearray | memoryview) else data
    stream.seek(0)
    needle, base, rest = b"\n" + prefix, 1, b""  # base: the number of the block's first line
    while True:
        block = stream.read(BLOCK_BYTES)
        text = rest + block
        cut = len(text) if not block else text.rfind(b"\n") + 1  # whole lines only, all of it at the end
        lines, rest = text[:cut], text[cut:]
        hay = b"\n" + lines  # a match at hay[i] is a line that starts at lines[i]
        pos, line, at = 0, base, hay.find(needle)
        while at >= 0:
            line += lines.count(b"\n", pos, at)
            pos = at
            end = lines.find(b"\n", at)
            end = len(lines) if end < 0 else end
            yield line, lines[at:end].decode("utf-8", errors="replace")
            at = hay.find(needle, end + 1)
        base = line + lines.count(b"\n", pos)
        if not block:
            return


def process_records(data: bytes | BinaryIO) -> list[ProcessRow]:
    """One row per process of the step's tree (v3 ``# proc`` and ``# proc_end`` lines): pid, ppid, comm, cmd, t_ns
    (= first_ns, the sample that found it), first_ns, last_ns (None: the capture ends before its end line) and
    gone (True: it exited; False: still there at the stop; None: unknown). v1 and v2 captures have none."""
    rows: list[ProcessRow] = []
    open_rows: dict[int, ProcessRow] = {}  # a pid may be reused by a later process
    for number, raw in _comment_lines(data, PROC_LINE.rstrip().encode()):
        if raw.startswith(PROC_LINE):
            fields = _proc_fields(raw, number)
            pid = _int(fields.get("pid", ""), "pid", number)
            first = _int(fields.get("t_ns", ""), "t_ns", number)
            if pid in open_rows:  # the same process renamed (an exec after it was found): its new comm and cmd
                open_rows[pid]["comm"], open_rows[pid]["cmd"] = fields.get("comm"), fields.get("cmd")
                continue
            open_rows[pid] = {"pid": pid, "ppid": _int(fields.get("ppid", ""), "ppid", number) or None,
                              "comm": fields.get("comm"), "cmd": fields.get("cmd"), "t_ns": first,
                              "first_ns": first, "last_ns": None, "gone": None}
            rows.append(open_rows[pid])
        elif raw.startswith(PROC_END_LINE):
            fields = header_fields(raw)
            pid = _int(fields.get("pid", ""), "pid", number)
            if pid not in open_rows:
                raise ParseError(f"proc_end of pid {pid} without its '# proc' line", line=number)
            ended = open_rows.pop(pid)
            ended["last_ns"] = _int(fields.get("last_ns", ""), "last_ns", number)
            ended["gone"] = fields.get("gone") == "1"
    return rows


@register_parser("sampler-processes")
def parse_sampler_processes(data: bytes) -> list[ProcessRow]:
    """The step's process tree as the thread sampler saw it: one row per process."""
    return process_records(data)


@register_parser("sampler-threads")
def parse_sampler_threads(data: bytes) -> list[ThreadSample]:
    """One row per (sample instant, thread)."""
    return list(thread_records(data))


LATE_KEYS = ("late_us_p50", "late_us_p90", "late_us_p99", "late_us_max")


def sampler_lateness(tail: bytes) -> dict[str, int]:
    """How late the samples were taken (their start minus their deadline, in microseconds: p50, p90, p99, max),
    from the last ``# exit`` or ``# stop`` line in ``tail`` (the end of a capture, block or threads mode); {} where
    there is none, or it predates the lateness fields."""
    for raw in reversed(tail.decode(errors="replace").splitlines()):
        if raw.startswith(("# stop ", "# exit ")):
            fields = header_fields(raw)
            if all(fields.get(key, "").isdigit() for key in LATE_KEYS):
                return {key: int(fields[key]) for key in LATE_KEYS}
            return {}
    return {}


def _in_io_wait(row: ThreadSample) -> bool:
    """D, or (v2, where the state letter of a thread off CPU is mostly not read) an I/O wait class."""
    return row["state"] == "D" or row.get("class") in ("fault_io", "read_io")


def thread_state_fractions(rows: list[ThreadSample]) -> list[ThreadStates]:
    """Per thread: share of its samples running (R), in I/O wait (D, mostly I/O or page-fault I/O; v2: or the
    class fault_io/read_io) and sleeping (everything else: S, idle I, stopped T, '-' ...). The three add to 100."""
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])  # samples, R, D
    names: dict[int, str] = {}  # threads rename themselves; keep the latest name
    for row in rows:
        entry = counts[row["tid"]]
        entry[0] += 1
        names[row["tid"]] = row["comm"]
        if row["state"] == "R":
            entry[1] += 1
        elif _in_io_wait(row):
            entry[2] += 1
    out: list[ThreadStates] = []
    for tid in sorted(counts):
        n, in_r, in_d = counts[tid]
        running, io_wait = 100.0 * in_r / n, 100.0 * in_d / n
        out.append({
            "tid": tid,
            "comm": names[tid],
            "samples": n,
            "running_pct": running,
            "io_wait_pct": io_wait,
            "sleep_pct": 100.0 * (n - in_r - in_d) / n,
        })
    return out


def any_d_pct(rows: list[ThreadSample]) -> float | None:
    """Share of sample instants at which at least one thread was in I/O wait (D, or v2's fault_io/read_io); None
    without samples."""
    instants: dict[int, bool] = {}
    for row in rows:
        instants[row["t_ns"]] = instants.get(row["t_ns"], False) or _in_io_wait(row)
    if not instants:
        return None
    return 100.0 * sum(instants.values()) / len(instants)
