"""The decode ceiling a read strategy allows: expert bytes per token that must come from the device, divided by
the throughput the drive gives at the queue depth and request size that strategy reaches (issue 24; the formula
and its paper check are in docs/methodology.md, "The decode estimate"). Pure: no file, no clock.

Per token, with h the share of expert bytes served from memory (page cache or the strategy's own cache):

    device bytes   D = E x (1 - h) (+ O_DIRECT's 4 KiB alignment per slice read, for direct-cache)
    I/O time       t_io = D / R(q, b)      R: the fio ladder read at q requests of b bytes (analysis.ladder)
    token time     t = t_io + c            c: compute per token, when given (0: the I/O ceiling)
                   prefetch with accuracy p: t = max(p t_io, c) + (1 - p) t_io  (the predicted share overlaps)
    ceiling        1 / t tok/s, as a range: low from (h low, q and b low), high from (h high, q and b high)

What each strategy reaches (``Strategy``): mmap faults of readahead size at 1.0-1.7 in flight, as the seed
measured on the Orin (seed 000: average I/O 70-84 KiB, 1.0-1.7 in flight, 25-47 % of 594 MB per token from NVMe;
docs/methodology.md section 1); mmap-willneed the same at worst (the seed saw no change) and at best one
readahead window per chosen expert tensor of the layer in flight; pread T threads = QD T at B; io_uring QD Q at
B; direct-cache T threads of O_DIRECT reads at B with an LRU of its budget (harness.traces.lru); prefetch the
pread pattern with the next layer's reads overlapping compute (Edge0's prerouter at p = 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from harness.analysis.ladder import MB, Ladder, Throughput, clamp_note
from harness.traces.lru import lru_hits
from harness.traces.model import Trace

KIB = 1024
DIRECT_ALIGN = 4096  # O_DIRECT's offset and length alignment: a slice read from an unaligned offset costs ~4 KiB
SEED_MMAP_INFLIGHT = (1.0, 1.7)  # seed 000: average requests in flight during decode (block stats)
SEED_MMAP_IO = (70 * KIB, 84 * KIB)  # seed 000: average read request size during decode
STRATEGIES = ("mmap", "mmap-willneed", "pread", "io_uring", "direct-cache", "prefetch")


@dataclass(frozen=True)
class Span:
    """A range low..high (equal ends: one value)."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"a range needs low <= high, got {self.low:g}..{self.high:g}")

    @classmethod
    def of(cls, a: float, b: float | None = None) -> Span:
        b = a if b is None else b
        return cls(min(a, b), max(a, b))

    def text(self, fmt: str = "{:.2f}") -> str:
        low, high = (fmt.format(v) if math.isfinite(v) else "unbounded" for v in (self.low, self.high))
        return low if low == high else f"{low}-{high}"


@dataclass(frozen=True)
class ModelBytes:
    """What a model streams per token (``harness.models.inspect.ModelInfo``, or the seed's figures)."""

    expert_bytes_per_token: int
    n_layer: int
    n_expert: int
    n_used: int
    tensors_per_expert: int = 3  # up, gate, down
    expert_bytes_per_layer: tuple[int, ...] = ()  # one expert's bytes, per MoE layer in order (empty: unknown)
    source: str = ""

    @property
    def slices_per_token(self) -> int:
        return self.n_layer * self.n_used * self.tensors_per_expert

    @property
    def slice_bytes(self) -> float:
        """An average expert slice (one tensor of one expert)."""
        return self.expert_bytes_per_token / self.slices_per_token


@dataclass(frozen=True)
class TraceCache:
    """The LRU a hit share was computed with: kept so a strategy that fills the cache with more than the experts
    (mmap's readahead windows) can compute it again for the experts that still fit."""

    trace: Trace
    budget_bytes: int
    what: str


@dataclass(frozen=True)
class HitModel:
    """The share of expert bytes that does not come from the device, as a range, and where it came from."""

    share: Span
    source: str
    cache: TraceCache | None = None

    def __post_init__(self) -> None:
        if not (0.0 <= self.share.low and self.share.high <= 1.0):
            raise ValueError(f"a hit share is in 0..1, got {self.share.text()}")


@dataclass(frozen=True)
class Strategy:
    """What a read strategy reaches: requests in flight and their size, which cache serves it, and overlap."""

    name: str
    inflight: Span
    request_bytes: Span
    reaches: str  # why these figures, one sentence
    own_cache: HitModel | None = None  # None: the page cache (the shared hit model)
    direct: bool = False  # O_DIRECT: the alignment overhead per slice read
    predict_p: float | None = None  # prefetch: the predictor's accuracy
    readahead_bytes: int | None = None  # page-cache readahead around each fault (mmap): reads max(slice, window)


@dataclass(frozen=True)
class StrategyEstimate:
    strategy: str
    device_bytes_per_token: Span
    throughput_mb_s: Span
    tok_s: Span
    clamped: bool
    assumptions: tuple[str, ...]


@dataclass(frozen=True)
class StrategyKnobs:
    """The settings a user picks for the strategies (the replay program's options of the same names)."""

    threads: int = 4
    bs_bytes: int = 128 * KIB
    qd: int = 4
    readahead_bytes: int = 128 * KIB
    predict_p: float = 1.0
    mmap_inflight: Span = field(default_factory=lambda: Span(*SEED_MMAP_INFLIGHT))
    mmap_io: Span = field(default_factory=lambda: Span(*SEED_MMAP_IO))
    direct_cache: HitModel | None = None  # direct-cache's own LRU; None: the same figure as the page cache


def strategies(model: ModelBytes, knobs: StrategyKnobs) -> list[Strategy]:
    """The six strategies of the replay program, each with what it reaches under ``knobs``."""
    cap = model.slice_bytes  # no request is larger than the slice it reads
    bs = Span.of(min(knobs.bs_bytes, cap))
    fault_kib = Span(knobs.mmap_io.low / KIB, knobs.mmap_io.high / KIB).text("{:.0f}")
    seed = (knobs.mmap_inflight, knobs.mmap_io) == (Span(*SEED_MMAP_INFLIGHT), Span(*SEED_MMAP_IO))
    why = ("what the seed measured on the Orin's llama.cpp decode; another board or kernel may differ: "
           "--mmap-inflight, --mmap-io" if seed else "as given: --mmap-inflight, --mmap-io")
    mmap = Strategy("mmap", knobs.mmap_inflight, knobs.mmap_io,
                    f"page faults of {fault_kib} KiB at {knobs.mmap_inflight.text()} in flight ({why})",
                    readahead_bytes=knobs.readahead_bytes)
    wide = min(model.n_used * model.tensors_per_expert, 64)
    willneed = Strategy("mmap-willneed", Span(knobs.mmap_inflight.low, max(knobs.mmap_inflight.low, wide)),
                        Span.of(knobs.mmap_io.low, min(knobs.readahead_bytes, cap)),
                        f"at worst as mmap (the seed measured no change), at best one readahead window "
                        f"({knobs.readahead_bytes // KIB} KiB) per chosen expert tensor of a layer in flight "
                        f"({wide})", readahead_bytes=knobs.readahead_bytes)
    pread = Strategy("pread", Span.of(knobs.threads), bs,
                     f"{knobs.threads} threads, each one request of {int(bs.low) // KIB} KiB in flight")
    uring = Strategy("io_uring", Span.of(knobs.qd), bs, f"queue depth {knobs.qd} of {int(bs.low) // KIB} KiB")
    direct = Strategy("direct-cache", Span.of(knobs.threads), bs,
                      f"{knobs.threads} threads of O_DIRECT reads of {int(bs.low) // KIB} KiB into its own LRU",
                      own_cache=knobs.direct_cache, direct=True)
    prefetch = replace(pread, name="prefetch", predict_p=knobs.predict_p,
                       reaches=pread.reaches + f"; the next layer's reads issued early, predictor accuracy "
                                               f"p = {knobs.predict_p:g}")
    return [mmap, willneed, pread, uring, direct, prefetch]


def estimate(model: ModelBytes, ladder: Ladder, strategy: Strategy, page_cache: HitModel,
             compute_s_per_token: float | None = None) -> StrategyEstimate:
    """One strategy's decode ceiling as a range, with the sentences it rests on."""
    hits = strategy.own_cache or _polluted(model, page_cache, strategy.readahead_bytes)
    worst = _device_bytes(model, strategy, hits.share.low)
    best = _device_bytes(model, strategy, hits.share.high)
    slow = ladder.throughput(strategy.request_bytes.low, strategy.inflight.low)
    fast = ladder.throughput(strategy.request_bytes.high, strategy.inflight.high)
    compute = compute_s_per_token or 0.0
    low = _tok_s(worst, slow, compute, strategy.predict_p)
    high = _tok_s(best, fast, compute, strategy.predict_p)
    notes = [f"{strategy.name}: {strategy.reaches}.",
             f"Expert bytes per token: {model.expert_bytes_per_token / MB:.0f} MB ({model.source}); dense "
             "weights are resident (only routed experts stream).",
             f"Served from memory: {hits.share.text('{:.0%}')} of them ({hits.source}).",
             f"Throughput: the fio ladder {ladder.describe()}, read at "
             f"{Span(slow.inflight_bytes / KIB, fast.inflight_bytes / KIB).text('{:.0f}')} KiB in flight (linear "
             "between rungs in bytes in flight)."]
    notes += [f"Clamped: {note}." for note in dict.fromkeys((clamp_note(slow), clamp_note(fast))) if note]
    notes.append(_compute_note(strategy, compute_s_per_token))
    if strategy.direct:
        notes.append(f"O_DIRECT alignment: {DIRECT_ALIGN} bytes more per expert slice read from the device.")
    if strategy.readahead_bytes is not None:
        notes.append(_readahead_note(model, strategy.readahead_bytes))
    return StrategyEstimate(strategy.name, Span.of(worst, best), Span.of(slow.mb_s, fast.mb_s), Span.of(low, high),
                            slow.clamped is not None or fast.clamped is not None, tuple(notes))


def estimate_all(model: ModelBytes, ladder: Ladder, page_cache: HitModel, knobs: StrategyKnobs | None = None,
                 compute_s_per_token: float | None = None) -> list[StrategyEstimate]:
    chosen = strategies(model, knobs or StrategyKnobs())
    return [estimate(model, ladder, s, page_cache, compute_s_per_token) for s in chosen]


def _device_bytes(model: ModelBytes, strategy: Strategy, hit_share: float) -> float:
    miss = 1.0 - hit_share
    extra = DIRECT_ALIGN * model.slices_per_token * miss if strategy.direct else 0.0
    return model.expert_bytes_per_token * miss * _amplification(model, strategy.readahead_bytes) + extra


def _amplification(model: ModelBytes, readahead_bytes: int | None) -> float:
    """A fault on a mapped file reads the readahead window around it (mm/filemap.c, do_sync_mmap_readahead:
    ra_pages centred on the fault), so a slice smaller than the window costs the window."""
    if readahead_bytes is None:
        return 1.0
    return max(1.0, readahead_bytes / model.slice_bytes)


def _readahead_note(model: ModelBytes, readahead_bytes: int) -> str:
    amp = _amplification(model, readahead_bytes)
    what = (f"each {model.slice_bytes / KIB:.0f} KiB expert slice costs the window: device bytes x {amp:.2f} (the "
            "neighbours it reads counted as waste)" if amp > 1 else
            f"no larger than an expert slice ({model.slice_bytes / KIB:.0f} KiB): no over-read")
    return (f"Readahead window {readahead_bytes // KIB} KiB around each fault (--readahead: the target's "
            f"read_ahead_kb): {what}.")


def _tok_s(device_bytes: float, rate: Throughput, compute_s: float, predict_p: float | None) -> float:
    io_s = device_bytes / (rate.mb_s * MB)
    if predict_p is None:
        total = io_s + compute_s
    else:  # the predicted share is read while the current layer computes; the rest waits as before
        total = max(predict_p * io_s, compute_s) + (1.0 - predict_p) * io_s
    return float("inf") if total <= 0 else 1.0 / total


def _compute_note(strategy: Strategy, compute_s: float | None) -> str:
    if compute_s is None:
        if strategy.predict_p is not None:
            return ("No compute time given: the ceiling is I/O alone, so prefetch's overlap cannot show (give "
                    "--compute-ms).")
        return "No compute time given: the ceiling is I/O alone (reads and compute never overlap)."
    if strategy.predict_p is not None:
        return (f"Compute {compute_s * 1e3:.1f} ms per token, overlapped with the predicted share "
                f"({strategy.predict_p:.0%}) of the reads.")
    return f"Compute {compute_s * 1e3:.1f} ms per token, after the reads (no overlap)."


def trace_hits(trace: Trace, budget_bytes: int, model: ModelBytes, what: str) -> HitModel:
    """The byte hit share of an LRU of ``budget_bytes`` on ``trace``: from a cold cache (low) to the steady
    state after the first half of the trace (high)."""
    per_layer = dict(enumerate(model.expert_bytes_per_layer)) or None
    cold = lru_hits(trace, budget_bytes, per_layer).byte_hit_rate
    warm = lru_hits(trace, budget_bytes, per_layer, warmup_tokens=trace.tokens // 2).byte_hit_rate
    return HitModel(Span.of(cold, warm), f"an LRU of {budget_bytes / MB:.0f} MB on {what}, {trace.tokens} tokens: "
                                         "cold start to steady state", TraceCache(trace, budget_bytes, what))


def _polluted(model: ModelBytes, page_cache: HitModel, readahead_bytes: int | None) -> HitModel:
    """The page cache as a strategy whose faults read a window larger than a slice sees it: every cached slice
    brings its window, so 1/amplification as many experts fit the budget (computed again on the trace; a given
    share is kept as given)."""
    amp = _amplification(model, readahead_bytes)
    if amp <= 1 or page_cache.cache is None:
        return page_cache
    cache = page_cache.cache
    fewer = trace_hits(cache.trace, int(cache.budget_bytes / amp), model, cache.what)
    return HitModel(fewer.share, f"{page_cache.source}; each cached slice brings its readahead window, so only "
                                 f"1/{amp:.2f} of the budget holds experts", cache)


def range_error(estimated: Span, measured: float) -> float:
    """How far a measured value is outside an estimated range, relative to it: 0 inside, (nearest end /
    measured - 1) outside (positive: the estimate is too high)."""
    if measured <= 0:
        return float("nan")
    if measured < estimated.low:
        return estimated.low / measured - 1.0
    if measured > estimated.high:
        return estimated.high / measured - 1.0
    return 0.0
