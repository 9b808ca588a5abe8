"""The experiment's ``validity:`` key: how much interference a run may see and still count as a measurement.

A run beyond a limit stays "ok" (the runner did its job) but is marked ``perturbed`` with the reason
(harness/results/validity.py), shown in the report and left out of summaries, figures, compare and gate. A run
that decoded too few tokens or over too short a window (``min_decode_tokens``, ``min_window_s``) is marked
``invalid`` the same way (harness/results/minimums.py): measured fine, but too short to mean anything.
``exclude_outliers`` drops the samples flagged as outliers (harness/analysis/outliers.py) from compare's and the
gate's medians; without it they are flagged and kept.
``validity: off`` (or null) measures but marks nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from harness.config.validate import StrictModel

Percent = Annotated[float, Field(ge=0, le=100)]
MIN_DECODE_TOKENS = 32  # chosen from measurement (ValidityLimits.min_decode_tokens)


class ValidityLimits(StrictModel):
    """Limits a run's interference record (runner/interference.py) is held to; None turns one limit off.

    Defaults are for a quiet board, where each of these stays near 0: a few per cent of the step's time waiting
    in the runqueue is the harness's own samplers waking up; 10 % of the machine used by other processes is a
    background task or more (in issue 13's demo run another process held one of two cores: 50 %, and llama.cpp's
    spinning barrier made the run 30x slower); steal above 5 % is a hypervisor giving the CPU to other guests.
    """

    max_runqueue_pct: Percent | None = Field(
        default=5.0, description="the step's tasks waiting for a CPU, of their run + wait time")
    max_foreign_cpu_pct: Percent | None = Field(
        default=10.0, description="other processes' CPU, of the whole machine over the step")
    max_steal_pct: Percent | None = Field(default=5.0, description="hypervisor steal, of all CPU time over the step")
    allow_throttling: bool = Field(default=False, description="a cpufreq cap lowered during the step is fine")
    # docs/measurements.md "Decode settling": on the quickstart model a cold streaming request's decode tok/s is
    # 22-25 % under its 512-token value at 8 and 16 tokens (the first tokens read every expert they route to from
    # the drive; later ones find more of them cached) and within 3-14 % from 32 on; BigMoeOnEdge's method asks
    # for 256 on real models, whose working sets are far larger: a floor, not a recommendation
    min_decode_tokens: Annotated[int, Field(ge=1)] | None = Field(
        default=MIN_DECODE_TOKENS, description="tokens every request (llama-bench: every tg test) must decode")
    min_window_s: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="seconds every decode window must last (off by default: the token count decides)")
    exclude_outliers: bool = Field(
        default=False, description="leave samples with |modified z| > 3.5 in their cell out of compare's and the "
                                   "gate's medians (flagged and kept by default)")


def off_to_none(value: Any) -> Any:
    """``validity: off`` (YAML reads a bare off as false) or ``"off"``: no limits; ``on``: the defaults."""
    if value is False or (isinstance(value, str) and value.strip().lower() == "off"):
        return None
    if value is True or (isinstance(value, str) and value.strip().lower() == "on"):
        return {}
    return value
