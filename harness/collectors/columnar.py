"""The column-wise path of the sampler's collectors: a capture's records read straight into Arrow columns
(pyarrow.csv), for captures of millions of lines, where one dict per line costs minutes and gigabytes.

It vouches only for input it reads exactly as the per-line parser does; for anything else (a byte that
``str.splitlines`` takes for a line break besides ``\\n``, ``0x`` that pyarrow would convert as a hexadecimal
integer where ``int()`` refuses it, a second header, a field that does not convert, a record of another length)
:func:`read_records` returns None and the caller reads the capture again with its per-line parser, which gives
the rows or the one precise error (line and what).

A capture is bytes, or a seekable binary stream (an open file): a stream is read a block at a time, never held
whole, and may be read more than once.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

Capture = bytes | BinaryIO
SAMPLER_HEADER = b"# harness-sampler"
# Bytes the per-line parsers read differently: line breaks of str.splitlines other than \n (\r included: the
# sampler never writes one), and 0x/0X, which pyarrow converts as a hexadecimal integer where int() refuses it.
_UNLIKE_PER_LINE = rb"[\r\x0b\x0c\x1c-\x1e]|\xc2\x85|\xe2\x80[\xa8\xa9]|0[xX]"
_SCAN_BYTES = 16 << 20
BLOCK_BYTES = 16 << 20  # pyarrow.csv block: fewer, larger blocks parse faster on 2 cores
ROWS_PER_CHUNK = 1 << 16


def stream_of(capture: Capture) -> BinaryIO:
    """A capture as a binary stream at its start: bytes are wrapped (not copied), an open file is rewound."""
    if isinstance(capture, bytes | bytearray | memoryview):
        return io.BytesIO(capture)
    capture.seek(0)
    return capture


def leading_header(capture: Capture) -> tuple[str, int] | None:
    """The first line (decoded) and the offset of the records after it, when the capture opens with a
    sampler header; None otherwise (a BOM or blank lines first are for the per-line parser)."""
    first = stream_of(capture).readline()
    if not first.startswith(SAMPLER_HEADER):
        return None
    return first.decode("utf-8", errors="replace"), len(first)


def _one_value(block: bytes) -> pa.Array:
    """A block as the one value of a binary array, without a copy: one RE2 scan checks all of it."""
    offsets = pa.array([0, len(block)], pa.int64()).buffers()[1]
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(block)])


def _read_like_per_line(capture: Capture) -> bool:
    """Valid UTF-8 (pyarrow fails a comment that is not, where the per-line parser replaces the bytes) and no
    byte the per-line parser would read differently; scanned a block of whole lines at a time."""
    stream, rest = stream_of(capture), b""
    while block := stream.read(_SCAN_BYTES):
        lines, rest = _whole_lines(rest + block)
        if not _plain(lines):
            return False
    return _plain(rest)


def _whole_lines(data: bytes) -> tuple[bytes, bytes]:
    """``data`` cut after its last b"\\n": a multibyte character or a pattern never spans two blocks."""
    cut = data.rfind(b"\n") + 1
    return data[:cut], data[cut:]


def _plain(lines: bytes) -> bool:
    value = _one_value(lines)
    try:
        value.cast(pa.large_string())  # validates UTF-8
    except pa.ArrowInvalid:
        return False
    return not pc.any(pc.match_substring_regex(value, _UNLIKE_PER_LINE)).as_py()


def read_records(capture: Capture, start: int, names: list[str], types: dict[str, pa.DataType],
                 delimiter: str, empty_is_null: bool = False) -> pa.Table | None:
    """The ``delimiter``-separated records after offset ``start`` as columns ``names`` of ``types``, skipping
    blank lines and '#' comments; None when the per-line parser must read this capture instead. With
    ``empty_is_null`` an empty field of a non-string column is null (strings stay as written); the caller checks
    the columns that must not be empty."""
    if not _read_like_per_line(capture):
        return None
    stream = stream_of(capture)
    stream.seek(start)
    headers: list[str] = []

    def skip_comment(row: Any) -> str:
        if row.text.startswith("#") or not row.text.strip():
            if "harness-sampler" in row.text:
                headers.append(row.text)  # a second header: pid, mode or device may change mid-file
            return "skip"
        return "error"

    try:
        table = pacsv.read_csv(
            stream,
            read_options=pacsv.ReadOptions(column_names=names, block_size=BLOCK_BYTES),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, quote_char=False, escape_char=False,
                                             invalid_row_handler=skip_comment),
            convert_options=pacsv.ConvertOptions(column_types=types, null_values=[""] if empty_is_null else [],
                                                 strings_can_be_null=False,
                                                 quoted_strings_can_be_null=False))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # a field that does not convert, a record of another length, or no records at all
    return None if headers else table


def null_where_in(column: pa.ChunkedArray, values: pa.Array) -> pa.ChunkedArray:
    """``column`` with null where its value is one of ``values``, sharing the column's strings (no copy)."""
    chunks = []
    for chunk in column.chunks:
        keep = pc.invert(pc.is_in(chunk, values))
        if chunk.offset or chunk.null_count:  # not as read_csv returns them: the general (copying) way
            chunks.append(pc.if_else(keep, chunk, pa.scalar(None, chunk.type)))
            continue
        # the mask's bits become the validity bitmap; offsets and characters stay where they are
        chunks.append(pa.Array.from_buffers(chunk.type, len(chunk), [keep.buffers()[1], *chunk.buffers()[1:]]))
    return pa.chunked_array(chunks, column.type)


def constant(value: Any, type_: pa.DataType, length: int) -> pa.Array:
    """One value (None too) repeated ``length`` times."""
    return pa.repeat(pa.scalar(value, type_), length)


def table_from_records(records: Iterable[Mapping[str, object]], schema: pa.Schema) -> pa.Table:
    """The per-line parser's rows as a table of ``schema``, converted a chunk at a time (a key a row lacks is
    null): the rows of a large capture are never all held as dicts."""
    iterator: Iterator[Mapping[str, object]] = iter(records)
    batches = []
    while chunk := list(islice(iterator, ROWS_PER_CHUNK)):
        batches.append(pa.RecordBatch.from_pylist(chunk, schema=schema))
    return pa.Table.from_batches(batches, schema=schema)
