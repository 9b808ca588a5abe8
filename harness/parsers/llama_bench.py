"""``llama-bench -o jsonl`` (one object per line) or ``-o json`` (an array) -> one row per test.

Keys differ between llama.cpp builds (newer ones add n_cpu_moe, load_mode, no_host, repack, ...; older ones
have use_mmap instead of load_mode), so every key is kept as it came and the harness's own columns are
added beside them: ``test`` (llama-bench's own name, "pp16", "tg32", "pp512+tg128", "... @ d512"),
``avg_tps``/``stddev_tps``/``samples_tps`` and ``model_size_bytes``.
"""

from __future__ import annotations

import json
from typing import Any

from ._common import numbered_lines, text_of
from .base import ParseError, register_parser

# Columns every row has, whatever the build printed (None when it lacks the key).
_STANDARD = ("n_prompt", "n_gen", "n_depth", "n_threads", "load_mode", "build_commit", "model_filename")


def test_name(row: dict[str, Any]) -> str | None:
    """The name llama-bench prints in its markdown table for this test."""
    n_prompt, n_gen, n_depth = row.get("n_prompt") or 0, row.get("n_gen") or 0, row.get("n_depth") or 0
    parts = ([f"pp{n_prompt}"] if n_prompt else []) + ([f"tg{n_gen}"] if n_gen else [])
    if not parts:
        return None
    return "+".join(parts) + (f" @ d{n_depth}" if n_depth else "")


def _objects(data: bytes | str) -> list[tuple[int, Any]]:
    text = text_of(data)
    if text.lstrip().startswith("["):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ParseError(f"invalid llama-bench JSON: {exc.msg} (column {exc.colno})", line=exc.lineno) from None
        if not isinstance(doc, list):
            raise ParseError("expected a JSON array of llama-bench results")
        return [(0, item) for item in doc]
    objects = []
    for number, line in numbered_lines(text):
        if not line.lstrip().startswith("{"):
            continue  # log lines that ended up on stdout (builds differ in what they print where)
        try:
            objects.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ParseError(f"invalid llama-bench JSONL: {exc.msg} (column {exc.colno})", line=number) from None
    return objects


def bench_row(item: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"test": test_name(item)}
    row.update({key: item.get(key) for key in _STANDARD})
    row["avg_tps"] = item.get("avg_ts")
    row["stddev_tps"] = item.get("stddev_ts")
    row["samples_tps"] = item.get("samples_ts")
    row["model_size_bytes"] = item.get("model_size")
    for key, value in item.items():
        row.setdefault(key, value)
    return row


@register_parser("llama-bench")
def parse_llama_bench(data: bytes) -> list[dict[str, Any]]:
    """One row per llama-bench test (all of the build's keys kept); no results at all is an error."""
    rows = []
    for number, item in _objects(data):
        if not isinstance(item, dict):
            raise ParseError("expected a JSON object per llama-bench result", line=number or None)
        if "avg_ts" not in item and "avg_ns" not in item:
            raise ParseError("not a llama-bench result (no avg_ts / avg_ns)", line=number or None)
        rows.append(bench_row(item))
    if not rows:
        raise ParseError("no llama-bench results found (expected -o jsonl or -o json output)")
    return rows


def sample_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per repetition of every test: ``bench_index`` (position in ``rows``), ``sample``, tps, ns."""
    out = []
    for index, row in enumerate(rows):
        tps = row.get("samples_ts") or []
        ns = row.get("samples_ns") or []
        for sample in range(max(len(tps), len(ns))):
            out.append({"bench_index": index, "test": row.get("test"), "n_prompt": row.get("n_prompt"),
                        "n_gen": row.get("n_gen"), "n_threads": row.get("n_threads"), "sample": sample,
                        "sample_tps": tps[sample] if sample < len(tps) else None,
                        "sample_ns": ns[sample] if sample < len(ns) else None})
    return out
