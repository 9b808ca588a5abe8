"""Outlier flags (harness/analysis/outliers.py): the modified z-score of Iglewicz and Hoaglin against each cell's
median absolute deviation; flagged samples are named in report.md and in compare's and the gate's notes, and leave
the medians only where the experiment says ``validity: {exclude_outliers: true}``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analysis.outliers import flag_outliers, modified_z
from harness.figures.outlier_report import outlier_lines
from harness.results.loader import load_result_set
from tests.helpers import cli_in_process
from tests.test_gate import PER_RUN, ROUNDS, write_set


def test_modified_z_by_hand() -> None:
    """median 10.1; |x - median| = 0.1 0.1 0.2 0 3.9, MAD 0.1; M = 0.6745 (x - 10.1) / 0.1: 14 gets 26.3."""
    z = modified_z([10.0, 10.2, 9.9, 10.1, 14.0])
    assert z == pytest.approx([-0.6745, 0.6745, -1.349, 0.0, 26.3055])
    assert np.isnan(modified_z([5.0, 5.0, 5.0, 6.0])).all()  # MAD 0: no scale, nothing judged
    assert np.isnan(modified_z([1.0, 9.0])).all()  # too few


def test_each_sample_is_judged_against_its_own_cell() -> None:
    """30 is far out among values near 10 and ordinary among values near 30."""
    frame = pd.DataFrame({"cell": ["a"] * 5 + ["b"] * 5,
                          "value": [10.0, 10.3, 9.8, 10.1, 30.0, 29.0, 30.5, 31.0, 30.0, 29.5]})
    flagged = flag_outliers(frame, ["cell"])
    assert list(flagged["outlier"]) == [False] * 4 + [True] + [False] * 5
    assert list(flagged["value"]) == list(frame["value"])  # rows and order kept


def cells_with_one_stall() -> dict[str, dict[str, np.ndarray]]:
    """Two arms at the same 30 tok/s with 1 % noise; arm b's seventh request stalled at a third of that."""
    rng = np.random.default_rng(7)
    n = ROUNDS * PER_RUN
    a, b = 30 * rng.normal(1, 0.01, n), 30 * rng.normal(1, 0.01, n)
    b[6] = 10.0
    return {"a": {"decode_tps": a}, "b": {"decode_tps": b}}


def gate_json(results: Path) -> dict:
    done = cli_in_process("gate", "--results", str(results), "gatetest", "--baseline-variant", "arm=a",
                          "--metric", "decode_tps", "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_an_outlier_is_flagged_and_kept_unless_the_experiment_excludes_it(tmp_path: Path) -> None:
    path = write_set(tmp_path, "20261201-000000-gatetest-aaaaaa", cells_with_one_stall())
    kept = gate_json(tmp_path)
    [note] = [n for n in kept["notes"] if "outlier" in n]
    assert "decode_tps: 1 outlier sample(s)" in note and "kept in the medians: result may be unstable" in note
    assert "arm=b cold 0004-llama-server-b-cold-r2 10 (z -" in note  # the 7th: round 2, 3rd of 4
    assert kept["cells"][0]["n_candidate"] == ROUNDS * PER_RUN
    report = "\n".join(outlier_lines(load_result_set(path)))
    assert "**1 outlier sample(s)**" in report and "| decode_tps | arm=b cold llama-server |" in report

    manifest = json.loads((path / "manifest.json").read_text())
    manifest["validity"] = {"exclude_outliers": True}  # what the campaign records from the experiment
    (path / "manifest.json").write_text(json.dumps(manifest))
    left = gate_json(tmp_path)
    assert left["cells"][0]["n_candidate"] == ROUNDS * PER_RUN - 1  # the stalled request is not a sample
    assert any("left out of the medians (validity.exclude_outliers)" in n for n in left["notes"])
    assert "left out of compare's and the gate's medians" in "\n".join(outlier_lines(load_result_set(path)))
