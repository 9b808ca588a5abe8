"""llama-server ``/completion`` responses -> one row per response that carries ``timings``.

Reads a saved response (one JSON object, or an array of them), JSONL of responses (or of the runner's
requests.jsonl records, which keep ``timings`` at the top level), or a captured SSE stream (``data: {...}``
lines, where only the final message has ``timings``). Older builds lack ``cache_n``;
``draft_n``/``draft_n_accepted`` appear only with speculative decoding: those columns are None when absent.
"""

from __future__ import annotations

import json
from typing import Any

from ._common import numbered_lines, text_of
from .base import ParseError, register_parser

_TIMINGS = ("prompt_n", "prompt_ms", "prompt_per_token_ms", "predicted_n", "predicted_ms",
            "predicted_per_token_ms", "cache_n", "draft_n", "draft_n_accepted")
_RESPONSE = ("stop_type", "tokens_predicted", "tokens_evaluated", "tokens_cached", "truncated")


def timings_row(response: dict[str, Any]) -> dict[str, Any]:
    timings = response.get("timings")
    if not isinstance(timings, dict):
        raise ParseError("response has no timings object")
    row: dict[str, Any] = {key: timings.get(key) for key in _TIMINGS}
    row["prefill_tps"] = timings.get("prompt_per_second")
    row["decode_tps"] = timings.get("predicted_per_second")
    for key, value in timings.items():  # whatever else a newer build reports
        if key not in ("prompt_per_second", "predicted_per_second"):
            row.setdefault(key, value)
    for key in _RESPONSE:
        row[key] = response.get(key)
    return row


def _objects(text: str) -> list[tuple[int, Any]]:
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        try:
            doc = json.loads(stripped)  # one (possibly pretty-printed) response, or an array of them
            return [(1, item) for item in doc] if isinstance(doc, list) else [(1, doc)]
        except json.JSONDecodeError:
            pass  # JSONL: one response per line
    objects = []
    for number, line in numbered_lines(text):
        if line.startswith("data:"):
            line = line[5:].strip()  # SSE
        if not line.startswith("{"):
            continue
        try:
            objects.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ParseError(f"invalid JSON: {exc.msg} (column {exc.colno})", line=number) from None
    return objects


@register_parser("llama-server")
def parse_llama_server(data: bytes) -> list[dict[str, Any]]:
    """Rows in input order with ``response`` = 0-based position among the responses that have timings."""
    rows = []
    for number, obj in _objects(text_of(data)):
        if not isinstance(obj, dict):
            continue
        if "error" in obj and "timings" not in obj:
            message = obj["error"].get("message") if isinstance(obj["error"], dict) else obj["error"]
            raise ParseError(f"llama-server returned an error: {message}", line=number)
        if "timings" not in obj:
            continue  # a streamed token chunk
        try:
            row = timings_row(obj)
        except ParseError as exc:
            raise ParseError(str(exc), line=number) from None
        rows.append({"response": len(rows), **row})
    if not rows:
        raise ParseError("no llama-server response with timings found")
    return rows
