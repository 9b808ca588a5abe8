"""Change points in the history (harness/analysis/changes.py, ``harness results changes``, the marks on ``trend``):
synthetic histories of 30 sets, seeded, with one injected step or none, as nightly runs of one board would write."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from harness.analysis.changes import CONFIRM_SETS, MIN_SEGMENT, detect_changes, history_changes, new_changes
from harness.figures.base import NUMBERS_KEY
from tests.helpers import cli_in_process
from tests.test_gate import tok_s, write_set

N_SETS, STEP_AT = 30, 18


def levels(step: float) -> list[float]:
    """The decode tok/s level of each of N_SETS nightly sets: 30 tok/s, times ``step`` from set STEP_AT on."""
    return [30.0 * (step if i >= STEP_AT else 1.0) for i in range(N_SETS)]


def medians(seed: int, step: float, noise: float = 0.02) -> list[float]:
    rng = np.random.default_rng(seed)
    return [level * rng.lognormal(0.0, noise) for level in levels(step)]


@pytest.mark.parametrize("seed", range(5))
def test_one_step_is_found_at_its_set_with_its_size(seed: int) -> None:
    [change] = detect_changes(medians(seed, 0.85))
    assert change.index == STEP_AT
    assert change.effect_pct == pytest.approx(-15.0, abs=2.5)
    assert change.before == pytest.approx(30.0, rel=0.03) and change.after == pytest.approx(25.5, rel=0.03)


@pytest.mark.parametrize("seed", range(5))
def test_a_flat_history_has_no_change(seed: int) -> None:
    assert detect_changes(medians(seed, 1.0)) == []


def test_a_step_smaller_than_the_minimum_effect_is_not_reported() -> None:
    values = [30.0] * 15 + [30.3] * 15  # a clean 1 % step: real, and below the 2 % a lab chases
    assert detect_changes(values) == []
    assert [c.index for c in detect_changes(values, min_effect_pct=0.5)] == [15]


def test_too_short_or_constant_histories_have_none() -> None:
    assert detect_changes([30.0, 20.0, 30.0, 20.0, 30.0]) == []  # fewer than two segments of three sets
    assert detect_changes([30.0] * 40) == []


def test_history_changes_names_the_sets_and_revisions_on_each_side() -> None:
    values = medians(1, 1.2)
    frame = pd.DataFrame({"set_id": [f"s{i:02d}" for i in range(N_SETS)],
                          "harness_rev": [f"rev{i:02d}" for i in range(N_SETS)], "median": values})
    [step] = history_changes(frame)
    assert (step.set_before, step.set_after) == (f"s{STEP_AT - 1}", f"s{STEP_AT}")
    assert (step.rev_before, step.rev_after) == (f"rev{STEP_AT - 1}", f"rev{STEP_AT}")
    assert f"between s{STEP_AT - 1} (rev{STEP_AT - 1}) and s{STEP_AT} (rev{STEP_AT})" in step.line("tok/s")


def nightly_history(results: Path, step: float) -> list[str]:
    """N_SETS sets of the gate's two-arm experiment, a day apart, each with its own harness revision; arm b's
    decode tok/s level steps by ``step`` at set STEP_AT, arm a stays flat."""
    ids = []
    rng = np.random.default_rng(7)
    for i, level in enumerate(levels(step)):
        set_id = f"2030{1 + i // 28:02d}{1 + i % 28:02d}-030000-nightly-{i:06d}"
        n = 20
        cells = {"a": {"decode_tps": tok_s(rng, n)}, "b": {"decode_tps": tok_s(rng, n, level=level)}}
        path = write_set(results, set_id, cells)
        manifest = json.loads((path / "manifest.json").read_text())
        manifest.update(started=f"2030-{1 + i // 28:02d}-{1 + i % 28:02d}T03:00:00+00:00",
                        harness={"version": "test", "git_revision": f"rev{i:02d}"})
        (path / "manifest.json").write_text(json.dumps(manifest))
        ids.append(set_id)
    return ids


def test_results_changes_finds_the_step_in_one_cell_only(tmp_path: Path) -> None:
    ids = nightly_history(tmp_path, 0.8)
    done = cli_in_process("results", "changes", "decode_tps", "--target", "local", "--results", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "change points of decode_tps (tok/s) on local: 1" in done.stdout
    [row] = [line for line in done.stdout.splitlines() if ids[STEP_AT] in line]
    assert "arm=b cold" in row and ids[STEP_AT - 1] in row and f"rev{STEP_AT:02d}" in row
    assert "PELT" in done.stdout  # the method is printed with the numbers


@pytest.mark.parametrize("seed", range(6))
def test_a_step_is_new_on_exactly_one_night_the_one_that_confirms_it(seed: int) -> None:
    values = medians(seed, 0.8)
    frame = pd.DataFrame({"set_id": [f"s{i:02d}" for i in range(N_SETS)], "harness_rev": "", "median": values})
    nights = {k: new_changes(frame.head(k)) for k in range(2 * MIN_SEGMENT, N_SETS + 1)}
    [(night, [step])] = [(k, found) for k, found in nights.items() if found]
    assert step.set_after == f"s{STEP_AT}"
    assert night == STEP_AT + CONFIRM_SETS  # reported the night the fourth set stands on the new level


def test_new_lists_only_what_the_newest_set_made_visible_in_the_job_summary(tmp_path: Path) -> None:
    ids = nightly_history(tmp_path, 0.8)
    summary = tmp_path / "summary.md"
    done = cli_in_process("results", "changes", "decode_tps", "--target", "local", "--results", str(tmp_path),
                          "--new", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert done.returncode == 0, done.stderr
    assert "none made visible by the newest set" in summary.read_text()  # the step is 12 sets old
    texts = []
    for night in range(STEP_AT + 1, STEP_AT + CONFIRM_SETS + 3):  # the nights after the step, as the job saw them
        summary.unlink(missing_ok=True)
        done = cli_in_process("results", "changes", "decode_tps", "--target", "local", "--results", str(tmp_path),
                              "--new", *[arg for one in ids[:night] for arg in ("--set", one)],
                              env={"GITHUB_STEP_SUMMARY": str(summary)})
        assert done.returncode == 0, done.stderr
        texts.append(summary.read_text())
    reported = [text for text in texts if "`arm=b cold`" in text]
    assert len(reported) == 1, texts
    assert f"and {ids[STEP_AT]} (rev{STEP_AT:02d})" in reported[0]
    assert "arm=a cold" not in "".join(texts)


def test_trend_marks_the_change_point_in_the_figure_and_its_numbers(tmp_path: Path) -> None:
    ids = nightly_history(tmp_path / "results", 0.8)
    out = tmp_path / "trend.png"
    done = cli_in_process("results", "trend", "decode_tps", "--cell", "arm=b cold", "--target", "local",
                          "--last", "30", "--results", str(tmp_path / "results"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "change point: " in done.stdout and ids[STEP_AT] in done.stdout
    numbers = json.loads(Image.open(out).text[NUMBERS_KEY])
    [step] = numbers["changes"]
    assert step["set_after"] == ids[STEP_AT] and step["effect_pct"] == pytest.approx(-20.0, abs=3.0)


def test_an_unknown_cell_is_one_line_naming_the_known_ones(tmp_path: Path) -> None:
    nightly_history(tmp_path, 1.0)
    done = cli_in_process("results", "changes", "decode_tps", "--cell", "arm=c cold", "--target", "local",
                          "--results", str(tmp_path))
    assert done.returncode == 2
    assert "arm=c cold" in done.stderr and "arm=a cold, arm=b cold" in done.stderr
