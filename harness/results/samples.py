"""Per-cell samples of one metric from a result set: the tidy rows ``harness compare`` and ``harness gate`` decide on.

One row per observation: ``target, variant, step, test, metric, round, value``, the ``run_id`` it came from and its
``cell`` (:class:`harness.results.cell.CellKey`, which pairing matches on: the ``variant`` is its label). A
cell is (target, variant, step, test): ``variant`` is the run's matrix cell and cache condition
(:mod:`harness.results.variants`), ``step`` the run's ``step_label`` (``fio``, or ``fio2`` for a second fio step),
``test`` the metric's test column (llama-bench's ``tg32``, fio's job name; "" when the metric has none). Only runs
with status ok that were not perturbed contribute (:func:`harness.results.selection.usable_runs`): a failed run's
partial rows are not a measurement, nor is a run another process disturbed. Which runs were not ok is
:func:`runs_not_ok`'s answer, for callers that must tell a missing measurement from a bad one; which were left out
as perturbed, :func:`perturbed_note`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from harness.results.cell import CellKey
from harness.results.loader import ResultSet
from harness.results.metrics import Metric
from harness.results.selection import perturbed_runs, usable_runs
from harness.results.tables import RUNS
from harness.results.variants import variants

SAMPLE_COLUMNS = ["target", "variant", "step", "test", "metric", "round", "value", "run_id", "cell"]
CELL = ["target", "variant", "step", "test"]


def matrix_keys(result_set: ResultSet) -> list[str]:
    """The experiment's matrix keys in the experiment's order (what a variant label is made of)."""
    return list(result_set.manifest.get("matrix") or {})


def labelled_runs(result_set: ResultSet) -> pd.DataFrame:
    """The runs table with every run's ``variant`` (the table's own column from schema 2; computed otherwise)."""
    runs = result_set.table(RUNS.name)
    if runs.empty or "variant" in runs:
        return runs
    return runs.assign(variant=variants(runs, matrix_keys(result_set)))


def run_cells(runs: pd.DataFrame, params: Sequence[str]) -> list[CellKey]:
    """Each run's cell (a runs table's rows, the experiment's matrix keys ``params``): the one place a runs row
    becomes a :class:`CellKey`, for compare, gate and F4 alike."""
    return [CellKey.of(row, params, target=str(row["target"])) for _, row in runs.iterrows()]


def missing_columns(result_set: ResultSet, metric: Metric) -> list[str]:
    """The columns ``metric`` is computed from that the set's table lacks (all of them when it has no rows)."""
    table = result_set.table(metric.table.name)
    if table.empty:
        return list(metric.needs)
    return [column for column in metric.needs if column not in table]


def samples(result_set: ResultSet, metric: Metric) -> pd.DataFrame:
    """Every finite observation of ``metric`` in the set's runs with status ok, as tidy rows (SAMPLE_COLUMNS)."""
    table, runs = result_set.table(metric.table.name), labelled_runs(result_set)
    if table.empty or runs.empty or missing_columns(result_set, metric):
        return pd.DataFrame(columns=SAMPLE_COLUMNS)
    observed = pd.DataFrame({
        "run_id": table["run_id"], "target": table["target"], "value": metric.observations(table),
        "test": table[metric.test].astype(str) if metric.test and metric.test in table else ""})
    ok = usable_runs(runs)
    params = matrix_keys(result_set)
    ok = ok.assign(cell=run_cells(ok, params))
    ok = ok[["run_id", "target", "variant", "step_label", "round", "cell"]]
    rows = observed.merge(ok, on=["run_id", "target"], how="inner").rename(columns={"step_label": "step"})
    rows = rows[rows["value"].notna() & (rows["value"].abs() != float("inf"))]
    return rows.assign(metric=metric.name)[SAMPLE_COLUMNS].reset_index(drop=True)


def runs_not_ok(result_set: ResultSet) -> pd.DataFrame:
    """Runs whose status is not ok (failed, died, timed-out, interrupted, skipped, not run), with their cell and
    error: ``target, run_id, variant, step, status, error``."""
    runs = labelled_runs(result_set)
    columns = ["target", "run_id", "variant", "step", "status", "error"]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    bad = runs[runs["status"] != "ok"]
    bad = bad.assign(step=bad["step_label"], error=bad["error"] if "error" in bad else None)
    return bad[columns].reset_index(drop=True)


def perturbed_note(result_set: ResultSet) -> str | None:
    """One line saying how many ok runs were left out as perturbed, and the first few with their reasons."""
    left = perturbed_runs(labelled_runs(result_set))
    if left.empty:
        return None
    shown = "; ".join(f"{run.run_id}: {run.perturbed_reason}" for run in left.head(3).itertuples())
    return (f"{result_set.set_id}: {len(left)} perturbed runs are left out ({shown}"
            f"{'; ...' if len(left) > 3 else ''})")
