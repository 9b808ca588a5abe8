"""BigMoeOnEdge's run summaries: the end-of-run lines of a log, ``BMOE_DONE`` and the CSV's ``# summary`` trailer,
all to one set of names (:data:`harness.parsers.bmoe_columns.SUMMARY_COLUMNS`), with the engine's "unmeasured"
sentinels turned into null by :func:`settle_summary`.

The line formats are bmoe-cli's (cli/main.cpp at 2d4f2b1) and those of the archive's older captures, which differ:
``moe-stream:`` without ``+ cache mgmt`` before that term existed, ``moe-cache: ... budget N MiB (auto, resized N×)``
before the runtime governor was retired.
"""

from __future__ import annotations

import math
import re

from ._common import Json, JsonObject, number_of
from .base import ParseError

Number = int | float | None  # what number() reads: None for nan/inf
# a summary row: numbers under our names, the engine's JSON values (BMOE_DONE), the source and flags
SummaryRow = dict[str, Json]

_N = r"[-+]?(?:\d+(?:\.\d*)?|nan|inf)"  # printf %f, which prints nan/inf too
_I = r"\d+"

# prefix -> the patterns one line of it may match (first wins); a line with a known prefix matching none is malformed
END_OF_RUN: dict[str, tuple[re.Pattern[str], ...]] = {prefix: tuple(re.compile(p) for p in patterns) for prefix,
                                                       patterns in {
    "generation:": (rf"generation: (?P<tokens>{_I}) tokens, (?P<s_per_token>{_N}) s/token \((?P<tok_s>{_N}) tok/s\)",),
    "compute:": (rf"compute: (?P<cpu_occupancy_pct>{_N})% CPU occupancy \((?P<cpu_s_per_token>{_N}) cpu-s/token over "
                 rf"(?P<threads>{_I}) threads\), (?P<majflt_per_token>{_N}) major faults/token",),
    "prefill:": (rf"prefill: (?P<n_prompt>{_I}) tokens, (?P<prefill_s>{_N}) s \((?P<prefill_tps>{_N}) tok/s\) \| "
                 rf"model load (?P<load_s>{_N}) s \| TTFT (?P<ttft_s>{_N}) s",),
    "moe-stream:": (rf"moe-stream: read (?P<read_mib>{_N}) MiB \((?P<read_mib_per_token>{_N}) MiB/token\), decode "
                    rf"(?P<decode_s_per_token>{_N}) s/token \(compute (?P<compute_s_per_token>{_N})(?: \+ cache mgmt "
                    rf"(?P<mgmt_s_per_token>{_N}))? \+ flash I/O (?P<io_s_per_token>{_N}) s/token, "
                    rf"(?P<read_mib_per_s>{_N}) MiB/s\)(?:.*stall_s/tok=(?P<stall_s_per_token>{_N}))?",),
    "moe-cache:": (rf"moe-cache: (?P<cache_hit_pct>{_N})% hit, resident (?P<cache_resident_mib>{_N}) MiB"
                   rf"(?:, budget (?P<cache_budget_mib>{_N}) MiB \(auto(?:, resized (?P<cache_resizes>{_I})×)?\))?$",
                   rf"moe-cache: (?P<cache_evictions>{_I}) evictions, (?P<cache_rereads>{_I}) re-reads"),
    "moe-overlap:": (rf"moe-overlap: stall (?P<stall_s_per_token>{_N}) s/token",),
    "moe-prefetch:": (rf"moe-prefetch: (?P<spec_read_mib>{_N}) MiB speculative, (?P<spec_useful>{_I})/"
                      rf"(?P<spec_experts>{_I}) experts useful",),
    "moe-drop:": (rf"moe-drop: (?P<experts_dropped>{_I})/(?P<experts_routed>{_I}) routed experts dropped",),
}.items()}

# the CSV's ``# summary`` keys and BMOE_DONE's keys whose names differ from ours; any other key is kept lower-cased
# with ``/tok`` -> ``_per_token`` (``ra_gemv_ms/tok`` -> ``ra_gemv_ms_per_token``)
RENAMED = {"s/tok": "s_per_token", "tok/s": "tok_s", "evictions": "cache_evictions", "rereads": "cache_rereads",
           "compute_s_tok": "compute_s_per_token", "io_s_tok": "io_s_per_token", "stall_s_tok": "stall_s_per_token",
           "mgmt_s_tok": "mgmt_s_per_token", "majflt_tok": "majflt_per_token", "cpu_s_tok": "cpu_s_per_token",
           "mtp_draft_s_tok": "mtp_draft_s_per_token", "loop_overhead_s_tok": "loop_overhead_s_per_token"}

_STREAM_ONLY = ("read_mib", "read_mib_per_token", "read_mib_per_s", "io_s", "io_s_per_token", "compute_s_per_token",
                "mgmt_s_per_token", "stall_s_per_token", "token_demand_mib", "layer_demand_mib")
_CACHE_ONLY = ("cache_hit_pct", "cache_resident_mib", "cache_budget_mib", "cache_resizes", "cache_evictions",
               "cache_rereads")
_SPEC = ("spec_read_mib", "spec_experts", "spec_useful")


def number(text: str) -> int | float | None:
    """``12`` -> 12, ``1.5`` -> 1.5, ``nan``/``inf`` -> None (printf's way of saying there was nothing to divide)."""
    value = float(text) if any(c in text for c in ".naie") else int(text)
    return None if isinstance(value, float) and not math.isfinite(value) else value


def summary_key(key: str) -> str:
    return RENAMED.get(key) or key.lower().replace("/tok", "_per_token").replace("/", "_per_")


def end_of_run_fields(line: str, number_: int) -> tuple[str, dict[str, Number]] | None:
    """(prefix, fields) of an end-of-run line; None for any other line; ParseError for a known prefix that matches
    none of its formats (a truncated or foreign line is named, never half-read)."""
    prefix = line.split(" ", 1)[0]
    patterns = END_OF_RUN.get(prefix)
    if patterns is None:
        return None
    for pattern in patterns:
        match = pattern.match(line)
        if match:
            return prefix, {k: number(v) for k, v in match.groupdict().items() if v is not None}
    raise ParseError(f"malformed {prefix!r} line: {line[:120]!r}", line=number_)


def csv_summary(line: str, number_: int) -> dict[str, Number]:
    """``# summary tokens=256 s/tok=0.585 ...`` -> fields under our names."""
    row: dict[str, Number] = {}
    for word in line.lstrip("#").split()[1:]:
        key, sep, text = word.partition("=")
        try:
            if not sep:
                raise ValueError
            row[summary_key(key)] = number(text)
        except ValueError:
            raise ParseError(f"# summary: expected key=number, got {word!r}", line=number_) from None
    return row


def done_summary(done: JsonObject) -> SummaryRow:
    """``BMOE_DONE {json}`` (session mode) -> fields under our names, the text hashed by the caller."""
    row: SummaryRow = {summary_key(k): v for k, v in done.items() if k not in ("id", "reasoning", "text")}
    tokens, tok_s = number_of(row.get("tokens")), number_of(row.get("tok_s"))
    row["s_per_token"] = 1 / tok_s if tok_s else None
    if tokens and (read_mib := number_of(row.get("read_mib"))) is not None:
        row["read_mib_per_token"] = read_mib / tokens
    if tokens and (io_s_per_token := number_of(row.get("io_s_per_token"))) is not None:
        row["io_s"] = io_s_per_token * tokens  # the total the log's MiB/s divides by
    return row


def settle_summary(row: SummaryRow, *, streaming: bool | None, overlap: bool | None,
                   prefetch: bool | None) -> SummaryRow:
    """Derive what the source leaves out and null what the engine did not measure (see SUMMARY_COLUMNS)."""
    get = row.get

    def num(key: str) -> int | float | None:
        return number_of(get(key))

    read_mib, tokens, io_s = num("read_mib"), num("tokens"), num("io_s")
    if get("read_mib_per_token") is None and read_mib is not None and tokens:
        row["read_mib_per_token"] = read_mib / tokens
    if get("read_mib_per_s") is None and read_mib is not None and io_s:
        row["read_mib_per_s"] = read_mib / io_s
    load_s, prefill_s = num("load_s"), num("prefill_s")
    if get("ttft_s") is None and load_s is not None and prefill_s is not None:
        row["ttft_s"] = load_s + prefill_s
    if streaming is None:  # no config in the output: the engine read nothing itself, so it did not stream
        streaming = bool(get("read_mib") or get("io_s") or get("io_s_per_token"))
    stall = num("stall_s_per_token")
    if overlap is None and streaming and stall is not None:
        overlap = stall > 0  # under --overlap the stall has a floor above 0 (telemetry.md)
    nulls = [*(_STREAM_ONLY if not streaming else ()), *(() if overlap else ("stall_s_per_token",))]
    hit = num("cache_hit_pct")
    if hit is None or hit < 0:
        nulls += _CACHE_ONLY
    if not get("cpu_s_per_token"):
        nulls += ("cpu_s_per_token", "majflt_per_token", "cpu_occupancy_pct")
    if not (prefetch or get("spec_experts")):
        nulls += _SPEC
    recall = num("spec_recall_pct")
    if recall is not None and recall < 0:
        nulls.append("spec_recall_pct")
    if not get("prefill_s"):
        nulls.append("prefill_tps")
    row.update(dict.fromkeys(nulls))
    row["streaming"], row["overlap"] = streaming, overlap
    return row
