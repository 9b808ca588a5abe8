"""What a declared engine printed -> ``tokens`` and ``requests`` rows, by the declaration's extraction rules.

Pure: rules are plain dicts (``EngineDeclaration.extract`` dumped), outputs are bytes by source name (``stdout``,
``stderr``, or a file the engine wrote). A value that looks like an integer becomes one, a decimal a float, anything
else stays text; a column the output never gave is absent from the row (null in the table), never 0.

The run's one ``requests`` row also carries, when tokens have per-token times (``gap_ms``) and a decode window
``[first, last]`` is asked for, the window's columns as llama-server rows name them: ``window_first_token``,
``window_last_token``, ``window_s`` and ``window_tps`` (null when the engine did not produce every token of it).
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator, Mapping
from typing import Literal, TypedDict

from harness.parsers._common import Json
from harness.parsers.base import ParseError

# a table row read from the engine's output: values typed as typed() says, columns as the rules name them
DeclaredRow = dict[str, Json]
Raw = Mapping[str, Json]  # one match's fields: a regex's named groups, a JSON object, a CSV row


# The rules as harness.config.declared_engine.ExtractRule.model_dump(exclude_none=True) gives them (a parser
# imports no configuration: the shape is repeated here, as plain data).
class _Field(TypedDict):
    field: str


class ScaledColumnSpec(_Field, total=False):
    scale: float


class _PivotNames(TypedDict):
    key: str
    value: str
    column: str


class PivotSpec(_PivotNames, total=False):
    scale: float


class CsvSpec(TypedDict, total=False):
    delimiter: str
    comment: str


class ExtractRuleSpec(TypedDict, total=False):
    table: Literal["tokens", "requests"]
    source: str
    regex: str
    json_prefix: str
    csv: CsvSpec
    columns: dict[str, str | ScaledColumnSpec]
    pivot: PivotSpec
    rows: Literal["each", "one"]
    after: str

_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def typed(value: Json) -> Json:
    """``"12"`` -> 12, ``"1.5"`` -> 1.5, anything else unchanged (text stays text; JSON values keep their type)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return value


def _column_value(raw: Raw, spec: str | ScaledColumnSpec) -> tuple[Json, float]:
    field, scale = (spec, 1.0) if isinstance(spec, str) else (spec["field"], spec.get("scale", 1.0))
    return raw.get(field), scale


def _mapped(raw: Raw, rule: ExtractRuleSpec) -> DeclaredRow:
    """Table columns from one match's raw fields (named groups, JSON keys or CSV columns)."""
    row: DeclaredRow = {}
    for column, spec in (rule.get("columns") or {}).items():
        value, scale = _column_value(raw, spec)
        value = typed(value)
        if value is None or value == "":
            continue
        row[column] = value * scale if scale != 1.0 and isinstance(value, (int, float)) else value
    pivot = rule.get("pivot")
    if pivot and raw.get(pivot["key"]) is not None:
        value = typed(raw.get(pivot["value"]))
        if isinstance(value, (int, float)):
            row[pivot["column"].replace("{key}", str(raw[pivot["key"]]))] = value * pivot.get("scale", 1.0)
    return row


def _lines(text: str, after: str | None) -> Iterator[tuple[int, str]]:
    started = after is None
    for number, line in enumerate(text.splitlines(), start=1):
        if started:
            yield number, line
        elif after is not None and after in line:
            started = True


def _matches(text: str, rule: ExtractRuleSpec) -> Iterator[Raw]:
    """The raw fields of every match of one rule in one output."""
    if rule.get("csv") is not None:
        yield from _csv_rows(text, rule["csv"], rule.get("after"))
        return
    pattern = re.compile(rule["regex"]) if rule.get("regex") is not None else None
    prefix = rule.get("json_prefix")
    for number, line in _lines(text, rule.get("after")):
        if pattern is not None:
            found = pattern.search(line)
            if found:
                yield found.groupdict()
        elif prefix is not None and line.startswith(prefix):  # (a rule is csv, regex or json_prefix)
            try:
                obj = json.loads(line[len(prefix):])
            except json.JSONDecodeError as exc:
                raise ParseError(f"{rule.get('source', 'stdout')}: invalid JSON after {prefix!r} ({exc.msg})",
                                 line=number) from None
            if not isinstance(obj, dict):
                raise ParseError(f"{rule.get('source', 'stdout')}: expected a JSON object after {prefix!r}",
                                 line=number)
            yield obj


def _csv_rows(text: str, spec: CsvSpec, after: str | None) -> Iterator[dict[str, str]]:
    comment = spec.get("comment")
    kept = [line for _, line in _lines(text, after) if line.strip() and not (comment and line.startswith(comment))]
    yield from csv.DictReader(kept, delimiter=spec.get("delimiter", ","))


def extract(rules: list[ExtractRuleSpec], outputs: dict[str, bytes],
            decode_window: list[int] | tuple[int, int] | None = None) -> dict[str, list[DeclaredRow]]:
    """``{"tokens": rows, "requests": rows}`` from the outputs; an output a rule names but the run lacks gives
    nothing (a crashed engine leaves part of its files)."""
    tokens: list[DeclaredRow] = []
    requests: list[DeclaredRow] = []
    summary: DeclaredRow = {}
    for rule in rules:
        data = outputs.get(rule.get("source", "stdout"))
        if data is None:
            continue
        text = data.decode("utf-8", errors="replace")
        each = (rule.get("rows") or ("each" if rule["table"] == "tokens" else "one")) == "each"
        for raw in _matches(text, rule):
            row = _mapped(raw, rule)
            if not row:
                continue
            if not each:
                summary.update(row)
            elif rule["table"] == "tokens":
                tokens.append({"request": 0, **row})
            else:
                requests.append({"request": len(requests), **row})
    if summary or tokens:
        if requests:
            requests[0] = {**summary, **requests[0]}
        else:
            requests.append({"request": 0, **summary})
    if decode_window and requests:
        requests[0].update(window_columns(tokens, decode_window))
    return {"tokens": tokens, "requests": requests}


def window_columns(tokens: list[DeclaredRow], decode_window: list[int] | tuple[int, int]) -> DeclaredRow:
    """Decode over output tokens ``first..last`` from per-token times (``gap_ms``, the time each token took)."""
    first, last = int(decode_window[0]), int(decode_window[1])
    row: DeclaredRow = {"window_first_token": first, "window_last_token": last, "window_s": None,
                        "window_tps": None}
    times = {t.get("token"): t.get("gap_ms") for t in tokens}
    wanted = [times.get(index) for index in range(first, last + 1)]
    gaps = [ms for ms in wanted if isinstance(ms, (int, float))]
    if len(gaps) == len(wanted):
        seconds = sum(gaps) / 1000.0
        row["window_s"] = seconds
        row["window_tps"] = (last - first + 1) / seconds if seconds > 0 else None
    return row
