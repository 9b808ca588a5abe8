"""``harness compare A B`` (two sets), ``harness compare SET --baseline-variant NAME`` (variants of one set) or
``harness compare SET --across AXIS [--baseline-value V]`` (each cell against the one differing only in AXIS): per
matching cell (target, variant, step, test) and metric the ratio of medians, its bootstrap 95 % interval,
Mann-Whitney p and n per side (:func:`harness.analysis.ratios.ratio_of_medians`, the estimate the gate and figure
F4 use). It reports; it decides nothing (that is ``harness gate``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from harness.commands.common import BaselineValueOpt, ResultsOpt, console
from harness.errors import UsageError
from harness.results.loader import ResultSet, find_result_set, load_result_set, unverified_note

if TYPE_CHECKING:  # pandas and scipy load when the command runs, not whenever the CLI starts
    from harness.commands.comparison import Across, Pair
    from harness.results.metrics import Metric

FORMATS = ("table", "json", "md")
COLUMNS = [(c, c) for c in ("target", "step", "test", "metric", "variant", "baseline", "n")] + [
    ("median base", "median_base"), ("median cand", "median_cand"), ("ratio", "ratio"), ("95% CI", "ci"),
    ("p", "p"), ("unit", "unit")]


def compare(a: str = typer.Argument(..., metavar="A", help="the baseline set: id, unique part of it, or path"),
            b: str = typer.Argument(None, metavar="B", help="the candidate set (omit to compare variants of A)"),
            baseline_variant: str = typer.Option(None, "--baseline-variant", metavar="NAME",
                                                 help="compare each variant of A with this one, e.g. "
                                                      "'read_ahead_kb=8192 threads=1' (per cache condition)"),
            across: str = typer.Option(None, "--across", metavar="AXIS",
                                       help="compare each cell of A with the one differing only in this matrix "
                                            "axis (e.g. build), at its baseline value"),
            baseline_value: str = BaselineValueOpt,
            variant: list[str] = typer.Option(None, "--variant", metavar="NAME",
                                              help="only these variants (repeatable; words of the label)"),
            metric: list[str] = typer.Option(None, "--metric", metavar="NAME",
                                             help="metric to compare (repeatable; default: every one the sets hold)"),
            output: str = typer.Option("table", "--format", help="table, json or md"),
            results: Path = ResultsOpt) -> None:
    """Compare two result sets, or the variants of one, cell by cell."""
    from harness.commands.comparison import (
        CROSS_SESSION_NOTE,
        across_of,
        check_baseline_value,
        metric_by_name,
        present_metrics,
    )

    if output not in FORMATS:
        raise UsageError(f"--format: expected one of {', '.join(FORMATS)}, got {output!r}")
    if sum(given is not None for given in (b, baseline_variant, across)) != 1:
        raise UsageError("give a second set B, or --baseline-variant NAME or --across AXIS to compare the cells "
                         "of A (one)")
    check_baseline_value(baseline_value, across)
    chosen = [metric_by_name(name) for name in metric or []]
    base = load_result_set(find_result_set(a, results), verify=True)
    cand = load_result_set(find_result_set(b, results), verify=True) if b is not None else base
    axis = across_of(cand, across, baseline_value) if across is not None else None
    metrics = chosen or present_metrics(base, cand)
    if not metrics:
        raise UsageError(f"no metric is in both {base.path} and {cand.path}")
    pairs = _pairs(base, cand, metrics, baseline_variant, variant or None, axis)
    by_name = {m.name: m for m in metrics}
    rows = [_row(pair, by_name[pair.metric]) for pair in pairs]
    against = base.set_id if b is not None else axis.label() if axis is not None else baseline_variant
    notes = ([CROSS_SESSION_NOTE] if b is not None else []) + _notes(base, cand, metrics)
    _print(rows, notes, output, f"{cand.set_id} vs {against}",
           {"baseline": against, "set": cand.set_id, "mode": "cross-session" if b is not None else "same-session"})


def _pairs(base: ResultSet, cand: ResultSet, metrics: list[Metric], baseline_variant: str | None,
           only: list[str] | None, axis: Across | None = None) -> list[Pair]:
    from harness.commands.comparison import (
        across_pairs,
        check_variant,
        cross_set_pairs,
        metric_samples,
        same_session_pairs,
    )

    pairs: list[Pair] = []
    for metric in metrics:
        found = metric_samples(cand, metric)
        for name in only or []:
            check_variant(name, found, f"{cand.path} ({metric.name})")
        if axis is not None:
            pairs += across_pairs(found, axis, only)
        elif baseline_variant is not None:
            check_variant(baseline_variant, found, f"{cand.path} ({metric.name})")
            pairs += same_session_pairs(found, baseline_variant, only)
        else:
            pairs += cross_set_pairs(metric_samples(base, metric), found, base.set_id, only)
    if not pairs:
        against = (f"its {axis.label()} cells (--across {axis.axis})" if axis else
                   f"variant {baseline_variant!r}" if baseline_variant else str(base.path))
        raise UsageError(f"{cand.path}: no cell to compare with {against} (no matching target, variant, step, test)")
    return pairs


def _row(pair: Pair, metric: Metric) -> dict[str, Any]:
    import warnings

    import numpy as np

    from harness.analysis.ratios import ratio_of_medians
    from harness.commands.comparison import ci_text

    with warnings.catch_warnings():  # constant samples: scipy warns, the interval is the point
        warnings.simplefilter("ignore")
        est = ratio_of_medians(pair.base_values, pair.cand_values)
    return {**pair.key(), "n": f"{est.n_baseline}/{est.n_candidate}", "n_baseline": est.n_baseline,
            "n_candidate": est.n_candidate, "median_base": float(np.median(pair.base_values)),
            "median_cand": float(np.median(pair.cand_values)), "ratio": est.ratio, "low": est.low,
            "high": est.high, "ci": ci_text(est.low, est.high), "p": est.p, "unit": metric.unit,
            "higher_is_better": metric.higher_is_better}


def _notes(base: ResultSet, cand: ResultSet, metrics: list[Metric]) -> list[str]:
    """What the reader should know: a set incomplete, runs left out, outliers flagged."""
    from harness.commands.comparison import outlier_note
    from harness.results.samples import invalid_note, perturbed_note, runs_not_ok

    notes = []
    for one in [base] if cand is base else [base, cand]:
        if not one.complete:
            notes.append(f"{one.set_id} is incomplete: its missing runs are not compared")
        elif not one.verified:
            notes.append(unverified_note(one))
        bad = runs_not_ok(one)
        if not bad.empty:
            notes.append(f"{one.set_id}: {len(bad)} runs not ok are left out ({', '.join(bad['run_id'][:5])}"
                         f"{', ...' if len(bad) > 5 else ''})")
        notes += [note for note in (perturbed_note(one), invalid_note(one)) if note]
        notes += [note for metric in metrics if (note := outlier_note(one, metric))]
    return notes


def _print(rows: list[dict[str, Any]], notes: list[str], output: str, title: str, meta: dict[str, Any]) -> None:
    from harness.commands.comparison import group_by_metric, markdown_table, rich_table, to_json, visible_columns

    if output == "json":
        print(to_json({**meta, "notes": notes, "cells": rows}))
        return
    if output == "md":
        print("\n".join([f"**compare** {title}", "", *[f"- {n}" for n in notes], "", markdown_table(rows, COLUMNS)]))
        return
    for metric, group in group_by_metric(rows).items():
        unit = group[0]["unit"]
        better = "higher" if group[0]["higher_is_better"] else "lower"
        console.print(rich_table(group, visible_columns(group, COLUMNS, ("metric", "unit")),
                                 f"{metric} ({unit}, {better} is better): {title}"))
    for note in notes:
        console.print(f"[yellow]{note}[/]", highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(compare)
