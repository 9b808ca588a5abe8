"""A routing trace: per decoded token and MoE layer, the ids of the experts the router chose.

One text format, read by the replay program on the target (runner/native/replay.c) as by the controller::

    # harness-trace v1 n_layer=48 n_expert=128 n_used=8 tokens=256 source=synth:zipf:1.25:reuse=0:seed=0
    0 0 17 3 92 41 7 110 64 5
    0 1 ...

A header line, then one line per (token, layer) in token-major order: the token's index, the layer, then
``n_used`` distinct expert ids in the router's rank order (top choice first). ``source`` says where it came from
(``synth:...``, ``bmoe-route:FILE``, ``llama.cpp:MODEL``) and holds no spaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.errors import UsageError

HEADER = "# harness-trace v1"


class TraceError(UsageError):
    """A trace that cannot be read or does not fit a model: the message names the file, line and what is wrong."""


@dataclass
class Trace:
    n_layer: int
    n_expert: int
    n_used: int
    experts: np.ndarray  # (tokens, n_layer, n_used) int32: the chosen experts, rank order
    source: str = "unknown"

    @property
    def tokens(self) -> int:
        return int(self.experts.shape[0])

    def head(self, tokens: int) -> Trace:
        """The trace's first ``tokens`` tokens."""
        return Trace(self.n_layer, self.n_expert, self.n_used, self.experts[:tokens], self.source)

    def to_text(self) -> str:
        lines = [f"{HEADER} n_layer={self.n_layer} n_expert={self.n_expert} n_used={self.n_used} "
                 f"tokens={self.tokens} source={self.source.replace(' ', '_')}"]
        for token in range(self.tokens):
            for layer in range(self.n_layer):
                ids = " ".join(str(int(e)) for e in self.experts[token, layer])
                lines.append(f"{token} {layer} {ids}")
        return "\n".join(lines) + "\n"

    def check_fits(self, n_layer: int | None, n_expert: int | None, n_used: int | None, where: str) -> None:
        """TraceError unless the trace routes a model of this geometry (a trace of another model replays nonsense)."""
        for name, mine, theirs in (("n_layer", self.n_layer, n_layer), ("n_expert", self.n_expert, n_expert),
                                   ("n_used", self.n_used, n_used)):
            if theirs is not None and mine != theirs:
                raise TraceError(f"{where}: the trace has {name}={mine}, the model {theirs}")


def write_trace(trace: Trace, path: Path) -> None:
    Path(path).write_text(trace.to_text())


def _header(line: str, where: str) -> dict[str, str]:
    if not line.startswith(HEADER):
        raise TraceError(f"{where}:1: not a harness trace (expected a first line starting {HEADER!r})")
    fields = dict(word.split("=", 1) for word in line[len(HEADER):].split() if "=" in word)
    for key in ("n_layer", "n_expert", "n_used"):
        if not fields.get(key, "").isdigit() or int(fields[key]) <= 0:
            raise TraceError(f"{where}:1: header field {key} is missing or not a positive integer")
    return fields


def parse_trace(text: str, where: str = "trace") -> Trace:
    """A trace from its text; TraceError naming ``where`` and the line for anything malformed."""
    lines = text.splitlines()
    if not lines:
        raise TraceError(f"{where}: empty file")
    fields = _header(lines[0], where)
    n_layer, n_expert, n_used = (int(fields[k]) for k in ("n_layer", "n_expert", "n_used"))
    rows: list[list[int]] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            values = [int(v) for v in line.split()]
        except ValueError:
            raise TraceError(f"{where}:{number}: expected integers (token layer experts...)") from None
        if len(values) != 2 + n_used:
            raise TraceError(f"{where}:{number}: expected token, layer and {n_used} experts, got {len(values)} numbers")
        token, layer, ids = values[0], values[1], values[2:]
        if token != len(rows) // n_layer or layer != len(rows) % n_layer:
            raise TraceError(f"{where}:{number}: expected token {len(rows) // n_layer} layer {len(rows) % n_layer} "
                             f"(lines go token by token, every layer), got {token} {layer}")
        if any(not 0 <= e < n_expert for e in ids) or len(set(ids)) != n_used:
            raise TraceError(f"{where}:{number}: expected {n_used} distinct experts in 0..{n_expert - 1}")
        rows.append(ids)
    if not rows or len(rows) % n_layer:
        raise TraceError(f"{where}: the trace ends inside a token ({len(rows)} lines for {n_layer} layers)")
    experts = np.asarray(rows, dtype=np.int32).reshape(-1, n_layer, n_used)
    return Trace(n_layer, n_expert, n_used, experts, fields.get("source", "unknown"))


def read_trace(path: Path) -> Trace:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc.strerror})") from None
    return parse_trace(text, str(path))
