"""BigMoeOnEdge (``bmoe-cli``) output -> the ``tokens`` table and a run summary, and a ``requests`` row from that.

Reads what its telemetry contract (telemetry.md in its docs folder) specifies and what the captures in its
docs/bench-data/ show (tests/data/bmoe/SOURCE.md):

- the log (stdout, with or without stderr): ``BMOE_LOAD {json}`` + ``BMOE_PROGRESS {json}`` per token (``--progress``),
  ``BMOE_BEGIN``/``BMOE_DONE {json}`` per generation in session mode, and the end-of-run lines ``generation:``,
  ``compute:``, ``prefill:``, ``moe-stream:`` (with and without ``+ cache mgmt``), ``moe-cache:``, ``moe-overlap:``,
  ``moe-prefetch:``, ``moe-drop:``; anything else (llama.cpp's log, the answer text) is skipped;
- the ``--csv`` file: an optional ``# bmoe_metrics v1|v2`` preamble of ``key=value`` words, a header row read by
  column NAME (columns were appended over time: 8, 9, 22 and 29 in the captures), one row per token and a
  ``# summary key=value ...`` trailer per generation.

Columns and their null rules: :mod:`harness.parsers.bmoe_columns`. In short: the engine writes 0 or -1 for
"unmeasured" (cpu_ms/majflt on its Windows build, cache_hit_pct without a cache, stall_ms in serial mode, io and
read bytes under mmap), and those become null; compute_ms is a clamped residual and stays what the engine says.
Malformed input is a :class:`ParseError` naming the line.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import cast

from ._common import Json, JsonObject, iter_lines, number_of, text_of
from .base import ParseError, register_parser
from .bmoe_columns import REQUEST_COLUMNS, SUMMARY_COLUMNS, TOKEN_COLUMNS
from .bmoe_summary import SummaryRow, csv_summary, done_summary, end_of_run_fields, number, settle_summary

__all__ = ["REQUEST_COLUMNS", "SUMMARY_COLUMNS", "TOKEN_COLUMNS", "bmoe_request_row", "parse_bmoe_csv",
           "parse_bmoe_log"]

MIB = 1024 * 1024
CSV_VERSIONS = ("v1", "v2")
# CSV column -> our name, where they differ; every TOKEN_COLUMNS name the CSV has is read under that name
_CSV_RENAMED = {"step": "token", "turn": "request"}
# end-of-run lines this parser does not read (moe-spec-gate, moe-predict, moe-waits, moe-route-ahead, mtp, ngram)
_OTHER_PERF = ("moe-", "mtp:", "ngram:", "  layer")
_STREAM_ONLY = ("io_ms", "compute_ms", "mgmt_ms", "stall_ms", "read_bytes")
_SUMMARY_ONLY_OPENERS = ("moe-stream:", "moe-overlap:")
# a token's row (TOKEN_COLUMNS) or a summary's (SUMMARY_COLUMNS, then what else the source had): numbers, and the
# engine's JSON values as it printed them
BmoeRow = dict[str, Json]
Tables = dict[str, list[BmoeRow]]  # {"tokens": [...], "summary": [...]}


def _token_row(values: Mapping[str, Json]) -> BmoeRow:
    return {name: values.get(name) for name in TOKEN_COLUMNS}


def _settle_tokens(rows: list[BmoeRow], *, streaming: bool | None, overlap: bool | None) -> None:
    """Null what the engine did not measure, in place (rules: bmoe_columns.TOKEN_COLUMNS)."""
    if streaming is None:  # nothing says: the engine streamed iff it read anything itself
        streaming = any(row["read_bytes"] or row["io_ms"] for row in rows)
    if overlap is None:  # under --overlap the stall has a floor above 0 on every token that read (telemetry.md)
        overlap = any(row["stall_ms"] for row in rows)
    unmeasured = (*(() if streaming else _STREAM_ONLY), *(() if overlap else ("stall_ms",)))
    for row in rows:
        row.update(dict.fromkeys(unmeasured))
        if not row["cpu_ms"]:  # 0 CPU time for a decode means the platform could not say (and then nor majflt)
            row["cpu_ms"] = row["majflt"] = None
        if (hit := number_of(row["cache_hit_pct"])) is not None and hit < 0:
            row["cache_hit_pct"] = None
        if (resident := number_of(row["dense_resident_frac"])) is not None and resident < 0:
            row["dense_resident_frac"] = None
        if not row["rss_mib"]:  # a process is never 0 MiB resident: the platform did not say
            row["rss_mib"] = None
        if not row["cache_budget_mib"]:  # no cache
            row["cache_budget_mib"] = None
        overhead, wall = number_of(row["loop_overhead_ms"]), number_of(row["wall_ms"])
        row["gap_ms"] = (overhead + wall if overhead is not None and wall is not None
                         and (number_of(row["token"]) or 0) > 1 else None)


def _ordered(summary: SummaryRow) -> BmoeRow:
    """Every SUMMARY_COLUMNS name, in its order (None where the source lacks it), then what else the source had."""
    return {**{name: summary.get(name) for name in SUMMARY_COLUMNS}, **summary}


def _json_object(line: str, prefix: str, number_: int) -> JsonObject:
    try:
        value = json.loads(line[len(prefix):])
    except json.JSONDecodeError as exc:
        raise ParseError(f"{prefix.strip()}: invalid JSON: {exc.msg} (column {exc.colno + len(prefix)})",
                         line=number_) from None
    if not isinstance(value, dict):
        raise ParseError(f"{prefix.strip()}: expected a JSON object", line=number_)
    return value


def _progress_row(progress: JsonObject, request: Json, number_: int) -> BmoeRow:
    get = progress.get
    try:
        # int() and float() raise TypeError or ValueError for what they cannot read (caught below): the casts are
        # for the checker only
        read_mb = cast("str | float | None", get("read_mb"))
        row: BmoeRow = {
            "request": request, "token": int(cast(str, progress["step"])), "steps": get("steps"), "t_ns": None,
            "gap_ms": None, "wall_ms": float(cast(str, progress["wall_ms"])), "io_ms": get("io_ms"),
            "compute_ms": get("compute_ms"), "mgmt_ms": get("mgmt_ms"), "stall_ms": get("stall_ms"),
            "read_bytes": None if read_mb is None else round(float(read_mb) * MIB),
            "cache_hit_pct": get("cache_hit_pct"), "majflt": get("majflt"), "cpu_ms": get("cpu_ms"),
            "dense_resident_frac": get("dense_resident_frac"), "loop_overhead_ms": None, "mtp_batch": None,
            "rss_mib": None, "cache_budget_mib": None}
    except KeyError as exc:
        raise ParseError(f"BMOE_PROGRESS: no {exc}", line=number_) from None
    except (TypeError, ValueError) as exc:
        raise ParseError(f"BMOE_PROGRESS: {exc}", line=number_) from None
    return row


def _answer_sha256(data: bytes) -> list[str]:
    """sha256 of each ``=== answer ===`` block's text (--progress mode prints the whole answer once, between
    banners): cut from the bytes, since the text may hold any line break."""
    out, start = [], 0
    while (begin := data.find(b"=== answer ===\n", start)) >= 0:
        end = data.find(b"\n=== perf ===", begin)
        if end < 0:
            break
        out.append(hashlib.sha256(data[begin + len(b"=== answer ===\n"):end]).hexdigest())
        start = end
    return out


class _LogReader:
    """State while reading a log: tokens so far, the summary being filled, which generation we are in."""

    def __init__(self, *, summary_only: bool = False) -> None:
        # summary_only: the log holds no generation: line, only what a script grepped out of a run (its moe-stream:
        # / moe-overlap: lines); each such line not inside a block then opens one
        self.summary_only = summary_only
        self.tokens: list[BmoeRow] = []
        self.summaries: list[SummaryRow] = []
        self.seen: list[set[str]] = []  # per summary: the end-of-run prefixes that filled it
        self.session_id: Json = None
        self.in_answer = False
        self.in_perf = False

    def request(self) -> Json:
        return self.session_id if self.session_id is not None else len(self.summaries)

    def line(self, line: str, number_: int) -> None:
        if line.startswith("BMOE_PROGRESS "):  # the hot path: one per token
            self.in_perf = False
            self.tokens.append(_progress_row(_json_object(line, "BMOE_PROGRESS ", number_), self.request(), number_))
            return
        if line.startswith("BMOE_") or line == "=== answer ===":
            self.in_perf = False
        if self.in_answer:  # the answer text may hold anything, even a line starting "generation:"
            self.in_answer = line != "=== perf ==="
        elif line == "=== answer ===":
            self.in_answer = True
        elif line.startswith("BMOE_"):
            self.protocol(line, number_)
        elif line.startswith("generation:") or self.in_perf or (
                self.summary_only and line.startswith(_SUMMARY_ONLY_OPENERS)):
            self.perf(line, number_)

    def perf(self, line: str, number_: int) -> None:
        """An end-of-run line. The block opens at ``generation:`` and closes at the first line that is none of
        bmoe-cli's (a wrapper's ``peak_rss_kb=``, the next run's inline answer): outside it, text that merely
        starts like one (``compute: ...`` in an answer) is not read."""
        found = end_of_run_fields(line, number_)
        if found is None:
            self.in_perf = line.startswith(_OTHER_PERF)
            return
        prefix, fields = found
        # the decode s/token of moe-stream: repeats generation:'s; a summary-only log has only this one
        decode = fields.pop("decode_s_per_token", None)
        if self.summary_only and decode is not None:
            fields["s_per_token"] = decode
        # summary-only: every moe-stream: line is a run of its own (a run prints one)
        if prefix == "generation:" or not self.in_perf or (self.summary_only and prefix == "moe-stream:"):
            self.summaries.append({"request": self.request(), "source": "log"})
            self.seen.append(set())
            self.in_perf = True
        self.summaries[-1].update(fields)
        self.seen[-1].add(prefix)

    def protocol(self, line: str, number_: int) -> None:
        kind = line.split(" ", 1)[0]
        if kind == "BMOE_BEGIN":
            self.session_id = _json_object(line, "BMOE_BEGIN ", number_).get("id")
        elif kind == "BMOE_DONE":
            done = _json_object(line, "BMOE_DONE ", number_)
            text = done.get("text")
            row: SummaryRow = {
                "request": self.request(), "source": "done", **done_summary(done),
                "output_sha256": hashlib.sha256(text.encode()).hexdigest() if isinstance(text, str) else None}
            self.summaries.append(row)
            self.seen.append(set())
        elif kind == "BMOE_ERROR":
            error = _json_object(line, "BMOE_ERROR ", number_)
            if error.get("fatal"):
                raise ParseError(f"bmoe-cli reported a fatal error: {error.get('msg')}", line=number_)
        # BMOE_LOAD carries the read_mb/io_ms of the BMOE_PROGRESS that follows it; BMOE_READY the load time that
        # BMOE_DONE repeats: neither adds a value


def _read_log(text: str, *, summary_only: bool) -> _LogReader:
    reader = _LogReader(summary_only=summary_only)
    # split at "\n" only: str.splitlines would also cut at U+2028 and the like, which BMOE_PROGRESS's delta_text
    # carries unescaped inside its JSON
    for number_, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip()
        if line:
            reader.line(line, number_)
    return reader


def parse_bmoe_log(data: bytes) -> Tables:
    """bmoe-cli's stdout (and/or stderr) -> {"tokens": one row per BMOE_PROGRESS, "summary": one row per
    generation (end-of-run lines or BMOE_DONE)}. A log without any of those is read again as a summary-only log
    (the moe-stream: / moe-overlap: lines a script grepped out of runs: a row per block they open, None for what
    they do not print). ParseError when there is none of it."""
    text = text_of(data)
    reader = _read_log(text, summary_only=False)
    if not reader.tokens and not reader.summaries:
        reader = _read_log(text, summary_only=True)
    if not reader.tokens and not reader.summaries:
        raise ParseError("no BigMoeOnEdge output found (no BMOE_PROGRESS, BMOE_DONE, 'generation:', 'moe-stream:' "
                         "or 'moe-overlap:' line)")
    hashes = _answer_sha256(data if isinstance(data, bytes) else data.encode())
    summaries = []
    for index, (row, seen) in enumerate(zip(reader.summaries, reader.seen, strict=True)):
        if row["source"] == "log":
            row["output_sha256"] = hashes[index] if len(hashes) == len(reader.summaries) else None
        streaming = ("moe-stream:" in seen) if row["source"] == "log" else None
        overlap = ("moe-overlap:" in seen or "stall_s_per_token" in row) if streaming else None
        summaries.append(_ordered(settle_summary(row, streaming=streaming, overlap=overlap,
                                                 prefetch="moe-prefetch:" in seen)))
    for request in dict.fromkeys(row["request"] for row in reader.tokens):
        mine = [row for row in reader.tokens if row["request"] == request]
        summary = next((s for s in summaries if s["request"] == request), None)
        from_log = summary is not None and summary["source"] == "log"
        _settle_tokens(mine, streaming=_flag(summary["streaming"]) if summary and from_log else None,
                       overlap=_flag(summary["overlap"]) if summary and from_log else None)
    return {"tokens": reader.tokens, "summary": summaries}


def _flag(value: Json) -> bool | None:
    """settle_summary's streaming / overlap (a bool, or None when the output does not say)."""
    return value if value is None or isinstance(value, bool) else bool(value)


def _preamble(line: str, number_: int, config: dict[str, Json]) -> None:
    words = line.lstrip("#").split()
    if words and words[0] == "bmoe_metrics":
        version = words[1] if len(words) > 1 else "(none)"
        if version not in CSV_VERSIONS:
            raise ParseError(f"bmoe_metrics {version}: this parser reads {' and '.join(CSV_VERSIONS)}", line=number_)
        config["bmoe_metrics"] = version
        return
    for word in words:  # order-independent key=value; unknown keys are kept (telemetry.md: appended freely)
        key, sep, text = word.partition("=")
        if sep:
            try:
                config[key] = number(text)
            except ValueError:
                config[key] = text


def _csv_token(line: str, number_: int, header: list[str], turn: int) -> BmoeRow:
    fields = line.split(",")
    if len(fields) != len(header):
        raise ParseError(f"expected {len(header)} comma-separated fields (header), got {len(fields)}", line=number_)
    values: dict[str, Json] = {"request": turn}
    try:
        for name, text in zip(header, fields, strict=True):
            values[_CSV_RENAMED.get(name, name)] = number(text)
    except ValueError:
        raise ParseError(f"not a number in {line[:80]!r}", line=number_) from None
    return _token_row(values)


def _rates_from_rows(summary: SummaryRow, tokens: list[BmoeRow]) -> None:
    """MiB per token and per second of flash read time from the rows' exact sums: the ``# summary`` line rounds
    ``io_s`` to 10 ms, which on a short run moves MiB/s by several percent (the log's MiB/s uses the exact time)."""
    read = [value for row in tokens if (value := number_of(row["read_bytes"])) is not None]
    io = [value for row in tokens if (value := number_of(row["io_ms"])) is not None]
    if not tokens or len(read) < len(tokens) or len(io) < len(tokens):  # a token without them
        return
    summary["read_mib_per_token"] = sum(read) / MIB / len(tokens)
    if sum(io) > 0:
        summary["read_mib_per_s"] = sum(read) / MIB / (sum(io) / 1000)


def parse_bmoe_csv(data: bytes) -> Tables:
    """bmoe-cli's ``--csv`` file -> {"tokens": one row per CSV row, "summary": one row per ``# summary`` line, with
    the preamble's settings as ``cfg_<key>`` columns}."""
    config: dict[str, Json] = {}
    header: list[str] | None = None
    tokens: list[BmoeRow] = []
    summaries: list[SummaryRow] = []
    for number_, raw in enumerate(iter_lines(data), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("# summary"):
            turn: Json = tokens[-1]["request"] if tokens else len(summaries)
            summaries.append({"request": turn, "source": "csv", **csv_summary(line, number_)})
        elif line.startswith("#"):
            _preamble(line, number_, config)
        elif header is None:
            header = line.split(",")
            if "step" not in header or "wall_ms" not in header:
                raise ParseError(f"expected the header row (step,steps,wall_ms,...), got {line[:80]!r}",
                                 line=number_)
        else:
            tokens.append(_csv_token(line, number_, header, 0))
    if header is None:
        raise ParseError("no header row (step,steps,wall_ms,...): not a bmoe-cli --csv file")
    streaming = bool(config["moe_stream"]) if "moe_stream" in config else None
    overlap = bool(config["overlap"]) if "overlap" in config else None
    prefetch = any(config.get(k) for k in ("prefetch", "predict_prefetch", "route_ahead")) if config else None
    _settle_tokens(tokens, streaming=streaming, overlap=overlap)
    cfg = {f"cfg_{key}": value for key, value in config.items()}
    for row in summaries:
        _rates_from_rows(row, [token for token in tokens if token["request"] == row["request"]])
    ordered = [_ordered({**settle_summary(row, streaming=streaming, overlap=overlap, prefetch=prefetch), **cfg})
               for row in summaries]
    return {"tokens": tokens, "summary": ordered}


def bmoe_request_row(summary: Mapping[str, Json]) -> BmoeRow:
    """One ``requests`` row from a summary row: llama-server's column names where they mean the same (so compare,
    gate and the figures read it as they read llama-server's), the engine's own numbers beside as ``engine_*``
    (REQUEST_COLUMNS). The device windows (``decode_dev_*``, from block stats) are the step's to add."""
    get = summary.get
    tokens, s_per_token = number_of(get("tokens")), number_of(get("s_per_token"))
    mib_per_token, prefill_s = number_of(get("read_mib_per_token")), number_of(get("prefill_s"))
    return {
        "request": get("request"), "decode_tps": get("tok_s"), "prefill_tps": get("prefill_tps"),
        "prompt_n": get("n_prompt"), "prompt_ms": None if prefill_s is None else prefill_s * 1000,
        "predicted_n": get("tokens"),
        "predicted_ms": s_per_token * tokens * 1000 if s_per_token is not None and tokens is not None else None,
        "predicted_per_token_ms": None if s_per_token is None else s_per_token * 1000,
        "decode_tokens": get("tokens") or None, "decode_s_per_token": get("s_per_token"),
        "engine_read_bytes_per_token": None if mib_per_token is None else mib_per_token * MIB,
        "engine_read_mib_per_s": get("read_mib_per_s"), "engine_cache_hit_pct": get("cache_hit_pct"),
        "engine_cache_resident_mib": get("cache_resident_mib"), "engine_load_s": get("load_s"),
        "engine_io_s_per_token": get("io_s_per_token"), "engine_compute_s_per_token": get("compute_s_per_token"),
        "engine_mgmt_s_per_token": get("mgmt_s_per_token"), "engine_stall_s_per_token": get("stall_s_per_token"),
        "engine_majflt_per_token": get("majflt_per_token"), "engine_cpu_s_per_token": get("cpu_s_per_token"),
        "output_sha256": get("output_sha256"),
    }


def is_bmoe_csv(data: bytes) -> bool:
    """A --csv file starts (after its ``#`` preamble) with the ``step,steps,...`` header; a log never does."""
    for line in text_of(data[:4096]).splitlines():
        if line.strip() and not line.startswith("#"):
            return line.startswith("step,")
    return data.lstrip(b"\xef\xbb\xbf").startswith(b"# bmoe_metrics")


@register_parser("bmoe")
def parse_bmoe(data: bytes) -> list[BmoeRow]:
    """``harness parse bmoe FILE``: a log or the CSV (told apart by content), as rows tagged ``table`` = summary or
    tokens, the summary first."""
    tables = parse_bmoe_csv(data) if is_bmoe_csv(data) else parse_bmoe_log(data)
    return [{"table": name, **row} for name in ("summary", "tokens") for row in tables[name]]
