"""The replay step's rows: one ``requests`` row per run and one ``tokens`` row per replayed token.

The row is built with the shared helpers of :mod:`harness.steps.requests` (place, marks, windows, cache reached,
per-token device bytes) so compare, gate and figures read replay runs like llama-server's; what only replay knows
is in ``replay_*`` columns. ``decode_tps`` is the tok/s equivalent of the tokens after the first (the decode
window's tokens, as llama-server's): their count over the sum of their latencies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.steps.base import Rows
from harness.steps.requests import (
    cache_reached,
    json_records,
    mark_columns,
    mark_windows,
    per_token,
    place_columns,
)

SUMMARY_COLUMNS = ("strategy", "cache_hit_pct", "dev_mb_s", "qd_avg", "inflight_avg", "tok_s", "bytes_per_token",
                   "dev_read_bytes_per_token", "self_read_bytes_per_token", "threads", "bs", "qd", "compute",
                   "cache_bytes", "predict_p")


def read_tokens(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The program's per-token lines and its summary ({} when it has none: a run cut short)."""
    tokens: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    if not path.exists():
        return tokens, summary
    for doc in json_records(path, "replay line"):
        if "summary" in doc:
            summary = doc["summary"]
        else:
            tokens.append(doc)
    return tokens, summary


def token_rows(request: int, tokens: list[dict[str, Any]]) -> Rows:
    """One row per token: its end on the target's monotonic clock, the gap since the previous token's end (as
    llama-server's arrival gaps), its own latency, device bytes, page-cache hits and major faults."""
    rows, previous = [], None
    for tok in tokens:
        t_ns = tok["t_end_ns"]
        rows.append({"request": request, "token": tok["token"], "t_ns": t_ns,
                     "gap_ms": None if previous is None else (t_ns - previous) / 1e6,
                     "latency_ms": tok["latency_ns"] / 1e6, "bytes": tok.get("bytes"),
                     "dev_read_bytes": tok.get("dev_read_bytes"), "cache_hit_bytes": tok.get("cache_hit_bytes"),
                     "majflt": tok.get("majflt"), "self_read_bytes": tok.get("self_read_bytes")})
        previous = t_ns
    return rows


def replay_rows(run_dir: Path, rec: dict[str, Any]) -> tuple[dict[str, Any], Rows]:
    tokens, summary = read_tokens(run_dir / rec.get("tokens_file", "replay-tokens.jsonl"))
    summary = summary or rec.get("summary") or {}
    marks = rec.get("marks") or {}
    row: dict[str, Any] = {**place_columns(rec), "predicted_n": len(tokens)}
    row.update(cache_reached(rec.get("cache"), rec.get("residency_before_pct")))
    row.update(mark_columns(marks))
    row.update(mark_windows(marks))
    row.update(per_token(row, len(tokens) - 1))
    decode = tokens[1:] or tokens
    decode_ns = sum(t["latency_ns"] for t in decode)
    row["decode_tps"] = len(decode) / (decode_ns / 1e9) if decode_ns > 0 else None
    row.update({f"replay_{key}": summary.get(key) for key in SUMMARY_COLUMNS})
    hits = sum(t.get("cache_hit_bytes") or 0 for t in tokens)
    requested = sum(t.get("bytes") or 0 for t in tokens)
    row["replay_cache_hit_pct"] = 100.0 * hits / requested if requested else summary.get("cache_hit_pct")
    return row, token_rows(rec["index"], tokens)
