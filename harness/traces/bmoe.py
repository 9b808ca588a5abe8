"""A routing trace from BigMoeOnEdge's ``--route-trace`` CSV (``harness.parsers.bmoe_route``), and
:func:`load_trace`, which reads either format by its first line.

Only what a decode reads is kept: the decode phase (``phase`` 1) of one turn (the first by default), one trace
token per decode step in step order, each layer's experts in slot order (the router's rank, top choice first).
A routing the engine dropped (``dropped`` 1, its cache-aware drop policy) is still the router's choice and is
kept: the trace says what the model asks for, not what that engine's policy read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.parsers.base import ParseError
from harness.parsers.bmoe_route import parse_bmoe_route
from harness.traces.model import HEADER, Trace, TraceError, parse_trace

ROUTE_HEADER = "# route_trace v1"


def _int(row: dict[str, object], key: str, where: str) -> int:
    value = row.get(key)
    if not isinstance(value, int):
        raise TraceError(f"{where}: a route row has no integer {key}")
    return value


def _geometry(rows: list[dict[str, object]], where: str) -> tuple[int, int, int]:
    values = tuple(_int(rows[0], key, where) for key in ("n_layer", "n_expert", "n_expert_used"))
    if min(values) <= 0:
        raise TraceError(f"{where}: the route trace's model line needs positive n_layer, n_expert, n_expert_used")
    return values[0], values[1], values[2]


def trace_from_route_rows(rows: list[dict[str, object]], where: str, turn: int | None = None) -> Trace:
    """The decode tokens of ``turn`` (the first one with decode rows by default) as a Trace."""
    decode = [r for r in rows if r.get("phase") == 1]
    if not decode:
        raise TraceError(f"{where}: the route trace has no decode rows (phase 1)")
    n_layer, n_expert, n_used = _geometry(decode, where)
    chosen = min(_int(r, "turn", where) for r in decode) if turn is None else turn
    steps: dict[int, np.ndarray] = {}
    for r in decode:
        if r["turn"] != chosen:
            continue
        step, layer, slot, expert = (_int(r, k, where) for k in ("step", "layer", "slot", "expert"))
        if not (0 <= layer < n_layer and 0 <= slot < n_used and 0 <= expert < n_expert):
            raise TraceError(f"{where}: step {step} layer {layer} slot {slot} expert {expert} is outside the "
                             f"model line's n_layer={n_layer} n_expert_used={n_used} n_expert={n_expert}")
        ids = steps.setdefault(step, np.full((n_layer, n_used), -1, dtype=np.int32))
        ids[layer, slot] = expert
    if not steps:
        raise TraceError(f"{where}: turn {chosen} has no decode rows")
    for step, ids in steps.items():
        missing = np.argwhere(ids < 0)
        if len(missing):
            layer, slot = (int(v) for v in missing[0])
            raise TraceError(f"{where}: decode step {step} has no row for layer {layer} slot {slot} "
                             f"(a trace needs every layer's {n_used} experts per token)")
    experts = np.stack([steps[s] for s in sorted(steps)])
    return Trace(n_layer, n_expert, n_used, experts, f"bmoe-route:{Path(where).name}:turn={chosen}")


def read_route_trace(path: Path, turn: int | None = None) -> Trace:
    path = Path(path)
    try:
        rows = parse_bmoe_route(path.read_bytes())
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the route trace ({exc.strerror})") from None
    except ParseError as exc:
        where = f"{path}:{exc.line}" if exc.line is not None else str(path)
        raise TraceError(f"{where}: {str(exc).split(': ', 1)[-1] if exc.line is not None else exc}") from None
    if not rows:
        raise TraceError(f"{path}: the route trace has no rows")
    return trace_from_route_rows(rows, str(path), turn)


def load_trace(path: Path) -> Trace:
    """A harness trace or a BigMoeOnEdge route trace, told apart by the first line; TraceError for anything else."""
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc.strerror})") from None
    first = text.split("\n", 1)[0].strip()
    if first.startswith(HEADER):
        return parse_trace(text, str(path))
    if first == ROUTE_HEADER:
        return read_route_trace(path)
    raise TraceError(f"{path}:1: not a routing trace (expected a first line {HEADER!r} or {ROUTE_HEADER!r})")
