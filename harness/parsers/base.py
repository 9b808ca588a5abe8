"""What every parser shares: the error type, the registry of parsers by kind, and ``parse``.

A parser is a pure function from a tool's captured bytes to tidy rows; it registers itself under one
or more kinds with :func:`register_parser`. Parsers import nothing but the standard library, this
module and their own helpers (``_common``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Rows = list[dict[str, Any]]
Parser = Callable[[bytes], Rows]


class ParseError(ValueError):
    """Input that is not what the parser reads; the message says what is wrong and where."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


PARSERS: dict[str, Parser] = {}


def register_parser(*kinds: str) -> Callable[[Parser], Parser]:
    """Register the decorated function as the parser of ``kinds`` (``harness parse KIND FILE``)."""

    def register(parser: Parser) -> Parser:
        for kind in kinds:
            PARSERS[kind] = parser
        return parser

    return register


def parse(kind: str, data: bytes) -> Rows:
    """Parse ``data`` as ``kind``; an unknown kind is a ParseError listing the known ones."""
    parser = PARSERS.get(kind)
    if parser is None:
        raise ParseError(f"unknown kind {kind!r} (known: {', '.join(sorted(PARSERS))})")
    return parser(data)
