"""report.md's section "Replay against the engine", for a set that holds both replay and engine runs
(harness.analysis.replay_validation: the checks, the pairing and why)."""

from __future__ import annotations

import pandas as pd

from harness.analysis.replay_validation import Sides, level_agreement, observations, strategy_changes, token_mismatch
from harness.results.loader import ResultSet
from harness.results.selection import usable_runs
from harness.results.tables import REQUESTS, RUNS

_PAIRING = ("Level: replay `mmap` against every request of the stock build (`{stock}`; it ignores the strategy "
            "variable, so each of its cells is the same code), medians, error = replay / engine - 1. Change: "
            "predicted = replay(strategy) tok/s / replay(mmap) tok/s; measured = patched build / stock build at the "
            "same strategy value and threads, in the same interleaved rounds (the pairs of `harness gate --across "
            "build`); error = predicted / measured - 1; medians of each side. The `off` row is the A/A control: "
            "its measured change is the noise between two runs of the same code here.")


def replay_validation_lines(rs: ResultSet, sides: Sides = Sides()) -> list[str]:
    """The section, or nothing when the set lacks replay or engine runs (or either has no usable ones)."""
    runs = rs.table(RUNS.name)
    if runs.empty or "step" not in runs:
        return []
    steps = set(runs["step"])
    if sides.replay_step not in steps or sides.engine_step not in steps:
        return []
    obs = observations(usable_runs(runs), rs.table(REQUESTS.name), sides)
    level, changes = level_agreement(obs, sides), strategy_changes(obs, sides=sides)
    lines = ["", "## Replay against the engine", "", _PAIRING.format(stock=sides.stock_build), ""]
    if level.empty and changes.empty:
        return lines + ["_no usable runs on one of the sides (failed or perturbed: see Runs)_", ""]
    for frame in (level, changes):
        if not frame.empty:
            lines += [_markdown(frame), ""]
    mismatch = token_mismatch(obs, sides)
    return lines + ([f"_Not like with like: {mismatch}._", ""] if mismatch else [])


def _markdown(frame: pd.DataFrame) -> str:
    return frame.to_markdown(index=False, floatfmt=".3g")
