"""Rounds until the answer is tight: the ``rounds:`` key (a number or {min, max, until}), its bad values as one
line with file:line (exit 2), and the stopping rule of harness.analysis.sequential."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from harness.analysis.sequential import halfwidth_pct, look, look_confidence, looks
from harness.campaign.plan import build_plan
from harness.campaign.resolve import load_resolved
from harness.config.rounds import RoundsSpec
from tests.helpers import cli_in_process, one_line_exit_2

EXP = """\
name: tight
files:
  data: {create: 1M}
matrix:
  bs: [64k, 1M]
cache: none
rounds: ROUNDS
steps:
  - read: {file: data, bs: "{bs}"}
"""


def _write(tmp_path: Path, rounds: str) -> Path:
    path = tmp_path / "e.yaml"
    path.write_text(EXP.replace("ROUNDS", rounds))
    return path


def test_a_number_of_rounds_stays_valid_and_plans_every_round(tmp_path: Path) -> None:
    plan = build_plan(load_resolved(_write(tmp_path, "3")))
    assert [r.round for r in plan.runs] == [1, 1, 2, 2, 3, 3]


def test_rounds_until_tight_plans_the_minimum_first(tmp_path: Path) -> None:
    loaded = load_resolved(_write(tmp_path, "{min: 3, max: 12, until: {metric: read_mbps, ci_halfwidth_pct: 3}}"))
    spec = loaded.experiment.rounds
    assert isinstance(spec, RoundsSpec)
    assert (spec.min, spec.max, spec.until.metric, spec.until.ci_halfwidth_pct) == (3, 12, "read_mbps", 3)
    assert (spec.until.confidence, spec.until.rule, spec.until.stop) == (0.95, "bonferroni", "cell")
    plan = build_plan(loaded)
    assert [r.round for r in plan.runs] == [1, 1, 2, 2, 3, 3]  # interleaved: A B A B A B
    assert [r.params["bs"] for r in plan.runs] == ["64k", "1M"] * 3
    assert plan.most_runs == 2 * 12  # what the results disk must hold room for


def test_plan_says_the_minimum_is_planned_and_how_long_the_maximum_takes(tmp_path: Path) -> None:
    path = _write(tmp_path, "{min: 2, max: 8, until: {metric: read_mbps, ci_halfwidth_pct: 3}}")
    done = cli_in_process("plan", str(path))
    assert done.returncode == 0, done.stderr
    assert "4 runs per target" in done.stdout
    total = float(done.stdout.split("estimated duration: ")[1].split("(")[1].split(" s)")[0])
    assert "rounds until tight: 2 rounds planned, up to 8 while a cell's read_mbps interval is wider than 3 %" \
        in " ".join(done.stdout.split())
    most = float(done.stdout.split("at most ")[1].split("(")[1].split(" s)")[0])
    assert most == pytest.approx(total * 4, abs=2)


@pytest.mark.parametrize(("rounds", "line", "message"), [
    ("{min: 4, max: 3, until: {metric: decode_tps, ci_halfwidth_pct: 3}}", 7, "max (3) is below min (4)"),
    ("{min: 1, max: 3, until: {metric: decode_tps, ci_halfwidth_pct: 3}}", 7, "min must be at least 2"),
    ("{min: 2, max: 6, until: {metric: nosuch, ci_halfwidth_pct: 3}}", 7, "unknown metric 'nosuch' (known: "),
    ("{min: 2, max: 6, until: {metric: decode_tps, ci_halfwidth_pct: 0}}", 7, "ci_halfwidth_pct"),
    ("{min: 2, max: 6, until: {metric: decode_tps}}", 7, "ci_halfwidth_pct"),
    ("{min: 2, until: {metric: decode_tps, ci_halfwidth_pct: 3}}", 7, "max"),
    ("{min: 2, max: 6}", 7, "until"),
    ("{min: 2, max: 6, until: {metric: decode_tps, ci_halfwidth_pct: 3, rule: lucky}}", 7, "rule"),
    ("0", 7, "rounds"),
    ("twelve", 7, "rounds"),
])
def test_bad_rounds_is_one_line_with_file_and_line(tmp_path: Path, rounds: str, line: int, message: str) -> None:
    path = _write(tmp_path, rounds)
    error = one_line_exit_2(cli_in_process("plan", str(path)))
    assert error.startswith(f"error: {path}:{line}:"), error
    assert message in error, error


def test_bonferroni_splits_alpha_across_the_looks() -> None:
    assert looks(2, 12) == 11
    assert look_confidence(0.95, 11, "bonferroni") == pytest.approx(1 - 0.05 / 11)
    assert look_confidence(0.95, 11, "naive") == 0.95


def test_halfwidth_is_students_t_in_per_cent_of_the_mean() -> None:
    values = [98.0, 101.0, 100.0, 103.0, 99.0]
    mean, sd = np.mean(values), np.std(values, ddof=1)
    expected = stats.t.ppf(0.975, 4) * sd / math.sqrt(5) / mean * 100
    assert halfwidth_pct(values, 0.95) == pytest.approx(expected)
    assert halfwidth_pct([100.0], 0.95) == math.inf  # one value: no interval yet
    assert halfwidth_pct([100.0, float("nan")], 0.95) == math.inf


def test_the_rule_is_wider_than_the_naive_interval_so_a_cell_needs_more_rounds() -> None:
    values = [100.0, 102.0, 99.0, 101.0, 100.5, 99.5]
    naive = look(values, 6, target_pct=1.5, confidence=0.95, n_looks=11, rule="naive")
    ruled = look(values, 6, target_pct=1.5, confidence=0.95, n_looks=11, rule="bonferroni")
    assert naive.tight and not ruled.tight
    assert ruled.halfwidth_pct > naive.halfwidth_pct and ruled.n == naive.n == 6


def test_an_added_round_lengthens_the_targets_progress_bar() -> None:
    from rich.progress import Progress

    from harness.commands.run import RichProgress

    progress = RichProgress(Progress())
    progress.target_started("local", 6)
    progress.target_started("local", 8)  # what rounds until tight says when it adds a round of 2 runs
    assert [task.total for task in progress.progress.tasks] == [8]
