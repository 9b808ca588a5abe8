"""Find the first bad revision between a good and a bad one, each midpoint measured against both in one session.

Pure: the search knows revisions only as strings and measures them through a ``measure(revision)`` callable that
returns one session's observations of the metric for the good build, the bad build and the midpoint, interleaved
(``None``: only good and bad, when no revision lies between them). Where the numbers come from (campaigns, builds,
result sets) is ``harness.campaign.bisect``.

The method is Chromium Pinpoint's (https://chromium.googlesource.com/catapult/+/HEAD/dashboard/dashboard/pinpoint):
a bisection whose every step compares builds measured on the same machine in the same job, with a statistical
test deciding whether two builds differ, and whose answer is the first revision that differs from the last good
one. Here every step measures the midpoint against *both* ends in one session, so drift between sessions never
enters a decision, and each decision is the gate's (:func:`harness.analysis.gate.decide`: ratio of medians past the
threshold, its whole 95 % bootstrap interval past it, Mann-Whitney p < alpha).

- First the ends: when bad is not a regression against good at the threshold (or the gate cannot decide: too
  few rounds), the search stops and says so in one line.
- A midpoint is **bad** when it is a regression against good; **good** when it is an improvement against bad and
  not a regression against good. When neither test is conclusive the midpoint goes to the end its median is
  nearer to (in log ratio) and the step is marked unclear: more rounds would make it clear.
- With n revisions after good, ceil(log2 n) midpoints are measured: 8 revisions (good + 7) take 3.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from harness.analysis.gate import DEFAULT_ALPHA, GateDecision, decide


@dataclass(frozen=True)
class Session:
    """One session's observations of the metric: good and bad builds, and the midpoint's (None: not measured)."""

    good: Sequence[float]
    bad: Sequence[float]
    mid: Sequence[float] | None
    where: str = ""  # the result set it came from


Measure = Callable[[str | None], Session]
Side = Literal["good", "bad"]


@dataclass(frozen=True)
class Step:
    """One session of the search: the midpoint measured (None: only the ends) and what the gate made of it."""

    revision: str | None
    bad_vs_good: GateDecision
    mid_vs_good: GateDecision | None = None
    mid_vs_bad: GateDecision | None = None
    side: Side | None = None
    clear: bool = True
    where: str = ""


@dataclass(frozen=True)
class Outcome:
    """``found``: ``first_bad`` is the first revision like bad, ``last_good`` the one before it, ``decision`` the
    first bad revision against good (from the session that measured it). ``no-difference``: good and bad do not
    differ at the threshold; ``decision`` is bad against good."""

    kind: Literal["found", "no-difference"]
    good: str
    bad: str
    decision: GateDecision
    first_bad: str | None = None
    last_good: str | None = None
    candidates: int = 0  # revisions after good, bad included: the first bad one is among them
    steps: list[Step] = field(default_factory=list)

    @property
    def midpoints(self) -> int:
        return sum(1 for step in self.steps if step.revision is not None)

    def line(self, metric: str, describe: Callable[[str], str] = str) -> str:
        """The answer in one line, with the gate's ratio, interval and p-value."""
        numbers = _numbers(self.decision)
        if self.kind == "no-difference":
            return (f"good {describe(self.good)} and bad {describe(self.bad)} do not differ at "
                    f"{self.decision.threshold * 100:g} %: {metric} bad/good {numbers} ({self.decision.reason}); "
                    "nothing to bisect")
        assert self.first_bad is not None and self.last_good is not None
        unclear = sum(1 for step in self.steps if not step.clear)
        caveat = f"; {unclear} step(s) unclear, see below" if unclear else ""
        return (f"first bad revision: {describe(self.first_bad)} (after {describe(self.last_good)}): {metric} "
                f"vs good {numbers}; {self.midpoints} midpoint build(s) for {self.candidates} candidates{caveat}")


def _numbers(decision: GateDecision) -> str:
    est = decision.estimate
    if est is None:
        return "no ratio"
    p = "p n/a" if math.isnan(est.p) else f"p = {est.p:.2g}"
    return f"x{est.ratio:.3f} [{est.low:.3f}, {est.high:.3f}] ({est.confidence * 100:g} % CI), {p}"


def classify(mid_vs_good: GateDecision, mid_vs_bad: GateDecision) -> tuple[Side, bool]:
    """Which end a midpoint is like, and whether the gate said so (False: decided by the nearer median)."""
    regressed = mid_vs_good.verdict == "regression"
    recovered = mid_vs_bad.verdict == "improvement"
    if regressed:
        return "bad", not recovered  # both: between the ends, already past the threshold against good
    if recovered:
        return "good", True
    to_good = _distance(mid_vs_good)
    to_bad = _distance(mid_vs_bad)
    return ("bad" if to_bad < to_good else "good"), False


def _distance(decision: GateDecision) -> float:
    est = decision.estimate
    if est is None or not math.isfinite(est.ratio) or est.ratio <= 0:
        return math.inf
    return abs(math.log(est.ratio))


def bisect(revisions: Sequence[str], measure: Measure, *, higher_is_better: bool, threshold: float,
           alpha: float = DEFAULT_ALPHA) -> Outcome:
    """``revisions``: good first, bad last, in order. Each step is one ``measure`` call (one session)."""
    if len(revisions) < 2:
        raise ValueError("bisect needs a good and a bad revision")

    def gate(baseline: Sequence[float], candidate: Sequence[float]) -> GateDecision:
        return decide(baseline, candidate, higher_is_better=higher_is_better, threshold=threshold, alpha=alpha)

    good, bad = revisions[0], revisions[-1]
    lo, hi = 0, len(revisions) - 1
    steps: list[Step] = []
    culprit: GateDecision | None = None  # the current first-bad candidate against good
    while True:
        mid = (lo + hi) // 2 if hi - lo > 1 else None
        session = measure(revisions[mid] if mid is not None else None)
        bad_vs_good = gate(session.good, session.bad)
        if not steps and bad_vs_good.verdict != "regression":
            steps.append(Step(None, bad_vs_good, where=session.where))
            return Outcome("no-difference", good, bad, bad_vs_good, steps=steps)
        if hi == len(revisions) - 1:
            culprit = bad_vs_good  # bad is still the first bad candidate: the latest session's word on it
        if mid is None:
            steps.append(Step(None, bad_vs_good, where=session.where))
            break
        if session.mid is None:
            raise ValueError(f"measure({revisions[mid]!r}) returned no midpoint observations")
        mid_vs_good, mid_vs_bad = gate(session.good, session.mid), gate(session.bad, session.mid)
        side, clear = classify(mid_vs_good, mid_vs_bad)
        steps.append(Step(revisions[mid], bad_vs_good, mid_vs_good, mid_vs_bad, side, clear, session.where))
        if side == "bad":
            hi, culprit = mid, mid_vs_good
        else:
            lo = mid
        if hi - lo == 1:
            break
    assert culprit is not None
    return Outcome("found", good, bad, culprit, first_bad=revisions[hi], last_good=revisions[lo],
                   candidates=len(revisions) - 1, steps=steps)
