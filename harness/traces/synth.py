"""Synthetic routing traces: uniform, Zipf-skewed popularity, and temporal reuse, all seeded.

Per layer, experts get a popularity order of their own (a seeded permutation); a token draws its ``n_used``
distinct experts without replacement with probabilities proportional to rank^-s (s = 0: uniform). With reuse
r each slot first keeps, with probability r, one of the previous token's experts of that layer not yet chosen
(what decode traces of real models show as reuse between consecutive tokens), and otherwise draws by popularity.
"""

from __future__ import annotations

import numpy as np

from harness.traces.model import Trace, TraceError


def synth_trace(n_layer: int, n_expert: int, n_used: int, tokens: int, *, s: float = 0.0, reuse: float = 0.0,
                seed: int = 0) -> Trace:
    if not 0 < n_used <= n_expert:
        raise TraceError(f"trace synth: n_used must be in 1..n_expert ({n_expert}), got {n_used}")
    if tokens <= 0 or n_layer <= 0:
        raise TraceError("trace synth: tokens and layers must be positive")
    if s < 0 or not 0 <= reuse <= 1:
        raise TraceError(f"trace synth: expected s >= 0 and 0 <= reuse <= 1, got s={s} reuse={reuse}")
    rng = np.random.default_rng(seed)
    weights = np.arange(1, n_expert + 1, dtype=np.float64) ** -s
    popularity = []
    for _ in range(n_layer):
        p = np.empty(n_expert)
        p[rng.permutation(n_expert)] = weights / weights.sum()  # the r-th most popular expert of this layer
        popularity.append(p)
    experts = np.zeros((tokens, n_layer, n_used), dtype=np.int32)
    for token in range(tokens):
        for layer in range(n_layer):
            experts[token, layer] = _one(rng, popularity[layer], n_used, reuse,
                                         experts[token - 1, layer] if token else None)
    source = f"synth:{'uniform' if s == 0 else f'zipf:{s:g}'}:reuse={reuse:g}:seed={seed}"
    return Trace(n_layer, n_expert, n_used, experts, source)


def _one(rng: np.random.Generator, p: np.ndarray, n_used: int, reuse: float, previous: np.ndarray | None) -> list[int]:
    chosen: list[int] = []
    if previous is not None and reuse > 0:
        keep = [int(e) for e in previous if rng.random() < reuse]
        chosen = keep[:n_used]
    rest = p.copy()
    rest[chosen] = 0.0
    if len(chosen) < n_used:
        chosen += [int(e) for e in rng.choice(len(p), n_used - len(chosen), replace=False, p=rest / rest.sum())]
    return chosen
