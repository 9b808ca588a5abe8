"""Parsers: pure functions from a tool's captured bytes to tidy rows (one dict per observation).

Column names carry their unit (``_bytes``, ``_ns``, ``_ms``, ``_mhz``, ``_c``, ``_mw``, ``_pct``...);
values are JSON-serialisable. Bad input raises :class:`ParseError` saying what and where.
``harness parse KIND FILE`` reaches them through :data:`PARSERS`.

A new parser is one module here whose function carries ``@register_parser("kind")`` (from
:mod:`harness.parsers.base`), plus its name in the import below.
"""

from __future__ import annotations

from harness.parsers import (  # noqa: F401  (each registers its parsers)
    blockstat,
    bmoe,
    bmoe_route,
    counters,
    energy_counters,
    fio,
    getprop,
    jetson_clocks,
    jtop,
    llama_bench,
    llama_server,
    macos,
    nvpmodel,
    offcpu,
    sampler,
    snapshots,
    tegrastats,
)
from harness.parsers.base import PARSERS, ParseError, Parser, parse, parser_of

__all__ = ["PARSERS", "ParseError", "Parser", "parse", "parser_of"]
