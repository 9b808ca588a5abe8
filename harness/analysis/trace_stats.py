"""What a routing trace (``harness.traces``) says about the experts a decode reads: per MoE layer, over the
trace's window of decoded tokens,

* popularity: ``top4_share`` (the share of all selections that went to the layer's four most chosen experts),
  ``topk_share`` (the same for its ``n_used`` most chosen: 1.0 if the layer always picked the same experts, about
  n_used/n_expert for uniform routing over a long window), ``effective_experts`` = exp(entropy) of the selection
  counts (Shannon's entropy in nats, exponentiated: the "effective number" or Hill number of order 1 of ecology,
  Hill 1973, doi:10.2307/1934352; n_expert for a perfectly even spread, fewer the more concentrated), and
  ``distinct_experts`` (chosen at least once);
* reuse distance: for every selection, the number of tokens since the same expert was last chosen in the same
  layer (1: the previous token chose it too). ``reuse_median`` and ``reuse_p90`` over the selections that had an
  earlier one, ``reuse_d1_share`` the share of all selections at distance 1, ``never_reused`` the share whose
  expert had not been chosen before in the window (a first touch: no cache of any size hits it). It is a distance
  in time (tokens), not Mattson et al.'s stack distance (the number of distinct items used in between, which decides
  an LRU hit exactly; IBM Systems Journal 9(2), 1970, doi:10.1147/sj.92.0078): one cache holds every layer's
  experts, so the hit rates below are simulated rather than read off these distances;
* the hit rate of an LRU expert cache of a given size (``harness.traces.lru.lru_hits``, every layer's experts in
  one cache, sized in bytes with a model's expert bytes per layer, else in experts).

The same popularity figures for BigMoeOnEdge route-trace rows are ``harness.analysis.routing``, which takes
:func:`top_share` and :func:`effective_experts` from here; a route trace converted to a Trace
(``harness.traces.bmoe``) gets all of them. Like there, figures depend on the window's length: compare traces
over the same number of tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from harness.traces.lru import lru_hits
from harness.traces.model import Trace

TOP = 4


def top_share(counts: np.ndarray, top: int) -> float:
    """The share of all selections that went to the ``top`` most chosen (``counts``: selections per expert)."""
    total = float(counts.sum())
    return float(np.sort(counts)[::-1][:top].sum()) / total if total else 0.0


def effective_experts(counts: np.ndarray) -> float:
    """exp(entropy in nats) of the selection counts (see the module text)."""
    total = float(counts.sum())
    if not total:
        return 0.0
    share = counts[counts > 0] / total
    return float(np.exp(-(share * np.log(share)).sum()))


def reuse_distances(trace: Trace, layer: int) -> np.ndarray:
    """Per selection of ``layer`` (token-major, rank order) the tokens since that expert's previous selection in
    the layer; 0 for a first selection (there is no distance 0: a token chooses an expert at most once)."""
    last = np.full(trace.n_expert, -1, dtype=np.int64)
    out = np.zeros(trace.tokens * trace.n_used, dtype=np.int64)
    for token in range(trace.tokens):
        ids = trace.experts[token, layer]
        seen = last[ids]
        out[token * trace.n_used:(token + 1) * trace.n_used] = np.where(seen >= 0, token - seen, 0)
        last[ids] = token
    return out


@dataclass(frozen=True)
class LayerStats:
    layer: int
    tokens: int
    distinct_experts: int
    top4_share: float
    topk_share: float
    effective_experts: float
    reuse_median: float | None   # None: no selection of the layer was a reuse
    reuse_p90: float | None
    reuse_d1_share: float
    never_reused: float


def layer_stats(trace: Trace, layer: int) -> LayerStats:
    counts = np.bincount(trace.experts[:, layer].ravel(), minlength=trace.n_expert)
    distances = reuse_distances(trace, layer)
    reused = distances[distances > 0]
    n = len(distances)
    return LayerStats(
        layer=layer, tokens=trace.tokens, distinct_experts=int((counts > 0).sum()),
        top4_share=top_share(counts, TOP), topk_share=top_share(counts, trace.n_used),
        effective_experts=effective_experts(counts),
        reuse_median=float(np.median(reused)) if len(reused) else None,
        reuse_p90=float(np.percentile(reused, 90)) if len(reused) else None,
        reuse_d1_share=float((distances == 1).sum()) / n if n else 0.0,
        never_reused=float((distances == 0).sum()) / n if n else 0.0)


def per_layer(trace: Trace) -> list[LayerStats]:
    return [layer_stats(trace, layer) for layer in range(trace.n_layer)]


@dataclass(frozen=True)
class CacheStats:
    capacity: int                # bytes, or experts when ``unit`` is "experts"
    unit: str                    # "bytes" | "experts"
    capacity_experts: float      # how many experts of an average layer fit
    hit_rate: float
    byte_hit_rate: float
    accesses: int
    hits: int


def cache_stats(trace: Trace, capacities: list[int], expert_bytes: dict[int, int] | None = None,
                warmup_tokens: int = 0) -> list[CacheStats]:
    """The hit rate of an LRU of each capacity (bytes with ``expert_bytes``, else experts)."""
    unit = "bytes" if expert_bytes else "experts"
    mean_expert = float(np.mean(list(expert_bytes.values()))) if expert_bytes else 1.0
    out = []
    for capacity in capacities:
        result = lru_hits(trace, capacity, expert_bytes, warmup_tokens)
        out.append(CacheStats(capacity, unit, capacity / mean_expert, result.hit_rate, result.byte_hit_rate,
                              result.accesses, result.hits))
    return out


def summary(layers: list[LayerStats]) -> dict[str, dict[str, float]]:
    """Each per-layer figure's mean, min and max over layers (figures a layer lacks are left out)."""
    out: dict[str, dict[str, float]] = {}
    for name in ("distinct_experts", "top4_share", "topk_share", "effective_experts", "reuse_median", "reuse_p90",
                 "reuse_d1_share", "never_reused"):
        values = [float(v) for v in (getattr(s, name) for s in layers) if v is not None]
        if values:
            out[name] = {"mean": float(np.mean(values)), "min": min(values), "max": max(values)}
    return out


def trace_report(trace: Trace, capacities: list[int] | None = None, expert_bytes: dict[int, int] | None = None,
                 warmup_tokens: int = 0) -> dict[str, Any]:
    """Everything ``harness trace stats`` prints, as plain data (its ``--format json``); the caches' first
    ``warmup_tokens`` fill them uncounted (a steady state rather than the cold start)."""
    layers = per_layer(trace)
    return {
        "trace": {"n_layer": trace.n_layer, "n_expert": trace.n_expert, "n_used": trace.n_used,
                  "tokens": trace.tokens, "source": trace.source},
        "summary": summary(layers),
        "layers": [asdict(s) for s in layers],
        "cache_warmup_tokens": warmup_tokens,
        "cache": [asdict(c) for c in cache_stats(trace, capacities or [], expert_bytes, warmup_tokens)],
    }
