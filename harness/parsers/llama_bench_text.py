"""llama-bench's text formats: the markdown table (``-o md``, its default and the form most published results take),
``-o csv`` and ``-o sql``, read as the printers of llama.cpp print them (tools/llama-bench/llama-bench.cpp, formerly
examples/llama-bench/llama-bench.cpp; cited in tests/data/llama-bench/SOURCE.md).

The markdown table shows only the parameters that differ from the defaults, under short names (``ngl``, ``fa``,
``threads``, ...), and rounds what it shows: ``size`` as ``4.58 GiB``, ``params`` as ``7.24 B``, ``t/s`` as
``12.34 ± 0.56``. Those are converted (bytes, counts, tokens/s) and the printed size and params are kept beside as
``model_size_text``/``model_n_params_text``, since the conversion is exact only to the printed digits. Columns a build
did not print are absent from its rows (the caller fills the standard ones with None). CSV and SQL carry every field
of the build under llama-bench's own names; they are typed as that build's JSON types them.
"""

from __future__ import annotations

import csv
import re

from ._common import Json
from .base import ParseError

# a printed value as the build's JSON would carry it
BenchValue = str | int | float | bool

# get_field_type() over llama.cpp's history: fields not listed are strings (and stay as printed)
INT_FIELDS = frozenset({
    "build_number", "n_batch", "n_ubatch", "n_threads", "poll", "model_size", "model_n_params", "n_gpu_layers",
    "main_gpu", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns", "no_op_offload", "n_cpu_moe", "fit_target",
    "fit_min_ctx", "flash_attn", "n_gen_warmup"})
BOOL_FIELDS = frozenset({
    "cuda", "vulkan", "kompute", "opencl", "metal", "sycl", "rpc", "gpu_blas", "blas", "f16_kv", "no_kv_offload",
    "mul_mat_q", "cpu_strict", "use_mmap", "use_direct_io", "embeddings", "no_host", "repack"})
FLOAT_FIELDS = frozenset({"avg_ts", "stddev_ts"})

# the markdown printer's get_field_display_name(), reversed (older builds: mmq, mmap)
DISPLAY_NAMES = {
    "ngl": "n_gpu_layers", "sm": "split_mode", "threads": "n_threads", "nkvo": "no_kv_offload", "fa": "flash_attn",
    "lm": "load_mode", "embd": "embeddings", "nopo": "no_op_offload", "noh": "no_host", "dev": "devices",
    "ts": "tensor_split", "ot": "tensor_buft_overrides", "fitt": "fit_target", "fitc": "fit_min_ctx",
    "mmq": "mul_mat_q", "mmap": "use_mmap", "dio": "use_direct_io", "backend": "backends", "model": "model_type",
    "ncmoe": "n_cpu_moe"}

_TEST = re.compile(r"(?:pp ?(?P<pp>\d+))?(?P<plus>\+)?(?:tg ?(?P<tg>\d+))?(?: @ d(?P<depth>\d+))?")
_TPS = re.compile(r"(?P<avg>[-+]?(?:\d+\.?\d*|nan|inf)) ± (?P<sd>[-+]?(?:\d+\.?\d*|nan|inf))")
_SIZE = re.compile(r"(?P<value>\d+(?:\.\d+)?) (?P<unit>MiB|GiB)")
_PARAMS = re.compile(r"(?P<value>\d+(?:\.\d+)?) (?P<unit>M|B)")
_SEPARATOR = re.compile(r":?-+:?")
BUILD_LINE = re.compile(r"build: (?P<commit>\S+) \((?P<number>\d+)\)")


def typed(field: str, text: str, sql_type: str | None = None) -> BenchValue:
    """A printed value as the build's JSON would carry it; a value that is not of its field's type stays as printed
    (a newer build may have changed the type)."""
    kind = ("bool" if field in BOOL_FIELDS else "int" if field in INT_FIELDS else "float" if field in FLOAT_FIELDS
            else {"INTEGER": "int", "REAL": "float"}.get(sql_type or "", "str"))
    try:
        if kind == "bool" and text in ("0", "1"):
            return text == "1"
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        pass
    return text


def is_table_header(cells: list[str]) -> bool:
    return "t/s" in cells and "test" in cells


def _test_fields(text: str, number: int) -> dict[str, int]:
    match = _TEST.fullmatch(text)
    if not match or not (match["pp"] or match["tg"]) or (match["plus"] and not (match["pp"] and match["tg"])):
        raise ParseError(f"llama-bench table: test {text!r} is not ppN, tgN, ppN+tgN or '... @ dN'", line=number)
    return {"n_prompt": int(match["pp"] or 0), "n_gen": int(match["tg"] or 0), "n_depth": int(match["depth"] or 0)}


def _scaled(pattern: re.Pattern[str], text: str, scale: dict[str, float], what: str, number: int) -> int:
    match = pattern.fullmatch(text)
    if not match:
        raise ParseError(f"llama-bench table: {what} {text!r} is not of the form '1.23 {'|'.join(scale)}'",
                         line=number)
    return round(float(match["value"]) * scale[match["unit"]])


def table_row(header: list[str], cells: list[str], number: int) -> dict[str, Json]:
    """One row of the markdown table, under the JSON's field names (see the module's docstring)."""
    if len(cells) != len(header):
        raise ParseError(f"llama-bench table: {len(cells)} cells for the header's {len(header)} columns", line=number)
    row: dict[str, Json] = {}
    for name, text in zip(header, cells, strict=True):
        if name == "test":
            row.update(_test_fields(text, number))
        elif name == "t/s":
            match = _TPS.fullmatch(text)
            if not match:
                raise ParseError(f"llama-bench table: t/s {text!r} is not 'mean ± sd'", line=number)
            row["avg_tps"], row["stddev_tps"] = float(match["avg"]), float(match["sd"])
        elif name == "size":
            row["model_size_bytes"] = _scaled(_SIZE, text, {"MiB": 2.0**20, "GiB": 2.0**30}, "size", number)
            row["model_size_text"] = text
        elif name == "params":
            row["model_n_params"] = _scaled(_PARAMS, text, {"M": 1e6, "B": 1e9}, "params", number)
            row["model_n_params_text"] = text
        else:
            field = DISPLAY_NAMES.get(name, name)
            row[field] = typed(field, text)
    return row


def table_cells(line: str) -> list[str]:
    """``| a | b |`` -> ["a", "b"] (a README's stray ``||`` at the end is no cell)."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def is_separator(cells: list[str]) -> bool:
    return all(_SEPARATOR.fullmatch(cell) for cell in cells)


def csv_record(header: list[str], line: str, number: int) -> dict[str, Json]:
    (values,) = csv.reader([line])
    if len(values) != len(header):
        raise ParseError(f"llama-bench CSV: {len(values)} values for the header's {len(header)} fields", line=number)
    return {field: typed(field, text) for field, text in zip(header, values, strict=True)}


_CREATE = re.compile(r"CREATE TABLE IF NOT EXISTS (?P<table>\w+) \(")
_COLUMN = re.compile(r"\s+(?P<name>\w+) (?P<type>TEXT|INTEGER|REAL),?")
_INSERT = re.compile(r"INSERT INTO (?P<table>\w+) \((?P<fields>[^)]*)\) VALUES \((?P<values>.*)\);")
_SQL_VALUE = re.compile(r"'(?P<text>[^']*)'(?:, |$)")


def sql_column(line: str) -> tuple[str, str] | None:
    """(name, type) of a ``CREATE TABLE`` column line; None for any other line."""
    match = _COLUMN.fullmatch(line)
    return (match["name"], match["type"]) if match else None


def is_sql_start(line: str) -> bool:
    return bool(_CREATE.match(line) or _INSERT.match(line))


def is_create(line: str) -> bool:
    return bool(_CREATE.match(line))


def sql_record(line: str, number: int, types: dict[str, str]) -> dict[str, Json]:
    """One ``INSERT INTO ... VALUES (...)`` statement, typed by the ``CREATE TABLE`` before it (or by field)."""
    match = _INSERT.fullmatch(line)
    if not match:
        raise ParseError(f"llama-bench SQL: expected INSERT INTO ... VALUES (...); got {line[:80]!r}", line=number)
    fields = [field.strip() for field in match["fields"].split(",")]
    values, position, text = [], 0, match["values"]
    while position < len(text):
        value = _SQL_VALUE.match(text, position)
        if not value:
            raise ParseError(f"llama-bench SQL: unreadable value at {text[position:position + 40]!r}", line=number)
        values.append(value["text"])
        position = value.end()
    if len(values) != len(fields):
        raise ParseError(f"llama-bench SQL: {len(values)} values for {len(fields)} fields", line=number)
    return {field: typed(field, value, types.get(field)) for field, value in zip(fields, values, strict=True)}
