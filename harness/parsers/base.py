"""What every parser shares: the error type, the registry of parsers by kind, and ``parse``.

A parser is a pure function from a tool's captured bytes to tidy rows; it registers itself under one
or more kinds with :func:`register_parser`. Parsers import nothing but the standard library, this
module, their own helpers (``_common``) and the generic registry (``harness.registry``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from harness.registry import Registry

# What ``parse(kind, ...)`` gives: the kind is a string known at run time, so its rows are plain dicts (table rows
# that steps and collectors extend with their own columns). A parser module types its own rows (a TypedDict or a
# typed value per parser), which its direct callers see.
Rows = list[dict[str, Any]]
# any parser's rows: each a mapping of column names to values (a TypedDict is one, and so is a plain dict)
Parser = Callable[[bytes], Sequence[Mapping[str, object]]]


class ParseError(ValueError):
    """Input that is not what the parser reads; the message says what is wrong and where."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


PARSERS: Registry[Parser] = Registry("kind", unknown=ParseError)


P = TypeVar("P", bound=Parser)


def register_parser(*kinds: str) -> Callable[[P], P]:
    """Register the decorated function as the parser of ``kinds`` (``harness parse KIND FILE``); it keeps its own
    type (its rows' TypedDict) for direct callers."""

    def register(parser: P) -> P:
        for kind in kinds:
            PARSERS.add(kind, parser, parser)
        return parser

    return register


def parser_of(kind: str) -> Parser:
    """The parser of ``kind``; an unknown kind is a ParseError listing the known ones (the one place that says so)."""
    return PARSERS.get_or_raise(kind)


def parse(kind: str, data: bytes) -> Rows:
    """Parse ``data`` as ``kind``; an unknown kind is a ParseError listing the known ones."""
    # every parser returns a list of dicts (its TypedDict rows are dicts at run time); the cast forgets their keys,
    # which a caller naming the kind by string cannot know
    return cast(Rows, parser_of(kind)(data))
