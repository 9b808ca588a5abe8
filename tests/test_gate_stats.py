"""The gate's decision rule (harness.analysis.gate) on samples shaped like a board's: lognormal noise of a few per
cent with occasional stalls (a page-cache refill, a thermal step), as decode tok/s shows on a shared board.

Every sample is drawn with a fixed seed, so each assertion is about one reproducible set of numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.gate import decide, min_attainable_p, regression_limit


def board_samples(rng: np.random.Generator, n: int, level: float = 30.0, sigma: float = 0.04,
                  stall_p: float = 0.05) -> np.ndarray:
    """tok/s: ``level`` with lognormal noise of ``sigma`` and, with probability ``stall_p``, a stall that costs
    20-50 % of that request's speed."""
    values = level * rng.lognormal(0.0, sigma, n)
    stalls = rng.random(n) < stall_p
    values[stalls] *= rng.uniform(0.5, 0.8, stalls.sum())
    return values


def test_an_injected_10_percent_decode_regression_is_flagged() -> None:
    rng = np.random.default_rng(12)
    baseline = board_samples(rng, 20)
    candidate = 0.90 * board_samples(rng, 20)  # the injected regression: every request 10 % slower
    assert (baseline < 30 * 0.8).any() or (candidate < 27 * 0.8).any(), "the samples should include a stall"
    decision = decide(baseline, candidate, higher_is_better=True, threshold=0.05)
    assert decision.verdict == "regression", decision
    est = decision.estimate
    assert est is not None and est.high < 0.95 and est.p < 0.01 and est.ratio == pytest.approx(0.9, abs=0.04)
    assert decision.suspected


def test_a_10_percent_regression_is_flagged_in_most_noisy_sessions() -> None:
    """Power, not one lucky draw: 100 sessions of 20 requests per side (4 % noise, 5 % stalls)."""
    rng = np.random.default_rng(2026)
    flagged = sum(decide(board_samples(rng, 20), 0.90 * board_samples(rng, 20), higher_is_better=True,
                         threshold=0.05).verdict == "regression" for _ in range(100))
    assert flagged >= 75, f"only {flagged} of 100 injected 10 % regressions flagged"


def test_200_a_a_comparisons_flag_at_most_2_percent() -> None:
    """Both sides from the same distribution: any regression or improvement verdict is a false alarm."""
    rng = np.random.default_rng(20261201)
    verdicts = [decide(board_samples(rng, n), board_samples(rng, n), higher_is_better=True, threshold=0.05).verdict
                for n in [6, 12, 20, 40] * 50]
    false_alarms = sum(v in ("regression", "improvement") for v in verdicts)
    assert false_alarms <= 4, f"{false_alarms} of 200 A/A comparisons flagged"
    assert verdicts.count("pass") >= 196


def test_a_noisy_drop_past_the_threshold_is_not_a_regression_while_its_interval_reaches_the_limit() -> None:
    """p < 0.01 says the samples differ, the ratio says by about 6 %; the interval still reaches 0.95, so the gate
    does not flag (asv's factor + Mann-Whitney rule alone would)."""
    rng = np.random.default_rng(0)
    baseline = board_samples(rng, 40, sigma=0.08, stall_p=0)
    candidate = 0.92 * board_samples(rng, 40, sigma=0.08, stall_p=0)
    decision = decide(baseline, candidate, higher_is_better=True, threshold=0.05)
    est = decision.estimate
    assert est is not None and est.ratio < 0.95 and est.p < 0.01 and est.high >= 0.95, est
    assert decision.verdict == "pass" and decision.suspected and "interval" in decision.reason


def test_direction_lower_is_better_for_latency() -> None:
    rng = np.random.default_rng(5)
    base = board_samples(rng, 20, level=100.0, stall_p=0)
    slower = decide(base, 1.2 * board_samples(rng, 20, level=100.0, stall_p=0), higher_is_better=False,
                    threshold=0.05)
    faster = decide(base, 0.8 * board_samples(rng, 20, level=100.0, stall_p=0), higher_is_better=False,
                    threshold=0.05)
    assert slower.verdict == "regression" and slower.limit == pytest.approx(1.05)
    assert faster.verdict == "improvement" and not faster.suspected
    assert regression_limit(0.05, True) == pytest.approx(0.95)


def test_count_metrics_gate_on_a_tight_threshold() -> None:
    """Bytes read per token barely move for one model and build (0.2 % noise here): 2 % more is a regression at
    the 1 % count threshold, and the same change would pass the 5 % time threshold; 0.5 % more passes."""
    rng = np.random.default_rng(9)
    per_token = 11e6

    def counts(scale: float) -> np.ndarray:
        return per_token * scale * rng.normal(1.0, 0.002, 12)

    base = counts(1.0)
    more = counts(1.02)
    assert decide(base, more, higher_is_better=False, threshold=0.01).verdict == "regression"
    assert decide(base, more, higher_is_better=False, threshold=0.05).verdict == "pass"
    assert decide(base, counts(1.005), higher_is_better=False, threshold=0.01).verdict == "pass"


def test_identical_counts_pass_and_a_deterministic_jump_is_a_regression() -> None:
    same = decide([4096.0] * 6, [4096.0] * 6, higher_is_better=False, threshold=0.01)
    assert same.verdict == "pass" and same.estimate is not None and same.estimate.ratio == 1.0
    jump = decide([4096.0] * 6, [4608.0] * 6, higher_is_better=False, threshold=0.01)
    assert jump.verdict == "regression" and jump.estimate is not None and jump.estimate.ratio == pytest.approx(1.125)


def test_too_few_values_are_insufficient_not_a_pass() -> None:
    """4 against 4 cannot reach p < 0.01 however far apart (best 2/70 = 0.029); 5 against 5 can (2/252)."""
    assert min_attainable_p(4, 4) == pytest.approx(2 / 70) and min_attainable_p(5, 5) == pytest.approx(2 / 252)
    four = decide([30, 31, 29, 30], [10, 11, 9, 10], higher_is_better=True, threshold=0.05)
    assert four.verdict == "insufficient" and four.suspected and "p < 0.01" in four.reason
    five = decide([30, 31, 29, 30.2, 30.5], [10, 11, 9, 10.2, 10.5], higher_is_better=True, threshold=0.05)
    assert five.verdict == "regression"
    one = decide([30.0], [10.0], higher_is_better=True, threshold=0.05)
    assert one.verdict == "insufficient" and math.isnan(one.estimate.p)
    empty = decide([], [1.0, 2.0], higher_is_better=True, threshold=0.05)
    assert empty.verdict == "insufficient" and empty.estimate is None and not empty.suspected


def test_a_zero_baseline_gives_no_ratio() -> None:
    assert decide([0.0] * 6, [5.0] * 6, higher_is_better=False, threshold=0.01).verdict == "insufficient"
    assert decide([0.0] * 6, [0.0] * 6, higher_is_better=False, threshold=0.01).verdict == "pass"


def test_the_decision_is_reproducible() -> None:
    rng = np.random.default_rng(1)
    a, b = board_samples(rng, 15), 0.92 * board_samples(rng, 15)
    first = decide(a, b, higher_is_better=True, threshold=0.05)
    assert decide(a, b, higher_is_better=True, threshold=0.05) == first
    with pytest.raises(ValueError):
        decide(a, b, higher_is_better=True, threshold=5)
