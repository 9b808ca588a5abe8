"""The experiment's ``rounds:`` key: a fixed number of interleaved rounds, or rounds until the answer is tight.

``rounds: 6`` runs every cell six times, interleaved, as it always did. ``rounds: {min: 2, max: 12, until: {metric:
decode_tps, ci_halfwidth_pct: 3}}`` runs ``min`` rounds, then one more round at a time until every cell's
confidence interval of the metric is within that many per cent of its mean, or ``max`` rounds were run (the rule:
harness/analysis/sequential.py). Pure data: the metric's name is checked against harness/results/metrics.py by
harness.campaign.resolve.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from harness.config.validate import StrictModel

# more rounds than a lab runs in a week of nights; a larger bound is a typo
MAX_ROUNDS = 1000


class Until(StrictModel):
    """When a cell is tight: the ``confidence`` interval of ``metric`` (its mean over the cell's observations)
    has a half-width of at most ``ci_halfwidth_pct`` per cent of the mean."""

    metric: str = Field(description="a metric of harness/results/metrics.py, e.g. decode_tps")
    ci_halfwidth_pct: Annotated[float, Field(gt=0, le=100)]
    confidence: Annotated[float, Field(gt=0.5, lt=1)] = 0.95
    # "cell": a tight cell stops (the baseline cell runs on while another cell of its step runs); "all": every
    # cell runs every round until all are tight (strict A B A B to the end, more runs)
    stop: Literal["cell", "all"] = "cell"
    # "bonferroni": the interval at every look is at confidence 1 - (1 - confidence) / looks (repeated confidence
    # intervals); "naive": the plain interval at every look (inflates; kept to measure by how much)
    rule: Literal["bonferroni", "naive"] = "bonferroni"


class RoundsSpec(StrictModel):
    min: Annotated[int, Field(ge=1, le=MAX_ROUNDS)] = 2
    max: Annotated[int, Field(ge=1, le=MAX_ROUNDS)]
    until: Until

    @model_validator(mode="after")
    def _bounds(self) -> RoundsSpec:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        if self.min < 2:
            raise ValueError("min must be at least 2: one round gives no interval to judge a cell by")
        return self


def _which(value: Any) -> str:
    return "RoundsSpec" if isinstance(value, dict | RoundsSpec) else "Count"


# tagged, so a bad mapping is told what is wrong with it rather than that it is not an integer (capitalised:
# harness.config.validate leaves such tags out of the field's path)
Rounds = Annotated[Annotated[Annotated[int, Field(ge=1, le=MAX_ROUNDS)], Tag("Count")]
                   | Annotated[RoundsSpec, Tag("RoundsSpec")], Discriminator(_which)]


def first_rounds(rounds: int | RoundsSpec) -> int:
    """The rounds planned before any result is seen: all of them, or ``min``."""
    return rounds if isinstance(rounds, int) else rounds.min
