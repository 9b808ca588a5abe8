"""What every parser shares: the error type, the registry of parsers by kind, and ``parse``.

A parser is a pure function from a tool's captured bytes to tidy rows; it registers itself under one
or more kinds with :func:`register_parser`. Parsers import nothing but the standard library, this
module, their own helpers (``_common``) and the generic registry (``harness.registry``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.registry import Registry

Rows = list[dict[str, Any]]
Parser = Callable[[bytes], Rows]


class ParseError(ValueError):
    """Input that is not what the parser reads; the message says what is wrong and where."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


PARSERS: Registry[Parser] = Registry("kind", unknown=ParseError)


def register_parser(*kinds: str) -> Callable[[Parser], Parser]:
    """Register the decorated function as the parser of ``kinds`` (``harness parse KIND FILE``)."""

    def register(parser: Parser) -> Parser:
        for kind in kinds:
            PARSERS.add(kind, parser, parser)
        return parser

    return register


def parser_of(kind: str) -> Parser:
    """The parser of ``kind``; an unknown kind is a ParseError listing the known ones (the one place that says so)."""
    return PARSERS.get_or_raise(kind)


def parse(kind: str, data: bytes) -> Rows:
    """Parse ``data`` as ``kind``; an unknown kind is a ParseError listing the known ones."""
    return parser_of(kind)(data)
