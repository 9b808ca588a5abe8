"""The decision flow of ``harness gate`` (the command and its exit codes are in :mod:`harness.commands.gate`).

The sets are checked first: each against its SHA256SUMS (a run directory deleted or a table changed since the
campaign, or a table unreadable: ResultSetError, bad input, exit 2), then complete and the gated runs ok (anything
else is an InfrastructureError, exit 3), then the metrics and cells (absent or not overlapping: UsageError, exit
2); each pair of cells is decided by :func:`harness.analysis.gate.decide`; with ``--confirm N`` the suspected cells
are re-run (:mod:`harness.campaign.confirm`) and every pair is decided again on both sets' observations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.commands.common import err_console
from harness.commands.comparison import (
    CROSS_SESSION_NOTE,
    Across,
    MetricSpec,
    Pair,
    across_of,
    across_pairs,
    check_baseline_value,
    check_variant,
    ci_text,
    cross_set_pairs,
    metric_samples,
    outlier_note,
    same_session_pairs,
)
from harness.commands.gate_report import GateOutcome
from harness.errors import InfrastructureError, ResultSetError, UsageError
from harness.results.loader import ResultSet, find_result_set, load_result_set, unverified_note
from harness.results.metrics import Metric
from harness.results.samples import invalid_note, perturbed_note, runs_not_ok, samples


def check_modes(baseline_variant: str | None, baseline: str | None, axis: str | None,
                baseline_value: str | None) -> None:
    """Exactly one baseline: a variant, a set, or an axis (``--baseline-value`` only with ``--across``)."""
    if sum(given is not None for given in (baseline_variant, baseline, axis)) != 1:
        raise UsageError("give --baseline-variant NAME or --across AXIS (same session) or --baseline SET2 "
                         "(another session), one")
    check_baseline_value(baseline_value, axis)


def decide_gate(name: str, baseline_variant: str | None, baseline: str | None, specs: list[MetricSpec],
                confirm: int, results: Path, targets_dir: Path | None, lease_wait: float, *,
                axis: str | None = None, baseline_value: str | None = None,
                include_perturbed: bool = False) -> GateOutcome:
    """The gate's outcome for the set ``name`` (every pair decided, confirmed when asked)."""
    check_modes(baseline_variant, baseline, axis, baseline_value)
    # read for a decision: each set must match its SHA256SUMS (a deleted run, a changed table: bad input, exit 2)
    cand = load_result_set(find_result_set(name, results), verify=True)
    base = load_result_set(find_result_set(baseline, results), verify=True) if baseline is not None else cand
    for one in [cand] if base is cand else [cand, base]:
        _check_complete(one)
    chosen = across_of(cand, axis, baseline_value) if axis is not None else None
    found = {spec.metric.name: _gated_samples(cand, spec, include_perturbed) for spec in specs}
    base_found = found if base is cand else \
        {spec.metric.name: _gated_samples(base, spec, include_perturbed) for spec in specs}
    for spec in specs:
        _check_runs(cand, found[spec.metric.name], spec)
        if base is not cand:
            _check_runs(base, base_found[spec.metric.name], spec)
    outcome = GateOutcome(cand.set_id, chosen.label() if chosen else baseline_variant or base.set_id,
                          "same-session" if base is cand else "cross-session", across=chosen)
    if base is not cand:
        outcome.notes.append(CROSS_SESSION_NOTE)
    sets = [cand] if base is cand else [cand, base]
    outcome.notes += [note for one in sets if (note := perturbed_note(one, include_perturbed))]
    outcome.notes += [note for one in sets if (note := invalid_note(one))]
    outcome.notes += [note for one in sets for spec in specs
                      if (note := outlier_note(one, spec.metric, include_perturbed))]
    outcome.notes += [unverified_note(one) for one in ([cand] if base is cand else [cand, base]) if not one.verified]
    pairs = _all_pairs(specs, cand, found, base_found, baseline_variant, base, chosen)
    outcome.rows = [_row(pair, spec) for pair, spec in pairs]
    suspected = [pair for (pair, _), row in zip(pairs, outcome.rows, strict=True) if row["suspected"]]
    if confirm and suspected:
        path = _confirm(cand, suspected, confirm, base is cand, targets_dir, lease_wait)
        extra = load_result_set(path)
        found = {key: pd.concat([frame, samples(extra, _metric_named(specs, key), include_perturbed=include_perturbed)],
                                ignore_index=True)
                 for key, frame in found.items()}
        pairs = _all_pairs(specs, cand, found, base_found if base is not cand else found, baseline_variant, base,
                           chosen)
        outcome.rows = [_row(pair, spec) for pair, spec in pairs]
        outcome.confirmation = str(path)
        outcome.notes.append(f"confirmation: {path} ({confirm} more rounds of {len(suspected)} suspected cells and "
                             f"their baseline); decided on both sets' observations")
    return outcome


def _metric_named(specs: list[MetricSpec], name: str) -> Metric:
    return next(spec.metric for spec in specs if spec.metric.name == name)


def _check_complete(one: ResultSet) -> None:
    if not one.complete:
        raise InfrastructureError(f"{one.path}: the set is incomplete; finish it (harness run --resume "
                                  f"{one.set_id}) or gate a complete one")


def _gated_samples(one: ResultSet, spec: MetricSpec, include_perturbed: bool = False) -> pd.DataFrame:
    """The metric's samples; absent from a set with runs not ok, that is an infrastructure failure, not bad input."""
    try:
        return metric_samples(one, spec.metric, include_perturbed)
    except ResultSetError:
        raise  # a damaged table is bad input whatever the runs' status
    except UsageError as exc:
        bad = runs_not_ok(one)
        if bad.empty:
            raise
        raise InfrastructureError(f"{exc}, and {len(bad)} runs are not ok: {_first_bad(bad)}") from None


def _check_runs(one: ResultSet, found: pd.DataFrame, spec: MetricSpec) -> None:
    """A gated cell whose run failed, died or was interrupted is a measurement missing, not a pass."""
    bad = runs_not_ok(one)
    bad = bad[bad["step"].isin(set(found["step"])) & bad["target"].isin(set(found["target"]))]
    if not bad.empty:
        raise InfrastructureError(f"{one.path}: {len(bad)} runs of the cells gated on {spec.metric.name} are "
                                  f"not ok: {_first_bad(bad)}")


def _first_bad(bad: pd.DataFrame) -> str:
    first = bad.iloc[0]
    error = str(first["error"]).strip().splitlines()[-1][:200] if pd.notna(first["error"]) else "no error recorded"
    return f"{first['target']}/{first['run_id']} ({first['variant']}) {first['status']}: {error}"


def _all_pairs(specs: list[MetricSpec], cand: ResultSet, found: dict[str, pd.DataFrame],
               base_found: dict[str, pd.DataFrame], baseline_variant: str | None, base: ResultSet,
               chosen: Across | None = None) -> list[tuple[Pair, MetricSpec]]:
    out: list[tuple[Pair, MetricSpec]] = []
    for spec in specs:
        frame = found[spec.metric.name]
        if chosen is not None:
            pairs = across_pairs(frame, chosen)
        elif baseline_variant is not None:
            check_variant(baseline_variant, frame, f"{cand.path} ({spec.metric.name})")
            pairs = same_session_pairs(frame, baseline_variant)
        else:
            pairs = cross_set_pairs(base_found[spec.metric.name], frame, base.set_id)
        if not pairs:
            against = (f"its {chosen.label()} cells (--across {chosen.axis})" if chosen else
                       f"baseline variant {baseline_variant!r}" if baseline_variant else f"the cells of {base.path}")
            raise UsageError(f"metric {spec.metric.name}: no cell of {cand.path} overlaps {against} "
                             "(same target, step and test)")
        out += [(pair, spec) for pair in pairs]
    return out


def _row(pair: Pair, spec: MetricSpec) -> dict[str, Any]:
    from harness.analysis.gate import decide  # scipy: loaded once the inputs are known to be good

    decision = decide(pair.base_values, pair.cand_values, higher_is_better=spec.metric.higher_is_better,
                      threshold=spec.threshold)
    est = decision.estimate
    nan = float("nan")
    ratio, low, high, p = (est.ratio, est.low, est.high, est.p) if est else (nan, nan, nan, nan)
    return {**pair.key(), "n": f"{len(pair.base_values)}/{len(pair.cand_values)}",
            "n_baseline": len(pair.base_values), "n_candidate": len(pair.cand_values), "ratio": ratio, "low": low,
            "high": high, "ci": ci_text(low, high), "p": p, "threshold": spec.threshold, "limit": decision.limit,
            "verdict": decision.verdict, "reason": decision.reason, "suspected": decision.suspected,
            "unit": spec.metric.unit, "kind": spec.metric.kind, "higher_is_better": spec.metric.higher_is_better}


def _confirm(cand: ResultSet, suspected: list[Pair], rounds: int, same_session: bool, targets_dir: Path | None,
             lease_wait: float) -> Path:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from harness.campaign.confirm import confirm
    from harness.commands.run import RichProgress

    run_ids = {run for pair in suspected for run in pair.cand_runs + (pair.base_runs if same_session else [])}
    err = err_console  # stdout stays the report (--format json)
    err.print(f"confirming {len(suspected)} suspected cells: {rounds} more rounds", highlight=False)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[run]}"))
    with Progress(*columns, console=err, transient=False) as progress:
        return confirm(cand.path, run_ids, rounds, targets_dir=targets_dir, progress=RichProgress(progress),
                       lease_wait_s=lease_wait)
