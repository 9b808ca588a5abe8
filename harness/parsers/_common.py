"""Helpers every parser shares: turning captured bytes into numbered lines and header fields."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import BinaryIO, TypeVar

from .base import ParseError

F = TypeVar("F")  # what a capture's header says (headed_rows)
R = TypeVar("R")  # one of its rows

# what json.loads gives: a tool's JSON output read as it is, narrowed with isinstance where a parser relies on a shape
Json = str | int | float | bool | None | list["Json"] | dict[str, "Json"]
JsonObject = dict[str, Json]


def number_of(value: Json) -> int | float | None:
    """A JSON value where it is a number (a bool too, as arithmetic takes it), else None: what a parser computes
    with, so a value of another type is left out instead of breaking the arithmetic."""
    return value if isinstance(value, int | float) else None


def text_of(data: bytes | str) -> str:
    """Decode captured output. Tools on boards sometimes emit stray non-UTF-8 bytes (a truncated
    multibyte character at the end of a killed log); replacing them beats refusing the file."""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace").lstrip("\ufeff")


def numbered_lines(data: bytes | str | BinaryIO) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its newline and trailing blanks), blank lines skipped."""
    for number, line in enumerate(iter_lines(data), start=1):
        line = line.rstrip()
        if line:
            yield number, line


def header_fields(line: str) -> dict[str, str]:
    """``# harness-sampler v1 mode=block dev=vda period_ms=10`` -> {'mode': 'block', ...}."""
    return dict(word.split("=", 1) for word in line.lstrip("#").split() if "=" in word)


def versioned_header(line: str, number: int, tool: str, version: str) -> dict[str, str]:
    """The fields of a ``# harness-TOOL VERSION key=value ...`` header line; ParseError naming both versions for
    a header of another version (or none: a first word of ``key=value`` is a field, not a version)."""
    words = line.split()
    named = len(words) > 2 and words[:2] == ["#", f"harness-{tool}"] and "=" not in words[2]
    found = words[2] if named else None
    if found != version:
        raise ParseError(f"{tool} output of version {found or '(none)'}: this parser reads harness-{tool} "
                         f"{version} (header {line.strip()[:80]!r})", line=number)
    return header_fields(line)


def headed_rows(data: bytes, tool: str, version: str, facts_of: Callable[[str, int], F],
                row_of: Callable[[list[str], int, F], R]) -> list[R]:
    """The rows of a harness tool's capture: a ``# harness-TOOL VERSION ...`` header first (``facts_of(line,
    number)`` reads it), then one TAB-separated line per row (``row_of(fields, number, facts)``); other ``#``
    lines are metadata and blank lines are skipped. ParseError for a capture that is empty or does not start with
    the header."""
    header = f"# harness-{tool}"
    rows: list[R] = []
    facts: F | None = None
    for number, raw in enumerate(iter_lines(data), start=1):
        if not raw.strip():
            continue
        if facts is None:
            if not raw.startswith(header):
                raise ParseError(f"no {tool} header: expected '{header} {version} ...' first, found "
                                 f"{raw.strip()[:80]!r}", line=number)
            facts = facts_of(raw, number)
        elif not raw.startswith("#"):
            rows.append(row_of(raw.rstrip("\r\n").split("\t"), number, facts))
    if facts is None:
        raise ParseError(f"no {tool} header: the output is empty (expected '{header} {version} ...')")
    return rows


def iter_lines(data: bytes | str | BinaryIO) -> Iterator[str]:
    """``text_of(data).splitlines()``, one line at a time: a large capture is never held a second time as
    decoded text plus a list of lines, and an open (seekable) file is read from its start as it goes. Split at
    b"\\n" first (it ends no multibyte character and starts no \\r\\n), then each piece is decoded and split as
    the whole text would be."""
    if isinstance(data, str):
        yield from data.splitlines()
        return
    first = True
    for piece in _pieces(data):
        text = piece.decode("utf-8", errors="replace")
        if first:
            text, first = text.lstrip("\ufeff"), False
        yield from text.splitlines()


def _pieces(data: bytes | BinaryIO) -> Iterator[bytes]:
    """The capture cut after every b"\\n"."""
    if not isinstance(data, bytes | bytearray | memoryview):
        data.seek(0)
        yield from data
        return
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end + 1
        yield bytes(data[start:end])
        start = end
