"""report.md's word on rounds until tight: the rule, and per target and cell why it stopped (from the manifest's
``stopping`` record, harness.campaign.rounds)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from harness.results.manifest import Manifest


def why(cell: Mapping[str, Any]) -> str:
    """``tight at round 3 (half-width 1.2 %)``, ``max reached at round 12 (half-width 4.1 %)``, ..."""
    width = cell.get("halfwidth_pct")
    shown = "no interval" if width is None else f"half-width {width:.2f} %"
    reason = cell.get("reason")
    if reason == "tight":
        return f"tight at round {cell.get('rounds')} ({shown})"
    if reason == "max":
        return f"max reached at round {cell.get('rounds')} ({shown})"
    if reason == "no-metric":
        return "not judged: its runs report no such metric"
    return f"still running after round {cell.get('rounds')} ({shown})"  # an interrupted set


def stopping_lines(manifest: Manifest) -> list[str]:
    """The section (none: no target ran rounds until tight)."""
    rows, rule = [], None
    for target in manifest.get("targets", []):
        stopping = target.get("stopping")
        if not stopping:
            continue
        rule = stopping
        for cell in stopping.get("cells", []):
            params = " ".join(f"{k}={v}" for k, v in (cell.get("params") or {}).items())
            rows.append({"target": target.get("name"), "step": cell.get("step"), "cell": params or "-",
                         "cache": cell.get("cache"), "test": cell.get("test") or "-",
                         "runs with it": cell.get("n"), "rounds run": cell.get("rounds_run"), "stopped": why(cell)})
    if rule is None:
        return []
    head = (f"Each cell ran until the {rule['confidence']:.0%} interval of the mean of `{rule['metric']}` had a "
            f"half-width of at most {rule['ci_halfwidth_pct']} % of the mean, between {rule['min']} and "
            f"{rule['max']} rounds (stop: {rule['stop']}); rule: {rule['rule']}")
    if rule["rule"] == "bonferroni":
        head += (f", each of the {rule['looks']} looks at confidence 1 - alpha / {rule['looks']} "
                 "(repeated confidence intervals, Jennison & Turnbull 1989)")
    table = pd.DataFrame(rows)
    return ["", "## Rounds until tight", "", head + ".", "",
            table.to_markdown(index=False) if not table.empty else "_no cells_"]
