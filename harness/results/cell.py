"""A cell of a result set as a typed key: which target, engine, matrix values and cache condition a run measured.

One key instead of a label string that gets split back into words: pairing (compare, gate, F4) groups by the key,
and :meth:`CellKey.label` is the one place that writes the name users and the runs table's ``variant`` column see
(``bmoe-cache256 read_ahead_kb=8192 threads=1 cold``). :meth:`CellKey.parse` reads only what a user types on the
command line (``--baseline-variant``, ``--variant``); a result set's own labels are never parsed back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.errors import UsageError

# runs of these engines keep the labels they always had (sets from before the runs table named the engine too)
UNLABELLED_ENGINES = ("llama.cpp",)
CACHE_CONDITIONS = ("cold", "warm", "none")


def present(value: object) -> bool:
    """Not None, NaN, pd.NA or NaT (a matrix key this run's step does not vary over is missing in the runs table)."""
    if value is None:
        return False
    if isinstance(value, float):
        return not math.isnan(value)
    return type(value).__name__ not in ("NAType", "NaTType")


@dataclass(frozen=True, order=True)
class CellKey:
    """Target, engine label ("" for llama.cpp and engine-less steps), the matrix values in the experiment's order
    (as the label writes them) and the cache condition ("" when the run has none). Frozen: a dict key and a sort
    key; ordered field by field in that order."""

    target: str = ""
    engine: str = ""
    matrix: tuple[tuple[str, str], ...] = field(default=())
    cache: str = ""

    @property
    def build(self) -> str:
        """The cell's ``build`` axis value (the entry of the experiment's ``builds:`` it ran), "" when absent."""
        return dict(self.matrix).get("build", "")

    @classmethod
    def of(cls, values: Mapping[str, Any], params: Sequence[str], target: str = "") -> CellKey:
        """The cell of one run (a runs row or a dict) for the experiment's matrix keys ``params``: keys the run
        does not carry (or carries as NaN) are left out; an engine other than llama.cpp names it by its step
        label (the same cell measured by another engine, or another configuration of it, is another cell)."""
        engine = values.get("engine")
        label = ""
        if present(engine) and engine not in UNLABELLED_ENGINES:
            step_label = values.get("step_label")
            label = str(step_label) if present(step_label) else str(engine)
        matrix = tuple((p, str(values[p])) for p in params if p in values and present(values[p]))
        cache = values.get("cache", "")
        return cls(target, label, matrix, str(cache) if present(cache) else "")

    def label(self) -> str:
        """The display name and ``variant`` column: engine label, ``key=value`` per matrix key, cache condition
        (the target is not part of it: a figure or table says it beside the label)."""
        words = ([self.engine] if self.engine else []) + [f"{k}={v}" for k, v in self.matrix] + \
            ([self.cache] if self.cache else [])
        return " ".join(words).strip()

    def words(self) -> frozenset[str]:
        return frozenset(self.label().split())

    def matches(self, wanted: CellKey) -> bool:
        """Whether this cell is one ``wanted`` (a parsed command-line name) names: every part it gives agrees,
        in any order; a part it leaves out matches any value (``threads=1`` matches that cell in every cache
        condition and for every other key)."""
        return wanted.words() <= self.words() and (not wanted.target or wanted.target == self.target)

    @classmethod
    def parse(cls, text: str, where: str = "variant") -> CellKey:
        """What a user types for a cell: words ``key=value``, at most one cache condition (cold, warm, none) and
        at most one engine label, in any order. A bad name is one line naming ``where``."""
        words = text.split()
        if not words:
            raise UsageError(f"{where}: empty cell name (e.g. 'read_ahead_kb=8192 threads=1 cold')")
        matrix: dict[str, str] = {}
        caches, engines = [], []
        for word in words:
            key, eq, value = word.partition("=")
            if eq:
                if not key or not value:
                    raise UsageError(f"{where}: {word!r} in {text!r} is not key=value")
                if key in matrix:
                    raise UsageError(f"{where}: {key} given twice in {text!r}")
                matrix[key] = value
            elif word in CACHE_CONDITIONS:
                caches.append(word)
            else:
                engines.append(word)
        if len(caches) > 1 or len(engines) > 1:
            what, named = ("cache conditions", caches) if len(caches) > 1 else ("engine labels", engines)
            raise UsageError(f"{where}: {text!r} names two {what} ({', '.join(named)})")
        return cls("", engines[0] if engines else "", tuple(matrix.items()), caches[0] if caches else "")
