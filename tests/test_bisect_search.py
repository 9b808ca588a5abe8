"""The bisect search on its own (harness.analysis.bisect): a measure(revision) callable stands in for the campaigns.
It names the first bad revision in ceil(log2 n) midpoints wherever it is, decides every step with the gate's
statistics, stops with one line when good and bad do not differ, and says when a step was unclear."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from harness.analysis.bisect import Session, bisect

REVISIONS = [f"r{i}" for i in range(8)]  # r0 good ... r7 bad


class Board:
    """Interleaved rounds of a build whose decode rate drops from `fast` to `slow` at revision `first_bad`."""

    def __init__(self, first_bad: int | None, *, fast: float = 100.0, slow: float = 60.0, rounds: int = 6,
                 middle: float | None = None) -> None:
        self.first_bad, self.fast, self.slow, self.rounds, self.middle = first_bad, fast, slow, rounds, middle
        self.rng = np.random.default_rng(7)
        self.measured: list[str | None] = []

    def rate(self, revision: str) -> float:
        index = REVISIONS.index(revision)
        if self.middle is not None and index == 4:
            return self.middle
        return self.slow if self.first_bad is not None and index >= self.first_bad else self.fast

    def sample(self, revision: str) -> list[float]:
        return list(self.rate(revision) * (1 + 0.01 * self.rng.standard_normal(self.rounds)))

    def __call__(self, revision: str | None) -> Session:
        self.measured.append(revision)
        mid = self.sample(revision) if revision is not None else None
        return Session(self.sample("r0"), self.sample("r7"), mid, where=f"set-{len(self.measured)}")


@pytest.mark.parametrize("first_bad", range(1, 8))
def test_finds_the_first_bad_revision_in_three_midpoints(first_bad: int) -> None:
    board = Board(first_bad)
    outcome = bisect(REVISIONS, board, higher_is_better=True, threshold=0.05)
    assert outcome.kind == "found" and outcome.first_bad == f"r{first_bad}"
    assert outcome.last_good == f"r{first_bad - 1}"
    assert outcome.midpoints == len(board.measured) <= math.ceil(math.log2(7)) == 3
    assert [step.where for step in outcome.steps] == [f"set-{i + 1}" for i in range(len(board.measured))]
    est = outcome.decision.estimate
    assert est is not None and outcome.decision.verdict == "regression"
    assert est.ratio == pytest.approx(0.6, abs=0.02) and est.low <= est.ratio <= est.high < 0.95
    line = outcome.line("decode_tps")
    assert "\n" not in line and line.startswith(f"first bad revision: r{first_bad} (after r{first_bad - 1}): ")
    assert f"x{est.ratio:.3f} [{est.low:.3f}, {est.high:.3f}] (95 % CI), p = {est.p:.2g}" in line
    assert f"{outcome.midpoints} midpoint build(s) for 7 candidates" in line


def test_equal_good_and_bad_stop_after_one_session_with_one_line() -> None:
    board = Board(None)
    outcome = bisect(REVISIONS, board, higher_is_better=True, threshold=0.05)
    assert outcome.kind == "no-difference" and outcome.first_bad is None
    assert len(board.measured) == 1  # the first session already says there is nothing to find
    line = outcome.line("decode_tps", describe=lambda rev: rev.upper())
    assert re.fullmatch(r"good R0 and bad R7 do not differ at 5 %: decode_tps bad/good x0\.99\d \[0\.9\d\d, 1\.0\d\d\] "
                        r"\(95 % CI\), p = 0\.\d+ \(within 5 % of the baseline\); nothing to bisect", line), line
    assert line.endswith("(within 5 % of the baseline); nothing to bisect")


def test_a_change_smaller_than_the_threshold_is_no_difference() -> None:
    outcome = bisect(REVISIONS, Board(3, slow=97.0), higher_is_better=True, threshold=0.05)
    assert outcome.kind == "no-difference"


def test_too_few_rounds_for_the_test_stop_and_say_why() -> None:
    outcome = bisect(REVISIONS, Board(3, rounds=4), higher_is_better=True, threshold=0.05)
    assert outcome.kind == "no-difference"
    assert "n 4/4 cannot reach p < 0.01" in outcome.line("decode_tps")


def test_two_adjacent_revisions_need_no_midpoint() -> None:
    board = Board(7)
    outcome = bisect(["r6", "r7"], lambda rev: board(rev) if rev is None else pytest.fail("no midpoint"),
                     higher_is_better=True, threshold=0.05)
    assert (outcome.kind, outcome.first_bad, outcome.last_good, outcome.midpoints) == ("found", "r7", "r6", 0)


def test_a_midpoint_between_the_ends_is_unclear_and_goes_to_the_nearer_end() -> None:
    # r4 runs at 96: not a regression against 100 at 5 %, and an improvement against 60: good, clearly
    clear = bisect(REVISIONS, Board(5, middle=96.0), higher_is_better=True, threshold=0.05)
    assert clear.first_bad == "r5" and all(step.clear for step in clear.steps)
    # r4 at 70: a regression against 100 and an improvement against 60, between the ends: bad, marked unclear
    board = Board(5, middle=70.0)
    outcome = bisect(REVISIONS, board, higher_is_better=True, threshold=0.05)
    step = next(step for step in outcome.steps if step.revision == "r4")
    assert step.side == "bad" and not step.clear
    assert outcome.first_bad == "r4" and "1 step(s) unclear" in outcome.line("decode_tps")


def test_a_midpoint_the_gate_cannot_place_goes_to_the_nearer_median() -> None:
    board = Board(5, middle=75.0)
    board.rounds = 6

    def measure(revision: str | None) -> Session:
        session = board(revision)
        # r4 measured twice only: too few for p < 0.01 on either side, its median 75 is nearer 60 than 100
        return Session(session.good, session.bad, session.mid[:2], session.where) if revision == "r4" else session

    outcome = bisect(REVISIONS, measure, higher_is_better=True, threshold=0.05)
    step = next(step for step in outcome.steps if step.revision == "r4")
    assert step.mid_vs_good is not None and step.mid_vs_good.verdict == "insufficient"
    assert (step.side, step.clear, outcome.first_bad) == ("bad", False, "r4")


def test_lower_is_better_metrics_bisect_the_other_way() -> None:
    board = Board(2, fast=10.0, slow=20.0)  # a latency that doubles
    outcome = bisect(REVISIONS, board, higher_is_better=False, threshold=0.05)
    assert outcome.first_bad == "r2" and outcome.decision.estimate is not None
    assert outcome.decision.estimate.ratio == pytest.approx(2.0, abs=0.05)


def test_fewer_than_two_revisions_is_an_error() -> None:
    with pytest.raises(ValueError, match="a good and a bad revision"):
        bisect(["r0"], Board(None), higher_is_better=True, threshold=0.05)
