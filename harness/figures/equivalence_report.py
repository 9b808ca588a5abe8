"""report.md's equivalence section: per equivalence run, the two sides, the verdict and the first divergence."""

from __future__ import annotations

import pandas as pd

from harness.results.loader import ResultSet
from harness.results.tables import EQUIVALENCE
from harness.units import format_size


def _side(first: pd.Series, name: str) -> str:
    memory = first.get(f"{name}_memory_bytes")
    budget = f"{format_size(memory)} budget" if pd.notna(memory) else "no budget of its own"
    settings = f"`{first.get(f'{name}_args') or ''}`".replace("``", "(no args)")
    temperature = first.get(f"{name}_temperature")
    sampling = f", temperature {temperature:g}, seed {first.get(f'{name}_seed')}" if temperature else ""
    return f"{first.get(f'{name}_engine')} {settings}, {budget}{sampling}"


def equivalence_summary(rs: ResultSet) -> pd.DataFrame:
    """One row per equivalence run: its sides, how many prompts matched, the verdict and the first divergence."""
    table = rs.table(EQUIVALENCE.name)
    if table.empty:
        return pd.DataFrame()
    rows = []
    for run_id, group in table.sort_values(["run_id", "prompt_index"]).groupby("run_id", sort=False):
        first = group.iloc[0]
        diverged = group[~group["identical"].astype(bool)]
        where = "-"
        if not diverged.empty:
            d = diverged.iloc[0]
            unit = "token" if d["compared_as"] == "ids" else "byte"
            where = (f"prompt {d['prompt_index']}, {unit} {d['first_divergence_pos']}: "
                     f"a {d['a_token']!r} vs b {d['b_token']!r}")
        rows.append({"run": run_id, "a": _side(first, "a"), "b": _side(first, "b"),
                     "compared as": ", ".join(sorted(group["compared_as"].unique())),
                     "identical prompts": f"{len(group) - len(diverged)}/{len(group)}",
                     "verdict": "pass" if diverged.empty else "FAIL", "first divergence": where})
    return pd.DataFrame(rows)


def equivalence_lines(rs: ResultSet) -> list[str]:
    """The section, or nothing when the set has no equivalence runs."""
    summary = equivalence_summary(rs)
    if summary.empty:
        return []
    return ["", "## Equivalence (greedy decoding, side a vs side b)", "",
            summary.to_markdown(index=False), ""]
