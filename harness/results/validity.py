"""Was a run disturbed? Its interference record (run.json ``interference``, runner/interference.py) held to the
experiment's ``validity:`` limits (harness/config/validity.py). Pure functions: the campaign calls ``judge`` when a
run is pulled and records the verdict in the manifest; ingest puts the measures into the runs table.

Why each limit: llama.cpp's threads spin at a barrier, so a core taken by another process costs far more than its
share (issue 13: 30x slower with one of two cores busy elsewhere); other processes' CPU (``foreign``) is that
directly, the step's runqueue wait the same seen from its own threads, steal the hypervisor's version of it, and a
frequency cap lowered mid-step (thermal) changes the machine under the run. Percentages from jiffy counters are
compared with the limit plus the window's ``resolution_pct``: a 0.2 s step cannot tell 3 % from 10 %.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.config.validity import ValidityLimits

# run.json interference keys copied into the runs table (None: the run has no record, e.g. contract 1.0)
MEASURES = ("foreign_cpu_pct", "steal_pct", "runqueue_pct", "own_cpu_s", "machine_busy_s", "irq_pct",
            "resolution_pct", "throttled")


@dataclass(frozen=True)
class Verdict:
    perturbed: bool
    reason: str | None  # one line, every limit passed ("; "-joined); None when not perturbed

    def fields(self) -> dict[str, Any]:
        """The manifest's run entry fields."""
        return {"perturbed": self.perturbed, "perturbed_reason": self.reason}


NOT_PERTURBED = Verdict(False, None)


def _number(record: Mapping[str, Any], key: str) -> float | None:
    value = record.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _reasons(record: Mapping[str, Any], limits: ValidityLimits) -> list[str]:
    slack = _number(record, "resolution_pct") or 0.0
    out = []
    foreign = _number(record, "foreign_cpu_pct")
    if limits.max_foreign_cpu_pct is not None and foreign is not None and foreign > limits.max_foreign_cpu_pct + slack:
        held = foreign / 100 * (_number(record, "ncpu") or 1)
        out.append(f"foreign CPU {foreign:.0f} % > {limits.max_foreign_cpu_pct:g} %: other processes held "
                   f"{held:.1f} of {record.get('ncpu', '?')} CPUs")
    queued = _number(record, "runqueue_pct")
    if limits.max_runqueue_pct is not None and queued is not None and queued > limits.max_runqueue_pct:
        out.append(f"runqueue {queued:.0f} % > {limits.max_runqueue_pct:g} %: the step's threads waited for a CPU")
    steal = _number(record, "steal_pct")
    if limits.max_steal_pct is not None and steal is not None and steal > limits.max_steal_pct + slack:
        out.append(f"steal {steal:.0f} % > {limits.max_steal_pct:g} %: the hypervisor ran other guests")
    if not limits.allow_throttling and record.get("throttled") is True:
        drop, events = record.get("cpu_cap_drop_khz"), record.get("throttle_events")
        what = f"a CPU frequency cap fell by {drop / 1000:.0f} MHz" if drop else f"{events} thermal throttle events"
        out.append(f"throttled: {what} during the step")
    return out


def judge(record: Mapping[str, Any] | None, limits: ValidityLimits | None) -> Verdict:
    """The run's verdict: perturbed with every reason, or not (no limits, or no record to judge)."""
    if limits is None or not record:
        return NOT_PERTURBED
    reasons = _reasons(record, limits)
    return Verdict(True, "; ".join(reasons)) if reasons else NOT_PERTURBED


def measure_columns(record: Mapping[str, Any] | None) -> dict[str, Any]:
    """The runs table's interference columns: every one present, None where the run has no such measure."""
    record = record or {}
    return {key: record.get(key) for key in MEASURES}
