"""report.md's energy section: how each target's energy was measured (or why it was not), and per cell the median
joules per decoded and per prompt token, the mean power and the same above the idle baseline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from harness.results.loader import ResultSet
from harness.results.selection import usable_runs
from harness.results.tables import ENERGY, RUNS


def method_line(target: str, method: Mapping[str, Any]) -> str:
    """One target's method: source, rail, period, integration, idle baseline; or the one line why there is none."""
    if method.get("note"):
        return f"- **{target}**: {method['note']}"
    idle = method.get("idle_w")
    baseline = (f"idle baseline {idle:.3f} W (mean of a {method.get('idle_s') or 0:.1f} s idle window before the "
                "runs) subtracted in the *above idle* columns") if idle is not None else \
        "no idle baseline measured (the *above idle* columns are null; `energy: {idle_s: 10}` measures one)"
    period = method.get("period_ms")
    every = f"every {period:g} ms" if period is not None else "at an unknown period"
    return (f"- **{target}**: rail `{method.get('rail')}` from {method.get('source')}, sampled {every}; "
            f"{method.get('integration')}; {baseline}")


def energy_summary(rs: ResultSet) -> pd.DataFrame:
    """Per cell (variant) and phase: windows measured, median J/token, median W, median J/token above idle."""
    table = rs.table(ENERGY.name)
    runs = usable_runs(rs.table(RUNS.name))
    if table.empty or runs.empty or table["energy_j"].isna().all():
        return pd.DataFrame()
    cells = runs[["run_id", "target", "variant", "step"]]
    joined = table.merge(cells, on=["run_id", "target"])
    joined = joined[joined["energy_j"].notna() & (joined["step"] != "idle")]
    if joined.empty:
        return pd.DataFrame()
    order = {"run": 0, "prefill": 1, "decode": 2}
    summary = joined.groupby(["target", "variant", "phase"]).agg(
        windows=("energy_j", "size"), energy_j=("energy_j", "median"), power_w=("power_w", "median"),
        j_per_token=("j_per_token", "median"), j_per_token_above_idle=("j_per_token_above_idle", "median"),
    ).reset_index()
    summary = summary.sort_values(["target", "variant", "phase"], key=lambda c: c.map(order) if c.name == "phase"
                                  else c, kind="stable")
    numbers = ["energy_j", "power_w", "j_per_token", "j_per_token_above_idle"]
    summary[numbers] = summary[numbers].map(lambda v: "-" if pd.isna(v) else f"{v:.4g}")  # a run has no tokens
    return summary


def energy_lines(rs: ResultSet) -> list[str]:
    """The section; nothing for a set written before the energy table (its manifest says no method)."""
    methods: Mapping[str, Mapping[str, Any]] = rs.manifest.get("energy") or {}
    if not methods:
        return []
    lines = ["", "## Energy", ""] + [method_line(target, method) for target, method in sorted(methods.items())]
    summary = energy_summary(rs)
    if not summary.empty:
        lines += ["", "Per cell, medians over its measured windows (run: the step; J per token of a request window: "
                      "prompt tokens for prefill, decoded tokens for decode):", "",
                  summary.to_markdown(index=False)]
    return lines + [""]
