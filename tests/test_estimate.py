"""The decode estimate (harness.analysis.estimate, analysis.ladder): the paper check on the seed's own Orin
numbers, the properties a user reads the table by (more hits or a deeper queue never lower the ceiling), and the
ladder's clamping said out loud."""

from __future__ import annotations

import pytest

from harness.analysis.estimate import (
    HitModel,
    ModelBytes,
    Span,
    StrategyKnobs,
    estimate,
    estimate_all,
    strategies,
    trace_hits,
)
from harness.analysis.ladder import Ladder, LadderPoint
from harness.traces.synth import synth_trace

KIB = 1024
# seed 000 (docs/methodology.md section 1): fio on the model file of the Orin Nano Super's NVMe
SEED_LADDER = Ladder((LadderPoint(64 * KIB, 1, 200), LadderPoint(64 * KIB, 2, 465), LadderPoint(64 * KIB, 4, 778),
                      LadderPoint(128 * KIB, 8, 1618), LadderPoint(1024 * KIB, 4, 2515, "1 MiB seq")), "seed 000")
# 594 MB of expert bytes per decode token (17.71 GiB x 8/256), 40 MoE layers of 256 experts, 8 used
SEED_MODEL = ModelBytes(594_000_000, 40, 256, 8, source="seed 000")
SEED_HITS = HitModel(Span(1 - 0.47, 1 - 0.25), "seed 000: 25-47 % came from NVMe")
SEED_MEASURED = Span(1.0, 3.0)  # tok/s, llama.cpp mmap decode on the Orin


def by_name(results: list, name: str):  # noqa: ANN001, ANN201 - a lookup in a test
    return next(r for r in results if r.strategy == name)


def test_paper_check_the_seed_mmap_estimate_lands_in_its_measured_decode() -> None:
    mmap = by_name(estimate_all(SEED_MODEL, SEED_LADDER, SEED_HITS), "mmap")
    low, high = mmap.tok_s.low, mmap.tok_s.high
    middle = (low * high) ** 0.5
    print(f"\npaper check: mmap estimate {low:.2f}-{high:.2f} tok/s (geometric middle {middle:.2f}) vs measured "
          f"{SEED_MEASURED.low:.0f}-{SEED_MEASURED.high:.0f}: low end {low / SEED_MEASURED.low - 1:+.0%}, "
          f"high end {high / SEED_MEASURED.high - 1:+.0%}")
    assert SEED_MEASURED.low <= middle <= SEED_MEASURED.high
    assert low < SEED_MEASURED.high and high > SEED_MEASURED.low  # the ranges overlap
    # and neither end strays far: within 25 % of the measured ends
    assert abs(low / SEED_MEASURED.low - 1) < 0.25 and abs(high / SEED_MEASURED.high - 1) < 0.25
    assert not mmap.clamped
    # device bytes per token: the seed's 146-279 MB from NVMe
    assert mmap.device_bytes_per_token.low == pytest.approx(148.5e6, rel=0.01)
    assert mmap.device_bytes_per_token.high == pytest.approx(279.2e6, rel=0.01)


def test_more_cache_hits_never_lower_the_ceiling() -> None:
    for name in ("mmap", "pread", "direct-cache", "prefetch"):
        ceilings = [by_name(estimate_all(SEED_MODEL, SEED_LADDER, HitModel(Span.of(h), "given")), name).tok_s.low
                    for h in (0.0, 0.2, 0.5, 0.8, 0.95)]
        assert ceilings == sorted(ceilings) and ceilings[-1] > ceilings[0], (name, ceilings)


def test_a_deeper_queue_never_lowers_the_throughput_nor_the_ceiling() -> None:
    noisy = Ladder(SEED_LADDER.points + (LadderPoint(64 * KIB, 3, 400),), "a noisy rung")  # slower than QD2
    for ladder in (SEED_LADDER, noisy):
        rates = [ladder.throughput(64 * KIB, qd / 4).mb_s for qd in range(4, 80)]
        assert all(b >= a for a, b in zip(rates, rates[1:], strict=False))
    ceilings = [by_name(estimate_all(SEED_MODEL, SEED_LADDER, SEED_HITS, StrategyKnobs(qd=qd)), "io_uring").tok_s.high
                for qd in (1, 2, 4, 8, 16)]
    assert ceilings == sorted(ceilings) and ceilings[-1] > ceilings[0]


def test_the_ladder_is_linear_in_bytes_in_flight_between_rungs() -> None:
    assert SEED_LADDER.throughput(64 * KIB, 1).mb_s == pytest.approx(200)
    assert SEED_LADDER.throughput(64 * KIB, 1.5).mb_s == pytest.approx((200 + 465) / 2)
    assert SEED_LADDER.throughput(128 * KIB, 1).mb_s == pytest.approx(465)  # 128 KiB in flight, as 64 KiB QD2


def test_beyond_the_ladder_it_clamps_and_says_so() -> None:
    below, above = SEED_LADDER.throughput(4 * KIB, 1), SEED_LADDER.throughput(1024 * KIB, 32)
    assert (below.clamped, below.mb_s) == ("below", 200)
    assert (above.clamped, above.mb_s) == ("above", 2515)
    tiny = by_name(estimate_all(SEED_MODEL, SEED_LADDER, SEED_HITS, StrategyKnobs(bs_bytes=4 * KIB, threads=1)),
                   "pread")
    assert tiny.clamped
    assert any(a.startswith("Clamped:") and "below the ladder's smallest rung" in a for a in tiny.assumptions)
    on_ladder = by_name(estimate_all(SEED_MODEL, SEED_LADDER, SEED_HITS), "pread")
    assert not on_ladder.clamped and not any(a.startswith("Clamped:") for a in on_ladder.assumptions)


def test_compute_time_lowers_every_ceiling_and_prefetch_hides_it() -> None:
    bare = estimate_all(SEED_MODEL, SEED_LADDER, SEED_HITS)
    computed = estimate_all(SEED_MODEL, SEED_LADDER, SEED_HITS, compute_s_per_token=0.1)
    for a, b in zip(bare, computed, strict=True):
        if a.strategy != "prefetch":
            assert b.tok_s.high < a.tok_s.high
    pread, prefetch = by_name(computed, "pread"), by_name(computed, "prefetch")
    assert prefetch.tok_s.low > pread.tok_s.low  # the predicted reads overlap the compute
    blind = by_name(estimate_all(SEED_MODEL, SEED_LADDER, SEED_HITS, StrategyKnobs(predict_p=0.0), 0.1), "prefetch")
    assert blind.tok_s.low == pytest.approx(pread.tok_s.low)  # p = 0: nothing to overlap
    assert any("Compute 100.0 ms" in a for a in prefetch.assumptions)


def test_every_estimate_lists_its_assumptions_as_sentences() -> None:
    for one in estimate_all(SEED_MODEL, SEED_LADDER, SEED_HITS):
        assert len(one.assumptions) >= 4
        assert all(a[0].isupper() or a.startswith(one.strategy) for a in one.assumptions)
        assert all(a.endswith(".") for a in one.assumptions)


def test_direct_cache_uses_its_own_lru_and_pays_the_alignment() -> None:
    own = HitModel(Span.of(0.9), "its LRU")
    knobs = StrategyKnobs(direct_cache=own)
    direct = next(s for s in strategies(SEED_MODEL, knobs) if s.name == "direct-cache")
    result = estimate(SEED_MODEL, SEED_LADDER, direct, SEED_HITS)
    slices = SEED_MODEL.slices_per_token
    assert result.device_bytes_per_token.low == pytest.approx(594e6 * 0.1 + 4096 * slices * 0.1)


def test_trace_hits_range_from_cold_start_to_steady_state_and_grow_with_the_budget() -> None:
    model = ModelBytes(4 * 8 * 2 * 3 * 1000, 4, 8, 2, expert_bytes_per_layer=(3000,) * 4)  # one expert 3000 B
    trace = synth_trace(4, 8, 2, 64, s=1.0, seed=1)
    small, big = trace_hits(trace, 4 * 3000 * 4, model, "zipf"), trace_hits(trace, 4 * 3000 * 7, model, "zipf")
    assert 0 < small.share.low <= small.share.high < 1
    assert big.share.low > small.share.low
    everything = trace_hits(trace, 10**9, model, "zipf")
    assert everything.share.high == 1.0  # every expert fits: steady state never misses


def test_readahead_windows_larger_than_a_slice_cost_bytes_and_cache_room() -> None:
    # 4 layers, 8 experts (2 used), one expert 3 x 64 KiB: 64 KiB slices under a 256 KiB readahead window
    model = ModelBytes(4 * 2 * 3 * 65536, 4, 8, 2, expert_bytes_per_layer=(3 * 65536,) * 4)
    trace = synth_trace(4, 8, 2, 64, s=1.0, seed=2)
    hits = trace_hits(trace, 12 * 3 * 65536, model, "zipf")  # room for 12 of the 32 experts
    ladder = Ladder((LadderPoint(64 * KIB, 1, 200), LadderPoint(64 * KIB, 8, 1000)), "test")
    results = estimate_all(model, ladder, hits, StrategyKnobs(readahead_bytes=256 * KIB))
    mmap, pread = by_name(results, "mmap"), by_name(results, "pread")
    miss = 1 - hits.share.low
    assert pread.device_bytes_per_token.high == pytest.approx(model.expert_bytes_per_token * miss)
    # a fault reads the whole window (x4), and the windows leave room for a quarter of the experts: fewer hits
    assert mmap.device_bytes_per_token.high > 4 * pread.device_bytes_per_token.high
    assert any("1/4.00 of the budget holds experts" in a for a in mmap.assumptions)
    assert any("device bytes x 4.00" in a for a in mmap.assumptions)
    given = HitModel(hits.share, "given")  # a given share has no trace to compute again: kept, only the window
    kept = by_name(estimate_all(model, ladder, given, StrategyKnobs(readahead_bytes=256 * KIB)), "mmap")
    assert kept.device_bytes_per_token.high == pytest.approx(4 * pread.device_bytes_per_token.high)
