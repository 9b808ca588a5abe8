"""``/sys/block/DEV/stat`` lines, bare or as written by the native sampler in block mode.

Field names follow the kernel's Documentation/block/stat.rst. Kernels before 4.18 print 11 fields,
4.18-5.4 add the four discard fields (15), 5.5+ add the two flush fields (17); missing ones are None.

Sampler form::

    # harness-sampler v1 mode=block dev=vda period_ms=10 clock=monotonic
    <t_ns> <stat fields...>
    # stop t_ns=... samples=... overruns=...

Ingest reads the sampler form column-wise, intervals included (``harness.collectors.sampler_tables``);
the functions here stay the reference, and the reader of anything else.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import BinaryIO, TypedDict

from ._common import header_fields, numbered_lines
from .base import ParseError, register_parser
from .sampler import HEADER, sampler_header

SECTOR_BYTES = 512  # the stat file counts 512-byte sectors whatever the device's block size
FIELDS = (
    "read_ios", "read_merges", "read_sectors", "read_ticks_ms",
    "write_ios", "write_merges", "write_sectors", "write_ticks_ms",
    "in_flight", "io_ticks_ms", "time_in_queue_ms",
    "discard_ios", "discard_merges", "discard_sectors", "discard_ticks_ms",
    "flush_ios", "flush_ticks_ms",
)
FIELD_COUNTS = (11, 15, 17)


class BlockStatRow(TypedDict):
    """One stat line: the kernel's counters as read (the discard and flush ones None where the kernel has fewer
    fields), the sectors as bytes; ``t_ns`` and ``device`` under a sampler header only."""

    t_ns: int | None
    device: str | None
    read_ios: int
    read_merges: int
    read_sectors: int
    read_ticks_ms: int
    write_ios: int
    write_merges: int
    write_sectors: int
    write_ticks_ms: int
    in_flight: int
    io_ticks_ms: int
    time_in_queue_ms: int
    discard_ios: int | None
    discard_merges: int | None
    discard_sectors: int | None
    discard_ticks_ms: int | None
    flush_ios: int | None
    flush_ticks_ms: int | None
    read_bytes: int
    write_bytes: int


class BlockDelta(TypedDict):
    """What the device did between two stat lines; None where a counter went down (reset, or wrapped at 32 bits)."""

    read_bytes: int | None
    read_ios: int | None
    write_bytes: int | None
    write_ios: int | None
    io_ticks_ms: int | None
    time_in_queue_ms: int | None
    avg_read_io_bytes: float | None


class BlockInterval(TypedDict):
    """One interval between consecutive timestamped samples of a device, as rates."""

    t_ns: int
    device: str | None
    dt_s: float
    read_bytes: int | None
    read_ios: int | None
    write_bytes: int | None
    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    avg_read_io_bytes: float | None
    avg_inflight: float | None
    util_pct: float | None


def _integers(words: list[str], line: int) -> list[int]:
    try:
        values = [int(word) for word in words]
    except ValueError:
        raise ParseError(f"expected integers, got {' '.join(words)!r}", line=line) from None
    if any(value < 0 for value in values):
        raise ParseError("negative counter in block stat line", line=line)
    return values


def _stat_row(values: list[int], line: int, t_ns: int | None, device: str | None) -> BlockStatRow:
    if len(values) not in FIELD_COUNTS:
        raise ParseError(
            f"expected 11, 15 or 17 block stat fields, got {len(values)}"
            + (" after the timestamp" if t_ns is not None else ""), line=line)
    more: list[int | None] = [*values[11:], *[None] * (len(FIELDS) - len(values))]  # discard and flush fields
    return {"t_ns": t_ns, "device": device, "read_ios": values[0], "read_merges": values[1],
            "read_sectors": values[2], "read_ticks_ms": values[3], "write_ios": values[4], "write_merges": values[5],
            "write_sectors": values[6], "write_ticks_ms": values[7], "in_flight": values[8], "io_ticks_ms": values[9],
            "time_in_queue_ms": values[10], "discard_ios": more[0], "discard_merges": more[1],
            "discard_sectors": more[2], "discard_ticks_ms": more[3], "flush_ios": more[4], "flush_ticks_ms": more[5],
            "read_bytes": values[2] * SECTOR_BYTES, "write_bytes": values[6] * SECTOR_BYTES}


@register_parser("blockstat")
def parse_blockstat(data: bytes) -> list[BlockStatRow]:
    """One row per stat line; ``t_ns`` and ``device`` are filled only under a sampler header."""
    return list(block_records(data))


def block_records(data: bytes | BinaryIO) -> Iterator[BlockStatRow]:
    """The rows of :func:`parse_blockstat`, one at a time (the lines are read lazily too)."""
    sampler: dict[str, str] | None = None
    for number, line in numbered_lines(data):
        if line.startswith("#"):
            # a sampler header of another version is refused (bare stat lines need none)
            fields = sampler_header(line, number) if line.startswith(HEADER) else header_fields(line)
            if "harness-sampler" in line and "mode" in fields:
                if fields["mode"] != "block":
                    raise ParseError(f"sampler output is mode={fields['mode']}, not mode=block", line=number)
                sampler = fields
            continue  # '# stop ...' and other comments are metadata
        values = _integers(line.split(), number)
        if sampler is not None:
            yield _stat_row(values[1:], number, values[0], sampler.get("dev"))
        else:
            yield _stat_row(values, number, None, None)


def _counter(row: Mapping[str, object], key: str) -> int | None:
    value = row.get(key)
    return value if isinstance(value, int) else None


def _diff(before: Mapping[str, object], after: Mapping[str, object], key: str) -> int | None:
    """Counter increase, or None when unknown or when it went down: the counter was reset, or it
    wrapped at 32 bits on an old kernel; either way the interval's true value is lost."""
    a, b = _counter(before, key), _counter(after, key)
    if a is None or b is None or b < a:
        return None
    return b - a


def _ratio(numerator: float | None, denominator: float | None, scale: float = 1.0) -> float | None:
    if numerator is None or not denominator:
        return None
    return scale * numerator / denominator


def delta(before: Mapping[str, object], after: Mapping[str, object]) -> BlockDelta:
    """What happened on the device between two snapshots (e.g. before and after one request): two BlockStatRows,
    or any mappings of their counters (one missing is unknown)."""
    read_sectors = _diff(before, after, "read_sectors")
    write_sectors = _diff(before, after, "write_sectors")
    read_ios = _diff(before, after, "read_ios")
    read_bytes = None if read_sectors is None else read_sectors * SECTOR_BYTES
    return {
        "read_bytes": read_bytes,
        "read_ios": read_ios,
        "write_bytes": None if write_sectors is None else write_sectors * SECTOR_BYTES,
        "write_ios": _diff(before, after, "write_ios"),
        "io_ticks_ms": _diff(before, after, "io_ticks_ms"),
        "time_in_queue_ms": _diff(before, after, "time_in_queue_ms"),
        "avg_read_io_bytes": _ratio(read_bytes, read_ios),
    }


def _interval(before: BlockStatRow, after: BlockStatRow, t_ns: int, dt_ns: int) -> BlockInterval:
    if dt_ns <= 0:
        raise ValueError(f"block samples are not in time order at t_ns={t_ns}")
    dt_s, dt_ms = dt_ns / 1e9, dt_ns / 1e6
    d = delta(before, after)
    return {
        "t_ns": t_ns,
        "device": after.get("device"),
        "dt_s": dt_s,
        "read_bytes": d["read_bytes"],
        "read_ios": d["read_ios"],
        "write_bytes": d["write_bytes"],
        "read_bytes_per_s": _ratio(d["read_bytes"], dt_s),
        "write_bytes_per_s": _ratio(d["write_bytes"], dt_s),
        "avg_read_io_bytes": d["avg_read_io_bytes"],
        # time_in_queue sums the time every request spent in flight, so over the interval it is
        # the average number of requests in flight (average queue depth).
        "avg_inflight": _ratio(d["time_in_queue_ms"], dt_ms),
        # Not clamped: io_ticks advances in jiffies (1-10 ms), so at 10 ms periods one interval can
        # read 120 % (seen on a virtio disk); averaging over intervals is where it becomes exact.
        "util_pct": _ratio(d["io_ticks_ms"], dt_ms, 100.0),
    }


def derive_intervals(rows: Sequence[BlockStatRow]) -> list[BlockInterval]:
    """Per-interval rates from consecutive timestamped samples (docs/methodology.md section 5), per device."""
    previous: dict[str | None, tuple[BlockStatRow, int]] = {}
    out = []
    for row in rows:
        t_ns = row.get("t_ns")
        if t_ns is None:
            raise ValueError("derive_intervals needs timestamped samples (sampler output with t_ns)")
        device = row.get("device")
        if device in previous:
            before, t_before = previous[device]
            out.append(_interval(before, row, t_ns, t_ns - t_before))
        previous[device] = (row, t_ns)
    return out


def parse_snapshot(line: str | None) -> BlockStatRow | None:
    """One ``/sys/block/DEV/stat`` line as recorded in run.json, or None when missing or unreadable
    (a run that died before its snapshot still ingests)."""
    if not line:
        return None
    try:
        return parse_blockstat(line.encode())[0]
    except (ParseError, IndexError):
        return None
