"""Helpers every parser shares: turning captured bytes into numbered lines and header fields."""

from __future__ import annotations

from collections.abc import Iterator


def text_of(data: bytes | str) -> str:
    """Decode captured output. Tools on boards sometimes emit stray non-UTF-8 bytes (a truncated
    multibyte character at the end of a killed log); replacing them beats refusing the file."""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace").lstrip("\ufeff")


def numbered_lines(data: bytes | str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its newline and trailing blanks), blank lines skipped."""
    for number, line in enumerate(text_of(data).splitlines(), start=1):
        line = line.rstrip()
        if line:
            yield number, line


def header_fields(line: str) -> dict[str, str]:
    """``# harness-sampler v1 mode=block dev=vda period_ms=10`` -> {'mode': 'block', ...}."""
    return dict(word.split("=", 1) for word in line.lstrip("#").split() if "=" in word)
