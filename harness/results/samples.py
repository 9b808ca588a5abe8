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

from collections.abc import Callable, Mapping, Sequence

import pandas as pd

from harness.results.cell import CellKey
from harness.results.loader import ResultSet
from harness.results.metrics import Metric
from harness.results.selection import invalid_runs, perturbed_runs, usable_runs
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


def samples(result_set: ResultSet, metric: Metric, *, include_perturbed: bool = False) -> pd.DataFrame:
    """Every finite observation of ``metric`` in the set's runs with status ok (and not perturbed, unless
    ``include_perturbed``), as tidy rows (SAMPLE_COLUMNS)."""
    if missing_columns(result_set, metric):
        return pd.DataFrame(columns=SAMPLE_COLUMNS)
    return select(labelled_runs(result_set), result_set.table, matrix_keys(result_set), metric,
                  include_perturbed=include_perturbed)


def select(runs: pd.DataFrame, table: Callable[[str], pd.DataFrame], params: Sequence[str], metric: Metric, *,
           keep_inf: bool = False, run_columns: Mapping[str, str] | None = None,
           include_perturbed: bool = False) -> pd.DataFrame:
    """The one selection of samples for compare, gate and F4: every observation of ``metric`` (from ``table``, a
    table by name) in the usable runs of ``runs``, joined on (run_id, target), since a set with several targets
    holds the same run ids once per target, as SAMPLE_COLUMNS rows. NaN is never a sample; ``keep_inf`` keeps
    infinite values (F4 draws what the gate's ratio would make of them; compare and gate leave them out).
    ``run_columns`` maps further runs columns onto row columns (F4's cache, plan index, step kind). A table
    without a ``target`` column (hand-made tables) joins on run_id alone. Rows keep the table's order, which the
    bootstrap's resampling depends on."""
    extra = dict(run_columns or {})
    columns = [*SAMPLE_COLUMNS, *extra.values()]
    data = table(metric.table.name)
    if data.empty or runs.empty or not set(metric.needs) <= set(data.columns):
        return pd.DataFrame(columns=columns)
    observed = pd.DataFrame({
        "run_id": data["run_id"], "value": metric.observations(data),
        "test": data[metric.test].astype(str) if metric.test and metric.test in data else ""})
    on = ["run_id"]
    if "target" in data:
        observed, on = observed.assign(target=data["target"]), ["run_id", "target"]
    ok = usable_runs(runs, include_perturbed)
    cells = run_cells(ok, params)
    ok = ok.assign(cell=cells, **({} if "variant" in ok else {"variant": [cell.label() for cell in cells]}))
    ok = pd.DataFrame({**{name: ok[name] for name in ("run_id", "target", "variant", "cell")},
                       "step": ok["step_label"] if "step_label" in ok else None,
                       "round": ok["round"] if "round" in ok else None,
                       **{row: ok[name] for name, row in extra.items()}})
    rows = observed.merge(ok, on=on, how="inner")
    finite = rows["value"].notna() if keep_inf else rows["value"].notna() & (rows["value"].abs() != float("inf"))
    return rows[finite].assign(metric=metric.name)[columns].reset_index(drop=True)


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


def invalid_note(result_set: ResultSet) -> str | None:
    """One line saying how many ok runs were left out as too short (validity minimums), and the first few."""
    left = invalid_runs(labelled_runs(result_set))
    if left.empty:
        return None
    shown = "; ".join(f"{run.run_id}: {run.invalid_reason}" for run in left.head(3).itertuples())
    return f"{result_set.set_id}: {len(left)} invalid runs are left out ({shown}{'; ...' if len(left) > 3 else ''})"


def perturbed_note(result_set: ResultSet, included: bool = False) -> str | None:
    """One line saying how many ok runs were left out as perturbed (or, ``included``, counted anyway), and the first
    few with their reasons."""
    left = perturbed_runs(labelled_runs(result_set))
    if left.empty:
        return None
    shown = "; ".join(f"{run.run_id}: {run.perturbed_reason}" for run in left.head(3).itertuples())
    fate = "are counted (--include-perturbed)" if included else "are left out"
    return (f"{result_set.set_id}: {len(left)} perturbed runs {fate} ({shown}"
            f"{'; ...' if len(left) > 3 else ''})")
