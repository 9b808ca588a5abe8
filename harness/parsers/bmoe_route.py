"""BigMoeOnEdge's ``--route-trace`` CSV: one row per routed expert (which experts each MoE layer picked).

Format (BigMoeOnEdge's telemetry document, section "Route trace", ``route_trace v1``)::

    # route_trace v1
    # model=<path> arch=<string> n_layer=<int> n_expert=<int> n_expert_used=<int>
    # layer=<int> expert_bytes=<int> dense_bytes=<int>        (one per layer)
    turn,phase,step,layer,slot,expert,weight,residency,expert_bytes[,dropped]

Columns are append-only within v1 and read by name (``dropped`` is missing from older traces: null here).
``phase`` is 0 for prefill, 1 for decode; ``step`` is the token's context position; ``slot`` the router's rank
(0 = top choice); ``weight`` ``nan`` means the graph exposed no weight (null here, never 0); ``residency`` 0 miss,
1 hit, 2 hit on a prefetch's first touch; ``expert_bytes`` the flash bytes this routing read.
Each row also carries the preamble's arch, n_layer, n_expert and n_expert_used, so rows alone can be analysed.
"""

from __future__ import annotations

import csv
import io
import math

from harness.parsers.base import ParseError, Rows, register_parser

_HEADER = "# route_trace v1"
_REQUIRED = ("turn", "phase", "step", "layer", "slot", "expert")
_INTS = ("turn", "phase", "step", "layer", "slot", "expert", "residency", "expert_bytes", "dropped")
_PHASES: dict[object, str] = {0: "prefill", 1: "decode"}
_STATIC = ("n_layer", "n_expert", "n_expert_used")


def _preamble(line: str) -> dict[str, str]:
    """``# k=v k=v`` -> dict; a word without ``=`` continues the previous value (a model path with spaces)."""
    fields: dict[str, str] = {}
    key = None
    for word in line[1:].split():
        if "=" in word:
            key, value = word.split("=", 1)
            fields[key] = value
        elif key is not None:
            fields[key] += " " + word
    return fields


def _row(record: dict[str, str], static: dict[str, object], number: int) -> dict[str, object]:
    row: dict[str, object] = dict(static)
    try:
        for key in _INTS:
            value = record.get(key)
            row[key] = None if value in (None, "") else int(value)
        weight = record.get("weight")
        parsed = None if weight in (None, "", "nan") else float(weight)
        row["weight"] = None if parsed is not None and math.isnan(parsed) else parsed
    except ValueError as exc:
        raise ParseError(f"not a number in the route row: {exc}", line=number) from None
    row["phase_name"] = _PHASES.get(row["phase"])
    return row


@register_parser("bmoe-route")
def parse_bmoe_route(data: bytes) -> Rows:
    """Tidy rows of a route trace, in file order."""
    lines = data.decode("utf-8", errors="replace").splitlines()
    if not lines or lines[0].strip() != _HEADER:
        raise ParseError(f"not a BigMoeOnEdge route trace: the first line is not {_HEADER!r}", line=1)
    static: dict[str, object] = {}
    start = None
    for number, line in enumerate(lines[1:], start=2):
        if line.startswith("#"):
            fields = _preamble(line)
            if "arch" in fields:
                static["arch"] = fields["arch"]
                try:
                    static.update({key: int(fields[key]) for key in _STATIC})
                except (KeyError, ValueError):
                    raise ParseError(f"the model line needs integer {', '.join(_STATIC)}", line=number) from None
            continue
        start = number
        break
    if start is None:
        return []
    if "n_expert" not in static:
        raise ParseError("no '# model=... n_expert=...' line before the column header", line=start)
    reader = csv.DictReader(io.StringIO("\n".join(lines[start - 1:])))
    missing = [c for c in _REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise ParseError(f"column header lacks {', '.join(missing)}", line=start)
    rows = []
    for offset, record in enumerate(reader, start=1):
        if None in record or any(record.get(c) in (None, "") for c in _REQUIRED):
            raise ParseError("row does not match the column header (cut short?)", line=start + offset)
        rows.append(_row(record, static, start + offset))
    return rows
