"""The ``requests`` table's row, built once for every streaming step (llama-server, bmoe, declared engines).

A streaming step's runner record gives, per request: its place in the run (index, prompt, repeat, cache
condition), the page-cache residency before it, and snapshots at three marks (``start``, ``first_token``,
``end``: the monotonic clock, block stats, the engine process's faults and CPU times). From those every engine's
row gets the same columns, computed the same way: the marks' times, the ``request_``/``prefill_``/``decode_``
windows, whether the cache condition was reached, and the decode window's per-token device bytes and faults.
What only one engine knows (llama-server's ``timings``, bmoe's own counters) its step adds beside these.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.parsers import ParseError
from harness.parsers.blockstat import delta, parse_snapshot
from runner.contract import COLD_MAX_PCT, WARM_MIN_PCT

Arg = str | int | float
Mark = dict[str, Any]  # one snapshot: mono_ns, blockstat (raw text), proc (majflt, utime_s, stime_s)
WINDOW_KEYS = ("dev_read_bytes", "dev_read_ios", "dev_avg_read_io_bytes", "dev_avg_inflight", "dev_read_bytes_per_s",
               "majflt", "utime_s", "stime_s")


def refuse_owned(args: list[Arg], owned: tuple[str, ...], engine: str | None = None) -> list[Arg]:
    """``args`` unless they name a flag the harness sets itself (of ``engine``'s, when steps run several)."""
    clash = sorted({str(a) for a in args} & set(owned))
    if clash:
        whose = f" for {engine}" if engine else ""
        raise ValueError(f"{', '.join(clash)} are set by the harness{whose} (owned: {', '.join(owned)})")
    return args


def json_records(path: Path, what: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a step's JSONL output, one per non-blank line; a line that is no JSON is a ParseError
    naming the file, the line and ``what`` it should have been."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as exc:
            raise ParseError(f"{path.name}: bad {what} ({exc.msg})", line=number) from None


def window(a: Mark | None, b: Mark | None, prefix: str) -> dict[str, Any]:
    """Device and process deltas between two snapshots, columns prefixed (``decode_dev_read_bytes`` ...)."""
    out: dict[str, Any] = {f"{prefix}s": None}
    out.update({f"{prefix}{key}": None for key in WINDOW_KEYS})
    if not a or not b:
        return out
    seconds = (b["mono_ns"] - a["mono_ns"]) / 1e9
    out[f"{prefix}s"] = seconds
    sa, sb = parse_snapshot(a.get("blockstat")), parse_snapshot(b.get("blockstat"))
    if sa and sb:
        d = delta(sa, sb)
        out[f"{prefix}dev_read_bytes"] = d["read_bytes"]
        out[f"{prefix}dev_read_ios"] = d["read_ios"]
        out[f"{prefix}dev_avg_read_io_bytes"] = d["avg_read_io_bytes"]
        if seconds > 0:
            # time_in_queue sums every request's time in flight: over the window, the average in flight
            if d["time_in_queue_ms"] is not None:
                out[f"{prefix}dev_avg_inflight"] = d["time_in_queue_ms"] / (seconds * 1000)
            if d["read_bytes"] is not None:
                out[f"{prefix}dev_read_bytes_per_s"] = d["read_bytes"] / seconds
    pa, pb = a.get("proc"), b.get("proc")
    if pa and pb:
        out[f"{prefix}majflt"] = pb["majflt"] - pa["majflt"]
        out[f"{prefix}utime_s"] = pb["utime_s"] - pa["utime_s"]
        out[f"{prefix}stime_s"] = pb["stime_s"] - pa["stime_s"]
    return out


def place_columns(rec: dict[str, Any]) -> dict[str, Any]:
    """Where the request sits in its run: index, prompt, repeat, cache condition, and the residency before it."""
    return {"request": rec["index"], "prompt_index": rec.get("prompt_index"), "repeat": rec.get("repeat"),
            "cache": rec.get("cache"), "n_predict": rec.get("n_predict"),
            "residency_before_pct": rec.get("residency_before_pct")}


def mark_columns(marks: dict[str, Mark]) -> dict[str, Any]:
    """The three marks on the target's monotonic clock (null where the record has no such mark)."""
    start, first, end = marks.get("start"), marks.get("first_token"), marks.get("end")
    return {"t_ns": start["mono_ns"] if start else None, "t_first_token_ns": first["mono_ns"] if first else None,
            "t_end_ns": end["mono_ns"] if end else None}


def cache_reached(cache: str | None, residency: float | None) -> dict[str, bool]:
    """``cold_reached`` (cold: at most COLD_MAX_PCT of the model resident before the request, the methodology's
    bound for a cold start) or ``warm_reached`` (warm: at least WARM_MIN_PCT; under a memory budget earlier
    requests may have pushed part of the model out again); nothing for other conditions."""
    if cache == "cold":
        return {"cold_reached": residency is not None and residency <= COLD_MAX_PCT}
    if cache == "warm":
        return {"warm_reached": residency is not None and residency >= WARM_MIN_PCT}
    return {}


def mark_windows(marks: dict[str, Mark]) -> dict[str, Any]:
    """The whole request, prefill (start to first token) and decode (first token to end) windows.

    The decode window starts at the first streamed token (sampled at the end of prefill), so it holds one token
    fewer than the request generated."""
    start, first, end = marks.get("start"), marks.get("first_token"), marks.get("end")
    return {**window(start, end, "request_"), **window(start, first, "prefill_"), **window(first, end, "decode_")}


def per_token(row: dict[str, Any], tokens: int) -> dict[str, Any]:
    """``decode_tokens`` (the ``tokens`` the decode window holds; null when none) and the window's device bytes
    and major faults per token (null where the window or its counter is missing)."""
    out: dict[str, Any] = {"decode_tokens": tokens if tokens > 0 else None,
                           "decode_dev_read_bytes_per_token": None, "decode_majflt_per_token": None}
    if tokens > 0:
        if row.get("decode_dev_read_bytes") is not None:
            out["decode_dev_read_bytes_per_token"] = row["decode_dev_read_bytes"] / tokens
        if row.get("decode_majflt") is not None:
            out["decode_majflt_per_token"] = row["decode_majflt"] / tokens
    return out


def without_marks(row: dict[str, Any]) -> dict[str, Any]:
    """A row of an engine the harness has no mark snapshots for (declared engines: one run, its output parsed):
    the decode window's device rate is null, never a guess (the run's device bytes are the runs table's, whole
    step), so such rows still line up with llama-server's under the column the figures read."""
    return {**row, "decode_dev_read_bytes_per_s": row.get("decode_dev_read_bytes_per_s")}  # kept where given
