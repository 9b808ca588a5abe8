"""What ``harness compare`` and ``harness gate`` share: metrics and thresholds from the command line, the samples of
a set, the pairs of cells to compare (same session: each variant against a baseline variant; across sessions: the
same cell in two sets), and the output formats (Rich table, markdown, JSON)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from rich.table import Table

from harness.errors import UsageError
from harness.results.loader import ResultSet
from harness.results.metrics import METRICS, Metric
from harness.results.samples import missing_columns, samples

# Count metrics are near-deterministic for a model and build; times move with clocks, heat and neighbours.
DEFAULT_THRESHOLDS = {"time": 0.05, "count": 0.01}
CROSS_SESSION_NOTE = "cross-session baseline: weaker evidence (drift between sessions)"
GROUP = ["target", "step", "test", "metric"]


@dataclass(frozen=True)
class MetricSpec:
    metric: Metric
    threshold: float  # a fraction


@dataclass
class Pair:
    """One comparison: a cell's candidate sample against its baseline sample."""

    target: str
    step: str
    test: str
    metric: str
    variant: str
    baseline: str  # the baseline variant (same session) or the baseline set's id (across sessions)
    base_values: np.ndarray
    cand_values: np.ndarray
    base_runs: list[tuple[str, str]] = field(default_factory=list)  # (target, run_id) of each side's runs
    cand_runs: list[tuple[str, str]] = field(default_factory=list)

    def key(self) -> dict[str, str]:
        return {"target": self.target, "step": self.step, "test": self.test, "metric": self.metric,
                "variant": self.variant, "baseline": self.baseline}


def parse_percent(text: str, where: str) -> float:
    """``5%``, ``5`` or ``0.5%`` as a fraction (0.05); a bad value is one line naming ``where``."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*%?\s*", text)
    if not match or not float(match.group(1)) < 100:
        raise UsageError(f"{where}: {text!r} is not a percentage below 100 (e.g. 5%)")
    return float(match.group(1)) / 100


def metric_by_name(name: str) -> Metric:
    if name not in METRICS:
        raise UsageError(f"--metric {name}: unknown metric (known: {', '.join(METRICS)})")
    return METRICS[name]


def parse_metric_specs(specs: list[str], max_regression: str | None) -> list[MetricSpec]:
    """``--metric NAME[:PCT]`` options with ``--max-regression PCT`` as the default of the ones without PCT; with
    neither, the metric's kind decides (DEFAULT_THRESHOLDS)."""
    default = None if max_regression is None else parse_percent(max_regression, "--max-regression")
    out: list[MetricSpec] = []
    for spec in specs:
        name, _, pct = spec.partition(":")
        metric = metric_by_name(name.strip())
        if pct:
            threshold = parse_percent(pct, f"--metric {spec}")
        else:
            threshold = default if default is not None else DEFAULT_THRESHOLDS[metric.kind]
        out.append(MetricSpec(metric, threshold))
    return out


def metric_samples(result_set: ResultSet, metric: Metric) -> pd.DataFrame:
    """The metric's samples in the set; a set without it is bad input, named with the table and columns."""
    missing = missing_columns(result_set, metric)
    if missing:
        table = result_set.table(metric.table.name)
        what = f"no {metric.table.name} rows" if table.empty else \
            f"table {metric.table.name} has no column {', '.join(missing)}"
        raise UsageError(f"metric {metric.name}: {result_set.path} has {what}")
    found = samples(result_set, metric)
    if found.empty:
        raise UsageError(f"metric {metric.name}: {result_set.path} has no value of it in a run with status ok")
    return found


def present_metrics(*sets: ResultSet) -> list[Metric]:
    """Every catalogued metric each of the sets has a value of."""
    return [m for m in METRICS.values() if all(not missing_columns(s, m) and not samples(s, m).empty for s in sets)]


def _tokens(label: str) -> set[str]:
    return set(label.split())


def _cache_part(label: str) -> str:
    return " ".join(t for t in label.split() if "=" not in t)


def check_variant(name: str, found: pd.DataFrame, where: str) -> None:
    """A variant name must match at least one variant of the set: all of its words are in the label, in any
    order (the matrix part alone matches that cell in every cache condition)."""
    labels = sorted(found["variant"].unique())
    if not name.split() or not any(_tokens(name) <= _tokens(label) for label in labels):
        raise UsageError(f"variant {name!r}: not in {where} (variants: {'; '.join(labels)})")


def _baseline_of(variant: str, labels: list[str], name: str) -> str | None:
    """The baseline for ``variant`` among a cell group's labels: the one matching ``name`` in the same cache
    condition (or the one ``name`` names with its cache condition)."""
    wanted = _tokens(name)
    by_cache = not _cache_part(name)
    matches = [v for v in labels if wanted <= _tokens(v) and (not by_cache or _cache_part(v) == _cache_part(variant))]
    if len(matches) > 1:
        raise UsageError(f"variant {name!r} is ambiguous: it matches {'; '.join(matches)}; name one cell")
    return matches[0] if matches else None


def _side(group: pd.DataFrame) -> tuple[np.ndarray, list[tuple[str, str]]]:
    runs = list(dict.fromkeys(zip(group["target"], group["run_id"], strict=True)))
    return group["value"].to_numpy(dtype=float), runs


def same_session_pairs(found: pd.DataFrame, baseline_name: str, only: list[str] | None = None) -> list[Pair]:
    """Each variant (other than the baseline, or only those matching ``only``) against the baseline variant of
    the same target, step and test."""
    pairs: list[Pair] = []
    for (target, step, test, metric), group in found.groupby(GROUP, sort=False):
        by_variant = dict(list(group.groupby("variant", sort=False)))
        for variant, cand in by_variant.items():
            if only and not any(_tokens(o) <= _tokens(variant) for o in only):
                continue
            base = _baseline_of(variant, list(by_variant), baseline_name)
            if base is None or base == variant:
                continue
            (bv, br), (cv, cr) = _side(by_variant[base]), _side(cand)
            pairs.append(Pair(target, step, test, metric, variant, base, bv, cv, br, cr))
    return pairs


def cross_set_pairs(base: pd.DataFrame, cand: pd.DataFrame, base_id: str, only: list[str] | None = None
                    ) -> list[Pair]:
    """The same cell (target, variant, step, test, metric) in the baseline set and the candidate set."""
    keys = [*GROUP, "variant"]
    base_groups = dict(list(base.groupby(keys, sort=False)))
    pairs: list[Pair] = []
    for key, group in cand.groupby(keys, sort=False):
        if key not in base_groups or (only and not any(_tokens(o) <= _tokens(key[4]) for o in only)):
            continue
        (bv, br), (cv, cr) = _side(base_groups[key]), _side(group)
        pairs.append(Pair(*key, base_id, bv, cv, br, cr))  # type: ignore[call-arg]  # key: the 5 group values
    return pairs


def fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        return "-" if not math.isfinite(value) else f"{value:.{digits}g}"
    return "-" if value in ("", None) else str(value)


def ci_text(low: float, high: float) -> str:
    return "-" if not (math.isfinite(low) and math.isfinite(high)) else f"{low:.3g}-{high:.3g}"


Columns = list[tuple[str, str]]  # (header, key of the row)
NUMERIC = {"n", "ratio", "p", "limit", "median_base", "median_cand"}


def rich_table(rows: list[dict[str, Any]], columns: Columns, title: str, styles: dict[str, str] | None = None
               ) -> Table:
    """Rows as a Rich table; ``styles`` maps a row's verdict to a style."""
    table = Table(title=title, title_justify="left")
    for header, key in columns:
        table.add_column(header, justify="right" if key in NUMERIC else "left")
    for row in rows:
        style = (styles or {}).get(str(row.get("verdict", "")))
        table.add_row(*[fmt(row.get(key)) for _, key in columns], style=style)
    return table


def visible_columns(rows: list[dict[str, Any]], columns: Columns, said: tuple[str, ...] = ()) -> Columns:
    """``columns`` without the ones a table's title already says, without columns empty in every row (no test
    names) and without ``target`` when there is one."""
    keep = []
    for header, key in columns:
        values = {row.get(key) for row in rows}
        if key in said or values <= {"", None} or (key == "target" and len(values) == 1):
            continue
        keep.append((header, key))
    return keep


def group_by_metric(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(row["metric"], []).append(row)
    return grouped


def markdown_table(rows: list[dict[str, Any]], columns: Columns) -> str:
    lines = ["| " + " | ".join(header for header, _ in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(key)).replace("|", "/") for _, key in columns) + " |")
    return "\n".join(lines)


def to_json(document: dict[str, Any]) -> str:
    """JSON with non-finite numbers as null (JSON has no nan or inf)."""
    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return json.dumps(clean(document), indent=1)
