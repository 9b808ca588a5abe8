"""Which runs are measurements: the one selection every summary, figure, compare and gate uses.

A run counts when its status is ok (a failed run's partial rows are not a measurement), it was not perturbed
(harness/results/validity.py: another process, steal or throttling disturbed it) and it was not invalid (its
decode below the experiment's minimums, harness/results/minimums.py: too short to mean anything). Perturbed and
invalid runs stay in every table, marked; ``harness report --include-perturbed`` draws the perturbed ones in anyway
(``including_perturbed``); an invalid run is never a measurement.
"""

from __future__ import annotations

import pandas as pd


def perturbed_mask(runs: pd.DataFrame) -> pd.Series:
    """True for each ok run marked perturbed (a set made before the mark existed has none)."""
    if "perturbed" not in runs:
        return pd.Series(False, index=runs.index)
    return (runs["status"] == "ok") & runs["perturbed"].fillna(False).astype(bool)


def invalid_mask(runs: pd.DataFrame) -> pd.Series:
    """True for each ok run whose decode was below the experiment's minimums (a set made before: none)."""
    if "invalid" not in runs:
        return pd.Series(False, index=runs.index)
    return (runs["status"] == "ok") & runs["invalid"].fillna(False).astype(bool)


def usable_runs(runs: pd.DataFrame, include_perturbed: bool = False) -> pd.DataFrame:
    """The runs that are measurements: status ok, not invalid, and not perturbed unless ``include_perturbed``."""
    if runs.empty:
        return runs
    keep = (runs["status"] == "ok") & ~invalid_mask(runs)
    if not include_perturbed:
        keep &= ~perturbed_mask(runs)
    return runs.loc[keep]


def invalid_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The ok runs left out of everything because they were too short, with their reasons."""
    if runs.empty:
        return runs
    return runs.loc[invalid_mask(runs)]


def perturbed_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The ok runs left out of summaries because they were perturbed, with their reasons."""
    if runs.empty:
        return runs
    return runs.loc[perturbed_mask(runs)]


def including_perturbed(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs table as it reads when perturbed runs are wanted in the summaries: the mark cleared (the reason
    stays), so ``usable_runs`` keeps them wherever it is called."""
    if runs.empty or "perturbed" not in runs:
        return runs
    return runs.assign(perturbed=False)
