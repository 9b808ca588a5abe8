"""What an LRU cache of experts would hit on a trace: the cache model of the direct-cache design (BigMoeOnEdge's
expert cache, InferSSD's) and of a page cache under a memory budget, which `trace stats` and `estimate` both use.

Accesses go token by token, layer by layer, each chosen expert once; an expert is cached whole (all its tensors of
that layer), and a miss inserts it and evicts the least recently used until the cache fits its budget.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from harness.traces.model import Trace


@dataclass(frozen=True)
class LruResult:
    capacity_bytes: int
    accesses: int
    hits: int
    bytes_accessed: int
    bytes_hit: int

    @property
    def hit_rate(self) -> float:
        return self.hits / self.accesses if self.accesses else 0.0

    @property
    def byte_hit_rate(self) -> float:
        return self.bytes_hit / self.bytes_accessed if self.bytes_accessed else 0.0


def lru_hits(trace: Trace, capacity_bytes: int, expert_bytes: dict[int, int] | None = None,
             warmup_tokens: int = 0) -> LruResult:
    """Hits of an LRU holding ``capacity_bytes`` of experts; ``expert_bytes`` is one expert's bytes per layer
    (``ModelInfo.expert_bytes_per_layer``; without it every expert counts 1 byte, so the capacity is in experts).
    The first ``warmup_tokens`` fill the cache without being counted (a steady state, not the cold start)."""
    cache: OrderedDict[tuple[int, int], int] = OrderedDict()
    held = accesses = hits = accessed = hit_bytes = 0
    for token in range(trace.tokens):
        counted = token >= warmup_tokens
        for layer in range(trace.n_layer):
            size = (expert_bytes or {}).get(layer, 1)
            for expert in trace.experts[token, layer]:
                key = (layer, int(expert))
                if counted:
                    accesses += 1
                    accessed += size
                if key in cache:
                    cache.move_to_end(key)
                    if counted:
                        hits += 1
                        hit_bytes += size
                    continue
                if size > capacity_bytes:
                    continue  # an expert larger than the whole cache is never kept
                cache[key] = size
                held += size
                while held > capacity_bytes:
                    held -= cache.popitem(last=False)[1]
    return LruResult(capacity_bytes, accesses, hits, accessed, hit_bytes)
