"""The native sampler's captures as Arrow tables, read column-wise: what ingest uses for ``threads.txt`` and
``blockstat.txt``. An hour of 5 ms samples of 16 threads is 11.5 M lines; one dict per line (the per-line
parsers, :mod:`harness.parsers.sampler` and :mod:`harness.parsers.blockstat`) took minutes and about 10 GiB for it.

The tables hold exactly the rows of the per-line parsers (None as null; strings large_string, as pandas writes
them to parquet), and the interval rates exactly as :func:`harness.parsers.blockstat.derive_intervals` computes
them, in the same order of float operations. Whatever the column-wise reader cannot vouch for (see
:mod:`harness.collectors.columnar`) is read by the per-line parsers, so a malformed capture fails with the same
one error naming its line.

A capture is bytes or a seekable binary stream (an open file: read a block at a time, never held whole).
The parsers stay standard-library only (``harness parse``, and the reference); this module is imported by the
collectors' ingest when it runs, so pyarrow loads with the first ingest, not with every command.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from harness.collectors.columnar import (
    Capture,
    constant,
    leading_header,
    null_where_in,
    read_records,
    stream_of,
    table_from_records,
)
from harness.parsers.base import ParseError
from harness.parsers.blockstat import FIELD_COUNTS, FIELDS, SECTOR_BYTES, block_records, derive_intervals
from harness.parsers.sampler import (
    CLASSES,
    NO_CLASS,
    STATES,
    STATES_V2,
    sampler_header,
    thread_records,
)

# line order: v1 records are the first eight, v2 adds the wait class and the syscall number, v3 the pid second
_THREAD_RECORD = ("t_ns", "tid", "state", "majflt", "utime_ticks", "stime_ticks", "comm", "wchan", "class", "syscall")
_RECORD_NAMES = {"v1": _THREAD_RECORD[:8], "v2": _THREAD_RECORD, "v3": ("t_ns", "pid", *_THREAD_RECORD[1:])}
_STATE_SET = {"v1": pa.array(sorted(STATES), pa.large_string()), "v2": pa.array(sorted(STATES_V2), pa.large_string()),
              "v3": pa.array(sorted(STATES_V2), pa.large_string())}
_CLASS_SET = pa.array([*CLASSES, *NO_CLASS], pa.large_string())
_NO_CLASS = pa.array(list(NO_CLASS), pa.large_string())
_NO_WCHAN = pa.array(["", "0"], pa.large_string())  # the sampler prints 0 for "no wait channel", ? for unreadable
THREAD_SCHEMA = pa.schema([
    ("t_ns", pa.int64()), ("pid", pa.int64()), ("tid", pa.int64()), ("state", pa.large_string()),
    ("majflt", pa.int64()), ("utime_ticks", pa.int64()), ("stime_ticks", pa.int64()), ("comm", pa.large_string()),
    ("wchan", pa.large_string()), ("class", pa.large_string()), ("syscall", pa.int64()),
])
BLOCK_SCHEMA = pa.schema([("t_ns", pa.int64()), ("device", pa.large_string())]
                         + [(name, pa.int64()) for name in (*FIELDS, "read_bytes", "write_bytes")])
# What the blockstat collector adds to every sample but the first (the rates over the interval ending there).
INTERVAL_COLUMNS = ("dt_s", "read_bytes_per_s", "write_bytes_per_s", "avg_read_io_bytes", "avg_inflight",
                    "util_pct")


def _sampler_fields(capture: Capture, mode: str) -> tuple[dict[str, str], int] | None:
    """The header's fields and where the records start, for a capture that opens with a v1, v2 or v3 header of
    ``mode``; None for anything else (the per-line parser reads it, and names what is wrong)."""
    header = leading_header(capture)
    if header is None:
        return None
    try:
        fields = sampler_header(header[0], 1)
    except ParseError:
        return None
    return (fields, header[1]) if fields.get("mode") == mode else None


# --- thread mode -------------------------------------------------------------------------------------

def sampler_threads_table(capture: Capture) -> pa.Table:
    """:func:`harness.parsers.sampler.parse_sampler_threads` as a table of :data:`THREAD_SCHEMA`."""
    table = _threads_by_columns(capture)
    return table if table is not None else table_from_records(thread_records(capture), THREAD_SCHEMA)


def _threads_by_columns(capture: Capture) -> pa.Table | None:
    opened = _sampler_fields(capture, "threads")
    if opened is None:
        return None
    fields, start = opened
    try:
        pid = int(fields["pid"]) if "pid" in fields else None
    except ValueError:
        return None
    majflt_known = fields.get("majflt") != "none"  # macOS (libproc) has no per-thread fault count
    version = fields["version"]
    names = list(_RECORD_NAMES[version])
    types = {name: THREAD_SCHEMA.field(name).type for name in names}
    if not majflt_known:
        types["majflt"] = pa.large_string()  # whatever is printed there is not read, as line by line
    # v2 and v3 leave majflt, utime and stime empty where stat was not read: null; t_ns, pid and tid never are
    records = read_records(capture, start, names, types, "\t", empty_is_null=version != "v1")
    if records is None or any(records[name].null_count for name in ("t_ns", "tid", "pid") if name in names) \
            or not pc.all(pc.is_in(records["state"], _STATE_SET[version])).as_py():
        return None
    columns = {name: records[name] for name in names}
    length = records.num_rows
    if version != "v3":
        columns["pid"] = constant(pid, pa.int64(), length)  # v1, v2: the header's (the step's process only)
    if not majflt_known:
        columns["majflt"] = constant(None, pa.int64(), length)
    columns["wchan"] = null_where_in(records["wchan"], _NO_WCHAN)
    if version != "v1":
        if not pc.all(pc.is_in(records["class"], _CLASS_SET)).as_py():
            return None  # the per-line parser names the line with an unknown class
        columns["class"] = null_where_in(records["class"], _NO_CLASS)
    else:
        columns["class"] = constant(None, pa.large_string(), length)
        columns["syscall"] = constant(None, pa.int64(), length)
    return pa.table([columns[name] for name in THREAD_SCHEMA.names], schema=THREAD_SCHEMA)


# --- block mode --------------------------------------------------------------------------------------

def blockstat_table(capture: Capture) -> pa.Table:
    """:func:`harness.parsers.blockstat.parse_blockstat` as a table of :data:`BLOCK_SCHEMA`."""
    table = _blocks_by_columns(capture)
    return table if table is not None else table_from_records(block_records(capture), BLOCK_SCHEMA)


def _first_record_width(capture: Capture, start: int) -> int | None:
    """Words on the first record line after ``start`` (comments and blank lines skipped); None if none."""
    stream = stream_of(capture)
    stream.seek(start)
    for line in stream:
        if line.strip() and not line.startswith(b"#"):
            return len(line.rstrip(b"\n").split(b" "))
    return None


def _blocks_by_columns(capture: Capture) -> pa.Table | None:
    opened = _sampler_fields(capture, "block")
    if opened is None:
        return None
    fields, start = opened
    width = _first_record_width(capture, start)
    if width is None or width - 1 not in FIELD_COUNTS:
        return None
    names = ["t_ns", *FIELDS[:width - 1]]
    records = read_records(capture, start, names, dict.fromkeys(names, pa.int64()), " ")
    if records is None or any((pc.min(records[name]).as_py() or 0) < 0 for name in names):
        return None  # the per-line parser names the line with a negative counter
    length = records.num_rows
    columns = {name: records[name] if name in names else constant(None, pa.int64(), length) for name in FIELDS}
    columns.update(t_ns=records["t_ns"], device=constant(fields.get("dev"), pa.large_string(), length),
                   read_bytes=pc.multiply(records["read_sectors"], SECTOR_BYTES),
                   write_bytes=pc.multiply(records["write_sectors"], SECTOR_BYTES))
    return pa.table([columns[name] for name in BLOCK_SCHEMA.names], schema=BLOCK_SCHEMA)


def with_intervals(table: pa.Table) -> pa.Table:
    """``table`` (block samples) plus :data:`INTERVAL_COLUMNS`, null on each device's first sample: the
    blockstat collector's columns, as :func:`harness.parsers.blockstat.derive_intervals` computes them (its
    ValueErrors too)."""
    if table.num_rows == 0 or table["t_ns"].null_count or pc.count_distinct(table["device"], mode="all").as_py() > 1:
        return _with_intervals_by_rows(table)  # bare stat lines or several devices: the reference, row by row
    t_ns = table["t_ns"].to_numpy()
    late = np.flatnonzero(np.diff(t_ns) <= 0)
    if late.size:
        raise ValueError(f"block samples are not in time order at t_ns={t_ns[late[0] + 1]}")
    dt_ns = pa.array(np.diff(t_ns))
    dt_s, dt_ms = _float_ratio(dt_ns, 1e9), _float_ratio(dt_ns, 1e6)
    read_bytes = pc.multiply(_increase(table["read_sectors"]), SECTOR_BYTES)
    read_ios = _increase(table["read_ios"])
    derived = {
        "dt_s": dt_s,
        "read_bytes_per_s": _ratio(read_bytes, dt_s),
        "write_bytes_per_s": _ratio(pc.multiply(_increase(table["write_sectors"]), SECTOR_BYTES), dt_s),
        "avg_read_io_bytes": _ratio(read_bytes, _null_where(pc.equal(read_ios, 0), read_ios)),  # 0 I/Os: None
        # time_in_queue sums every request's time in flight: over the interval, the average queue depth
        "avg_inflight": _ratio(_increase(table["time_in_queue_ms"]), dt_ms),
        "util_pct": _ratio(_increase(table["io_ticks_ms"]), dt_ms, 100.0),  # not clamped, as row by row
    }
    for name in INTERVAL_COLUMNS:
        table = table.append_column(pa.field(name, pa.float64()),
                                    pa.chunked_array([pa.nulls(1, pa.float64()), derived[name]]))
    return table


def _increase(column: pa.ChunkedArray) -> pa.Array:
    """Counter increase from each sample to the next; null when unknown or when it went down (a reset, or a
    32-bit wrap on an old kernel), as ``blockstat._diff``."""
    values = column.combine_chunks()
    step = pc.subtract(values.slice(1), values.slice(0, len(values) - 1))
    return _null_where(pc.less(step, 0), step)


def _null_where(mask: pa.Array, values: pa.Array) -> pa.Array:
    return pc.if_else(mask, pa.scalar(None, values.type), values)


def _float_ratio(numerator: pa.Array, denominator: float) -> pa.Array:
    return pc.divide(pc.cast(numerator, pa.float64(), safe=False), denominator)


def _ratio(numerator: pa.Array, denominator: Any, scale: float = 1.0) -> pa.Array:
    """``scale * numerator / denominator`` in that order (as ``blockstat._ratio``); null where either is."""
    scaled = pc.multiply(pc.cast(numerator, pa.float64(), safe=False), scale)
    if pa.types.is_integer(denominator.type):
        denominator = pc.cast(denominator, pa.float64(), safe=False)
    return pc.divide(scaled, denominator)


def _with_intervals_by_rows(table: pa.Table) -> pa.Table:
    rows = table.to_pylist()
    for row, interval in zip(rows[1:], derive_intervals(rows), strict=True):
        values: Mapping[str, object] = interval  # its columns by name
        row.update((name, values[name]) for name in INTERVAL_COLUMNS)
    schema = table.schema
    for name in INTERVAL_COLUMNS:
        schema = schema.append(pa.field(name, pa.float64()))
    return table_from_records(rows, schema)
