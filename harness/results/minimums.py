"""Was a run long enough to mean anything? Its decode held to the experiment's ``validity:`` minimums
(``min_decode_tokens``, ``min_window_s``; harness/config/validity.py). Pure functions over the rows ingest read
from the run; the verdict goes into the runs table as ``invalid`` + ``invalid_reason``, handled wherever a
perturbed run is (harness/results/selection.py): kept and listed, left out of summaries, figures, compare, gate.

Why: a short cold streaming decode misreads throughput: its first tokens read every expert they route to from the
drive, later ones find more of them in the page cache (docs/measurements.md "Decode settling": 8- and 16-token
requests 22-25 % slower than 512-token ones on the quickstart model; BigMoeOnEdge's method asks for >= 256 decoded
tokens on real models, MLPerf marks a run below its minimum duration or query count invalid).

What the minimum applies to, per table a step writes:
- ``requests`` (llama-server, bmoe, replay, declared engines): every request, since each is a sample of
  decode_tps; its tokens are ``predicted_n`` (the tokens it generated, what ``n_predict`` asks for), its window
  the engine's decode time (``predicted_ms``; the harness's first-token-to-end window where the engine has none).
- ``bench`` (llama-bench): every test that generates (``tg N``, ``n_gen`` > 0), each a sample of bench_tps; its
  tokens ``n_gen``, its window one repetition (``avg_ns``). Prompt-only tests (``pp N``) decode nothing: exempt.
- other steps (fio, read, equivalence) decode nothing: never invalid by these minimums.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Minimums:
    min_decode_tokens: int | None = None
    min_window_s: float | None = None

    @classmethod
    def of(cls, validity: Mapping[str, Any] | None) -> Minimums | None:
        """From the manifest's ``validity`` record (None: ``validity: off`` or a set made before minimums)."""
        if not validity:
            return None
        return cls(validity.get("min_decode_tokens"), validity.get("min_window_s"))


def _number(row: Row, key: str) -> float | None:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def request_decode(row: Row) -> tuple[float | None, float | None]:
    """(tokens, window seconds) of one requests row."""
    ms = _number(row, "predicted_ms")
    return _number(row, "predicted_n"), ms / 1000 if ms is not None else _number(row, "decode_s")


def bench_decode(row: Row) -> tuple[float | None, float | None]:
    """(tokens, window seconds) of one bench row; tokens None for a prompt-only test (exempt)."""
    tokens = _number(row, "n_gen")
    ns = _number(row, "avg_ns")
    return (tokens if tokens else None), ns / 1e9 if ns is not None else None


def _below(what: str, measured: Sequence[tuple[str, float | None]], limit: float | None, unit: str,
           key: str) -> str | None:
    """One reason naming the shortest of the samples below ``limit``, and how many were (None: none was)."""
    if limit is None:
        return None
    short = [(name, value) for name, value in measured if value is not None and value < limit]
    if not short:
        return None
    name, value = min(short, key=lambda item: item[1])
    count = f"{len(short)} of {len(measured)} {what}s" if len(measured) > 1 else f"the {what}"
    return f"too short: {count} below {limit:g} {unit} (shortest: {name}, {value:.3g} {unit}; validity.{key})"


def reasons(tables: Mapping[str, Sequence[Row]], limits: Minimums | None) -> list[str]:
    """Every minimum the run's decode fell below, one line each (none: long enough, or nothing to hold)."""
    if limits is None:
        return []
    samples: list[tuple[str, tuple[float | None, float | None]]] = [
        (f"request {row.get('index', i)}", request_decode(row)) for i, row in enumerate(tables.get("requests", []))]
    samples += [(str(row.get("test") or f"test {i}"), bench_decode(row))
                for i, row in enumerate(tables.get("bench", []))]
    samples = [(name, (tokens, window)) for name, (tokens, window) in samples if tokens is not None]
    what = "request" if tables.get("requests") else "tg test"
    out = [_below(what, [(name, tokens) for name, (tokens, _) in samples], limits.min_decode_tokens, "tokens",
                  "min_decode_tokens"),
           _below(what, [(name, window) for name, (_, window) in samples], limits.min_window_s, "s", "min_window_s")]
    return [line for line in out if line]


def verdict_columns(tables: Mapping[str, Sequence[Row]], limits: Minimums | None, ok: bool) -> dict[str, Any]:
    """The runs table's ``invalid`` and ``invalid_reason`` (a run that is not ok is not judged: its status says it)."""
    found = reasons(tables, limits) if ok else []
    return {"invalid": bool(found), "invalid_reason": "; ".join(found) if found else None}
