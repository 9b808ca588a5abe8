"""llama-bench output in any of its formats -> one row per test.

``-o jsonl`` (one object per line; what the harness's own step records), ``-o json`` (an array), ``-o csv``,
``-o sql`` and the markdown table (``-o md``, the default): the text formats are read by
:mod:`harness.parsers.llama_bench_text`. Lines the build logs around its results (``ggml_vulkan:``,
``ggml_cuda_init:``, ``load_backend:``, ``main: ...``; Vulkan builds print them on stdout) are skipped; one capture
holds one format, the first one found (lines of another, such as an ``-oe md`` table on stderr captured with
``2>&1``, are skipped too).

Keys differ between llama.cpp builds (newer ones add n_cpu_moe, load_mode, no_host, repack, ...; older ones
have use_mmap instead of load_mode), so every key is kept as it came and the harness's own columns are
added beside them: ``test`` (llama-bench's own name, "pp16", "tg32", "pp512+tg128", "... @ d512"),
``avg_tps``/``stddev_tps``/``samples_tps`` and ``model_size_bytes``. The markdown table carries only what it
shows (samples_tps and model_filename are None there; see llama_bench_text for its rounded size and params).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from . import llama_bench_text as text_formats
from ._common import Json, JsonObject, iter_lines
from .base import ParseError, register_parser

# Columns every row has, whatever the build printed (None when it lacks the key).
_STANDARD = ("n_prompt", "n_gen", "n_depth", "n_threads", "load_mode", "build_commit", "model_filename")
# one test's row: the harness's columns, then every key the build printed, as printed (JSON values)
BenchRow = dict[str, Json]


def test_name(row: Mapping[str, Json]) -> str | None:
    """The name llama-bench prints in its markdown table for this test."""
    n_prompt, n_gen, n_depth = row.get("n_prompt") or 0, row.get("n_gen") or 0, row.get("n_depth") or 0
    parts = ([f"pp{n_prompt}"] if n_prompt else []) + ([f"tg{n_gen}"] if n_gen else [])
    if not parts:
        return None
    return "+".join(parts) + (f" @ d{n_depth}" if n_depth else "")


def bench_row(item: JsonObject) -> BenchRow:
    row: BenchRow = {"test": test_name(item)}
    row.update({key: item.get(key) for key in _STANDARD})
    row["avg_tps"] = item.get("avg_ts")
    row["stddev_tps"] = item.get("stddev_ts")
    row["samples_tps"] = item.get("samples_ts")
    row["model_size_bytes"] = item.get("model_size")
    for key, value in item.items():
        row.setdefault(key, value)
    return row


def table_bench_row(fields: dict[str, Json]) -> BenchRow:
    """A markdown table row (llama_bench_text.table_row) with the standard columns first, as bench_row orders them."""
    row: BenchRow = {"test": test_name(fields)}
    row.update({key: fields.get(key) for key in _STANDARD})
    row.update(avg_tps=fields.get("avg_tps"), stddev_tps=fields.get("stddev_tps"), samples_tps=None,
               model_size_bytes=fields.get("model_size_bytes"))
    for key, value in fields.items():
        row.setdefault(key, value)
    return row


# lines llama.cpp builds print around their results; only used to tell "no results" from "not llama-bench output"
_LOG_LINE = re.compile(r"\s|\[|ggml|GGML|llama_|load_|register_|build:|main:|warning:|error:|Device \d|system_info|"
                       r"print_info|common_|using device|Log |[\w./-]+\.(?:cpp|c|h):\d+")


class _Reader:
    """One pass over the lines: the first format found is the capture's; log lines around it are skipped."""

    def __init__(self) -> None:
        self.format: str | None = None
        self.found: list[BenchRow] = []
        self.header: list[str] | None = None  # md: the table's columns; csv: the fields
        self.sql_types: dict[str, str] = {}
        self.json_lines: list[tuple[int, str]] = []
        self.builds: list[tuple[int, dict[str, Json]]] = []  # (rows before it, build) per ``build:`` line
        self.foreign: tuple[int, str] | None = None  # the first line that is neither results nor a log line

    def line(self, number: int, line: str) -> None:
        stripped = line.strip()
        if self.format == "json":
            self.json_lines.append((number, line))
        elif not stripped:
            self.header = None if self.format == "md" else self.header  # a blank line ends a table
        elif build := text_formats.BUILD_LINE.fullmatch(stripped):
            self.builds.append((len(self.found), {"build_commit": build["commit"],
                                                  "build_number": int(build["number"])}))
            self.header = None if self.format == "md" else self.header
        elif not self.result_line(number, stripped) and self.foreign is None and not _LOG_LINE.match(line):
            self.foreign = (number, stripped)

    def result_line(self, number: int, line: str) -> bool:
        """Read a line of the capture's format (choosing the format on its first line); False for other lines."""
        kind = self.format or _format_of(line)
        if kind is None:
            return False
        if kind == "md":
            return self.table_line(number, line)
        self.format = kind
        if kind == "json":
            self.json_lines.append((number, line))
        elif kind == "jsonl":
            if not line.startswith("{"):
                return False
            try:
                self.add(number, json.loads(line))
            except json.JSONDecodeError as exc:
                raise ParseError(f"invalid llama-bench JSONL: {exc.msg} (column {exc.colno})", line=number) from None
        elif kind == "csv":
            return self.csv_line(number, line)
        else:
            return self.sql_line(number, line)
        return True

    def table_line(self, number: int, line: str) -> bool:
        if not line.startswith("|"):
            return False
        cells = text_formats.table_cells(line)
        if text_formats.is_table_header(cells):
            self.format, self.header = "md", cells
        elif self.header is None:
            return False  # another table (a README's own, a comparison script's)
        elif not text_formats.is_separator(cells):
            self.found.append(table_bench_row(text_formats.table_row(self.header, cells, number)))
        return True

    def csv_line(self, number: int, line: str) -> bool:
        if self.header is None:
            self.header = line.split(",")
        elif line.startswith('"'):
            self.add(number, text_formats.csv_record(self.header, line, number))
        else:
            return False
        return True

    def sql_line(self, number: int, line: str) -> bool:
        if text_formats.is_create(line) or line == ");":
            return True
        column = text_formats.sql_column(" " + line)
        if column:
            self.sql_types[column[0]] = column[1]
        elif line.startswith("INSERT INTO"):
            self.add(number, text_formats.sql_record(line, number, self.sql_types))
        else:
            return False
        return True

    def add(self, number: int, item: Json) -> None:
        if not isinstance(item, dict):
            raise ParseError("expected a JSON object per llama-bench result", line=number or None)
        if "avg_ts" not in item and "avg_ns" not in item:
            raise ParseError("not a llama-bench result (no avg_ts / avg_ns)", line=number or None)
        self.found.append(bench_row(item))

    def rows(self) -> list[BenchRow]:
        if self.format == "json":
            for item in _json_array(self.json_lines):
                self.add(0, item)
        if self.format == "md":  # the footer names the build of the rows above it (or, printed first, all)
            for index, row in enumerate(self.found):
                after = next((b for before, b in self.builds if before > index), None)
                build = after or (self.builds[-1][1] if self.builds else {})
                row.update({key: row.get(key) or value for key, value in build.items()})
        if not self.found:
            if self.foreign:
                number, line = self.foreign
                raise ParseError(f"not llama-bench output (no md table, csv, json, jsonl or sql): {line[:80]!r}",
                                 line=number)
            raise ParseError("no llama-bench results found (expected its md table, csv, json, jsonl or sql)")
        return self.found


def _format_of(line: str) -> str | None:
    """The format a capture's first result line starts: md, csv, json, jsonl, sql; None for any other line."""
    if line.startswith("|"):
        return "md"
    if line in ("[", "[]") or line.startswith(("[{", "[ {")):
        return "json"
    if line.startswith("{"):
        return "jsonl"
    if line.startswith("build_commit,"):
        return "csv"
    if text_formats.is_sql_start(line):
        return "sql"
    return None


def _json_array(lines: list[tuple[int, str]]) -> list[Json]:
    """The array ``-o json`` printed from its first line on; what follows it (log lines) is not read."""
    text = "\n".join(line for _, line in lines)
    try:
        doc, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        number = lines[min(exc.lineno, len(lines)) - 1][0]
        raise ParseError(f"invalid llama-bench JSON: {exc.msg} (column {exc.colno})", line=number) from None
    if not isinstance(doc, list):
        raise ParseError("expected a JSON array of llama-bench results", line=lines[0][0])
    return doc


@register_parser("llama-bench")
def parse_llama_bench(data: bytes) -> list[BenchRow]:
    """One row per llama-bench test, from any of its output formats (md, csv, json, jsonl, sql), the build's log
    lines around them skipped; no results at all is an error naming the first line that is none of them."""
    reader = _Reader()
    for number, line in enumerate(iter_lines(data), start=1):
        reader.line(number, line.rstrip())
    return reader.rows()


def sample_rows(rows: list[BenchRow]) -> list[BenchRow]:
    """One row per repetition of every test: ``bench_index`` (position in ``rows``), ``sample``, tps, ns."""
    out: list[BenchRow] = []
    for index, row in enumerate(rows):
        tps, ns = (value if isinstance(value := row.get(key), list) else [] for key in ("samples_ts", "samples_ns"))
        for sample in range(max(len(tps), len(ns))):
            out.append({"bench_index": index, "test": row.get("test"), "n_prompt": row.get("n_prompt"),
                        "n_gen": row.get("n_gen"), "n_threads": row.get("n_threads"), "sample": sample,
                        "sample_tps": tps[sample] if sample < len(tps) else None,
                        "sample_ns": ns[sample] if sample < len(ns) else None})
    return out
