"""What ``harness compare`` and ``harness gate`` share: metrics and thresholds from the command line, the samples of
a set, the pairs of cells to compare (same session: each variant against a baseline variant, or each cell against
the one differing only in one axis, ``--across``; across sessions: the same cell in two sets), and the output
formats (Rich table, markdown, JSON)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from rich.table import Table

from harness.analysis.outliers import THRESHOLD, flag_outliers
from harness.errors import UsageError
from harness.results.cell import CellKey
from harness.results.loader import ResultSet
from harness.results.metrics import METRICS, Metric
from harness.results.pairing import BaselineRule, CellPair, across, pair_cells, same_cell
from harness.results.samples import CELL, labelled_runs, missing_columns, samples
from harness.results.selection import perturbed_runs

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
    across: tuple[str, str] | None = None  # with --across: the axis and the candidate cell's value of it

    def key(self) -> dict[str, str]:
        keys = {"target": self.target, "step": self.step, "test": self.test, "metric": self.metric,
                "variant": self.variant, "baseline": self.baseline}
        if self.across is not None:
            keys.update(axis=self.across[0], axis_value=self.across[1])
        return keys


@dataclass(frozen=True)
class Across:
    """``--across AXIS --baseline-value VALUE``: each cell against the cell equal in everything but the axis,
    whose value is VALUE (``build`` and the baseline build: the change a build makes, per cell)."""

    axis: str
    value: str

    def label(self) -> str:
        return f"{self.axis}={self.value}"


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


def metric_samples(result_set: ResultSet, metric: Metric, include_perturbed: bool = False) -> pd.DataFrame:
    """The metric's samples in the set; a set without it is bad input, named with the table and columns."""
    missing = missing_columns(result_set, metric)
    if missing:
        table = result_set.table(metric.table.name)
        what = f"no {metric.table.name} rows" if table.empty else \
            f"table {metric.table.name} has no column {', '.join(missing)}"
        raise UsageError(f"metric {metric.name}: {result_set.path} has {what}")
    found = screened(result_set, samples(result_set, metric, include_perturbed=include_perturbed))
    if found.empty:
        perturbed = "" if include_perturbed or not perturbed_runs(labelled_runs(result_set)).size else \
            " that was not perturbed (--include-perturbed counts perturbed runs)"
        raise UsageError(f"metric {metric.name}: {result_set.path} has no value of it in a run with status ok"
                         f"{perturbed}")
    return found


def excludes_outliers(result_set: ResultSet) -> bool:
    """The experiment said ``validity: {exclude_outliers: true}`` (a set made before the key: no)."""
    return bool((result_set.manifest.get("validity") or {}).get("exclude_outliers"))


def screened(result_set: ResultSet, found: pd.DataFrame) -> pd.DataFrame:
    """The samples with each one's modified z-score against its cell (``modified_z``, ``outlier``); the outliers
    left out where the experiment says so, kept otherwise (harness/analysis/outliers.py)."""
    flagged = flag_outliers(found, CELL)
    return flagged[~flagged["outlier"]] if excludes_outliers(result_set) else flagged


def outlier_note(result_set: ResultSet, metric: Metric, include_perturbed: bool = False) -> str | None:
    """One line naming the samples of ``metric`` flagged as outliers in the set (none: None), and their fate."""
    if missing_columns(result_set, metric):
        return None
    flagged = flag_outliers(samples(result_set, metric, include_perturbed=include_perturbed), CELL)
    out = flagged[flagged["outlier"]] if not flagged.empty else flagged
    if out.empty:
        return None
    fate = "left out of the medians (validity.exclude_outliers)" if excludes_outliers(result_set) else \
        "kept in the medians: result may be unstable"
    shown = "; ".join(f"{row.variant} {row.run_id} {row.value:.4g} (z {row.modified_z:+.1f})"
                      for row in out.head(3).itertuples())
    return (f"{result_set.set_id}: {metric.name}: {len(out)} outlier sample(s), |modified z| > {THRESHOLD:g} against "
            f"their cell's MAD, {fate} ({shown}{'; ...' if len(out) > 3 else ''})")


def present_metrics(*sets: ResultSet) -> list[Metric]:
    """Every catalogued metric each of the sets has a value of."""
    return [m for m in METRICS.values() if all(not missing_columns(s, m) and not samples(s, m).empty for s in sets)]


def _typed(name: str, where: str) -> CellKey:
    """A cell name typed on the command line; an empty one is not in any set."""
    if not name.split():
        raise UsageError(f"variant {name!r}: not in {where}")
    return CellKey.parse(name, where=f"variant {name!r}")


def check_variant(name: str, found: pd.DataFrame, where: str) -> None:
    """A variant name must match at least one cell of the set: all of its parts are in the cell, in any order
    (the matrix part alone matches that cell in every cache condition)."""
    labels = sorted(found["variant"].unique())
    wanted = _typed(name, f"{where} (variants: {'; '.join(labels)})")
    if not any(cell.matches(wanted) for cell in found["cell"]):
        raise UsageError(f"variant {name!r}: not in {where} (variants: {'; '.join(labels)})")


def _wanted(only: list[CellKey] | None) -> Callable[[CellKey], bool] | None:
    """The cells a ``--variant`` list keeps (every cell without one)."""
    return None if not only else (lambda cell: any(cell.matches(o) for o in only))


def _baseline_rule(wanted: CellKey, name: str) -> BaselineRule:
    """The baseline of a cell among its group's cells: the one matching ``wanted`` with the same engine label and
    cache condition (or the one ``wanted`` names, when it names an engine label or cache condition)."""
    same_kind = not (wanted.engine or wanted.cache)

    def rule(cell: CellKey, cells: Sequence[CellKey]) -> CellKey | None:
        matches = [c for c in cells
                   if c.matches(wanted) and (not same_kind or (c.engine, c.cache) == (cell.engine, cell.cache))]
        if len(matches) > 1:
            raise UsageError(f"variant {name!r} is ambiguous: it matches {'; '.join(c.label() for c in matches)}; "
                             "name one cell")
        return matches[0] if matches else None

    return rule


def check_baseline_value(value: str | None, axis: str | None) -> None:
    """``--baseline-value`` names the baseline of ``--across`` and means nothing without it."""
    if value is not None and axis is None:
        raise UsageError(f"--baseline-value {value}: only with --across AXIS")


def across_of(result_set: ResultSet, axis: str, value: str | None) -> Across:
    """``--across AXIS [--baseline-value VALUE]`` checked against the set's experiment: the axis must be one of
    its matrix keys with at least two values, VALUE one of them (default: the experiment's ``baseline:`` value of
    the axis when it names one, else the first, as the experiment lists them: F4 takes the same). Bad input is one
    line naming the option and the set."""
    matrix = result_set.manifest.get("matrix") or {}
    if axis not in matrix:
        raise UsageError(f"--across {axis}: not a matrix axis of {result_set.path} "
                         f"(axes: {', '.join(matrix) or 'none'})")
    values = [str(v) for v in matrix[axis]]
    if len(values) < 2:
        raise UsageError(f"--across {axis}: {result_set.path} has one value of it ({', '.join(values)}), "
                         "nothing to compare")
    if value is not None and value not in values:
        raise UsageError(f"--baseline-value {value}: not a value of {axis} in {result_set.path} "
                         f"(values: {', '.join(values)})")
    if value is None:
        named = (result_set.manifest.get("baseline") or {}).get(axis)
        value = str(named) if named is not None and str(named) in values else values[0]
    return Across(axis, value)


def _pair(pair: CellPair, baseline: str | None = None, axis: str | None = None) -> Pair:
    """A pairing's result as compare's and gate's row source: ``baseline`` names the other set (across sets),
    else the baseline cell's variant; ``axis`` (--across) adds the candidate's value of it."""
    def side(rows: pd.DataFrame) -> tuple[np.ndarray, list[tuple[str, str]]]:
        runs = list(dict.fromkeys(zip(rows["target"], rows["run_id"], strict=True)))
        return rows["value"].to_numpy(dtype=float), runs

    (bv, br), (cv, cr) = side(pair.base_rows), side(pair.cand_rows)
    target, step, test, metric = (str(part) for part in pair.group[:4])
    variant = str(pair.cand_rows["variant"].iloc[0])
    base = baseline if baseline is not None else str(pair.base_rows["variant"].iloc[0])
    value = dict(pair.cand.matrix).get(axis or "")
    return Pair(target, step, test, metric, variant, base, bv, cv, br, cr,
                None if axis is None or value is None else (axis, value))


def same_session_pairs(found: pd.DataFrame, baseline_name: str, only: list[str] | None = None) -> list[Pair]:
    """Each variant (other than the baseline, or only those matching ``only``) against the baseline variant of
    the same target, step and test (:func:`harness.results.pairing.pair_cells`)."""
    wanted = _typed(baseline_name, "the set")
    chosen = [_typed(o, "the set") for o in only] if only else None
    return [_pair(p) for p in pair_cells(found, GROUP, _baseline_rule(wanted, baseline_name), wanted=_wanted(chosen))]


def across_pairs(found: pd.DataFrame, chosen: Across, only: list[str] | None = None) -> list[Pair]:
    """Each cell (or only those matching ``only``) against the cell of the same target, step and test equal in
    everything but ``chosen.axis``, whose value is the baseline's (:func:`harness.results.pairing.across`)."""
    wanted = [_typed(o, "the set") for o in only] if only else None
    return [_pair(p, axis=chosen.axis)
            for p in pair_cells(found, GROUP, across(chosen.axis, chosen.value), wanted=_wanted(wanted))]


def cross_set_pairs(base: pd.DataFrame, cand: pd.DataFrame, base_id: str, only: list[str] | None = None
                    ) -> list[Pair]:
    """The same cell (target, variant, step, test, metric) in the baseline set and the candidate set."""
    chosen = [_typed(o, "the set") for o in only] if only else None
    return [_pair(p, base_id) for p in pair_cells(cand, [*GROUP, "variant"], same_cell, base=base,
                                                  wanted=_wanted(chosen))]


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
