"""The offcpu collector's capture (``offcpu.txt``, runner/collectors/offcpu.py): bpftrace's exact off-CPU time of
the threads of the step's process and of its descendants (v2), cumulative since its attach, one TAB-separated line
per thread and key per snapshot.

::

    # harness-offcpu v2 pid=123 period_ms=1000 clock=monotonic arch=x86_64 bpftrace=v0.17.0 tracefs=mounted
    # proc t_ns=... pid=124 ppid=123<TAB>comm=fio<TAB>cmd=       (a process of the tree, at the first snapshot with it)
    s  t_ns pid tid class state syscall device blocked_ns runqueue_ns count comm
    # stop t_ns=... snapshots=... cpu_s=... tracefs_restored=yes|no|- lost=N noregs=N unseen=N unwoken=N

``blocked_ns`` is the time asleep (switch-out to wake-up), ``runqueue_ns`` the wait for a CPU after the wake-up
(for class ``runqueue``, state R: preempted, the whole time off CPU). Rows carry the header's ``pid``, ``arch``
and ``bpftrace``. ``unwoken`` counts the sleeps whose wake-up bpftrace did not see (the sched_wakeup program is
skipped when it interrupts another BPF program on that CPU): their wait for a CPU is counted as blocked. ``unseen``
counts the switches in or out that bpftrace missed (before the collector closed intervals at the next switch out
from the thread's CPU time, the off-CPU interval was then lost), ``noregs`` the switches out
whose syscall could not be read (syscall ``unknown``), ``lost`` the events bpftrace's perf buffer dropped; captures
before issue 13 have only ``unwoken`` and ``unseen``, the missing counts are left empty. Output of another version,
or without the header, is refused.

v2 carries each thread's process (``pid``, second; the rows' ``pid`` is the thread's own, the header's is the
step's); v1 (older raw data) had the step's process only, its rows take the header's pid.
"""

from __future__ import annotations

from typing import NamedTuple, TypedDict

from ._common import headed_rows, header_fields, iter_lines, versioned_header
from .base import ParseError, register_parser

VERSION = "v2"
READABLE_VERSIONS = ("v1", "v2")
COLUMNS = ("t_ns", "tid", "class", "state", "syscall", "device", "blocked_ns", "runqueue_ns", "count", "comm")
INTEGERS = ("t_ns", "tid", "blocked_ns", "runqueue_ns", "count")
CLASSES = ("fault_io", "read_io", "futex", "gpu", "idle", "other", "runqueue")


class OffcpuHeader(NamedTuple):
    """What the ``# harness-offcpu`` line says: its version, the step's pid, the architecture and bpftrace's."""

    version: str | None
    pid: int
    arch: str | None
    bpftrace: str | None


# one thread's cumulative off-CPU time in one class key at one snapshot ("class" is a keyword: functional form)
OffcpuRow = TypedDict("OffcpuRow", {
    "t_ns": int, "tid": int, "class": str, "state": str, "syscall": str, "device": str, "blocked_ns": int,
    "runqueue_ns": int, "count": int, "comm": str, "pid": int, "arch": str | None, "bpftrace": str | None})


def _int(text: str, name: str, number: int) -> int:
    try:
        return int(text)
    except ValueError:
        raise ParseError(f"{name} is not an integer: {text!r}", line=number) from None


def _row(parts: list[str], number: int, header: OffcpuHeader) -> OffcpuRow:
    if parts[0] != "s":
        raise ParseError(f"unknown line kind {parts[0]!r} (expected s or a # comment)", line=number)
    width = len(COLUMNS) + (2 if header.version == "v2" else 1)
    if len(parts) != width:
        raise ParseError(f"expected {width} TAB-separated fields, got {len(parts)}", line=number)
    pid = header.pid
    if header.version == "v2":  # the thread's own process, second
        text = parts.pop(2)
        if not text.isdigit():
            raise ParseError(f"pid is not an integer: {text!r}", line=number)
        pid = int(text)
    fields = dict(zip(COLUMNS, parts[1:], strict=True))
    t_ns, tid, blocked_ns, runqueue_ns, count = (_int(fields[name], name, number) for name in INTEGERS)
    if fields["class"] not in CLASSES:
        raise ParseError(f"unknown class {fields['class']!r} (known: {', '.join(CLASSES)})", line=number)
    return {"t_ns": t_ns, "tid": tid, "class": fields["class"], "state": fields["state"],
            "syscall": fields["syscall"], "device": fields["device"], "blocked_ns": blocked_ns,
            "runqueue_ns": runqueue_ns, "count": count, "comm": fields["comm"], "pid": pid, "arch": header.arch,
            "bpftrace": header.bpftrace}


def _facts(line: str, number: int) -> OffcpuHeader:
    words = line.split()
    found = words[2] if len(words) > 2 else None
    fields = versioned_header(line, number, "offcpu", found if found in READABLE_VERSIONS
                              else " or ".join(READABLE_VERSIONS))
    if not fields.get("pid", "").isdigit():
        raise ParseError(f"offcpu header without a numeric pid: {line.strip()[:80]!r}", line=number)
    return OffcpuHeader(found, int(fields["pid"]), fields.get("arch"), fields.get("bpftrace"))


@register_parser("offcpu")
def parse_offcpu(data: bytes) -> list[OffcpuRow]:
    """One row per thread, class key (state, syscall, device) and snapshot, cumulative."""
    return headed_rows(data, "offcpu", VERSION, _facts, _row)


MISSED = ("unwoken", "unseen", "noregs", "lost")


def offcpu_notes(data: bytes) -> dict[str, str]:
    """The ``# stop`` line's fields (the reader's CPU, snapshots, whether tracefs was restored, what bpftrace missed)
    for each row."""
    for raw in iter_lines(data):
        if raw.startswith("# stop "):
            stop = header_fields(raw)
            keys = ("snapshots", "cpu_s", "tracefs_restored", *MISSED)
            return {f"collector_{key}": stop[key] for key in keys if key in stop}
    return {}


def missed_events(notes: dict[str, str]) -> dict[str, int]:
    """What bpftrace missed, from :func:`offcpu_notes`: {count name: N} for the counts above zero."""
    counts = {key: notes.get(f"collector_{key}", "0") for key in MISSED}
    return {key: int(value) for key, value in counts.items() if value.isdigit() and int(value) > 0}
