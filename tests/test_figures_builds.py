"""F4 and report.md's change tables for a set whose matrix has a ``build`` axis: each non-baseline build against
the baseline build of the same session, per cell (everything equal but the build), the pairing of ``harness gate
--across build``, so the figure and the gate give the same numbers. A set without a build axis (or with one value
of it) draws F4 and writes report.md exactly as before: a real set the harness wrote, checked byte for byte
against what the harness drew from it before F4 knew builds (tests/data/harness/SOURCE.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pandas as pd
import pytest
from matplotlib.figure import Figure as MplFigure
from PIL import Image

from harness.figures import FIGURES
from harness.figures.change import observations, ratio_table
from harness.figures.change_builds import builds_figure
from harness.figures.report import figure_context, render
from harness.figures.streaming import baseline_cell, build_baseline, change_table
from harness.results.loader import load_result_set
from harness.results.tables import BENCH, REQUESTS, RUNS
from tests.helpers import cli_in_process
from tests.test_figures import kept_figures, overlapping_texts, png_numbers
from tests.test_gate_across import SET_ID, pread_slower, write_set

__all__ = ["kept_figures"]  # a fixture of tests/test_figures.py, used here

DATA = Path(__file__).parent / "data" / "harness"
QUICKSTART = DATA / "quickstart-4950e0"


def _render_f4_only(set_dir: Path) -> Path:
    """report.md and F4 of a copy of ``set_dir`` (the other figures are not drawn: they are not what changed)."""
    with patch.dict(FIGURES, {"change_vs_baseline": FIGURES["change_vs_baseline"]}, clear=True):
        return render(set_dir).path


def _pixels_and_text(png: Path) -> tuple[tuple[int, int], bytes, dict[str, str]]:
    """A PNG's size, pixels and text chunks but the one naming the harness version that wrote it."""
    with Image.open(png) as image:
        text = {k: v for k, v in image.text.items() if k != "Software"}
        return image.size, image.convert("RGBA").tobytes(), text


def test_a_set_without_a_build_axis_draws_f4_and_writes_report_md_as_before(tmp_path: Path) -> None:
    copy = shutil.copytree(QUICKSTART, tmp_path / QUICKSTART.name)
    report = _render_f4_only(copy)
    expected = DATA / "quickstart-4950e0-expected"
    assert report.read_text() == (expected / "report.md").read_text()
    assert _pixels_and_text(copy / "figures" / "change_vs_baseline.png") == \
        _pixels_and_text(expected / "change_vs_baseline.png")


# the seed's read-strategy experiment on 2 cores (the paper's read-strategies experiment): the base build ignores the
# strategy variable, so each strategies cell is compared with base at the same strategy and threads
STRATEGIES = ["off", "willneed", "pread-128k", "pread-128k-random", "pread-512k", "async-4", "async-8", "async-16"]
SEED_MATRIX: dict[str, list[object]] = {"build": ["base", "strategies"], "strategy": list(STRATEGIES),
                                        "threads": [2, 4]}


def pread_512k_slower(cell: dict[str, object]) -> float:
    """The injected change: the strategies build decodes 20 % slower with pread-512k, at both thread counts."""
    return 0.8 if cell["build"] == "strategies" and cell["strategy"] == "pread-512k" else 1.0


def _builds_set(tmp_path: Path) -> Path:
    return write_set(tmp_path / "results", pread_512k_slower, matrix=SEED_MATRIX)


def _f4_inputs(path: Path) -> tuple[pd.DataFrame, str]:
    rs = load_result_set(path)
    context = figure_context(rs, path / "figures")
    build_base = build_baseline(context.matrix, context.baseline)
    assert build_base == "base"
    runs = rs.table(RUNS.name)
    return ratio_table(observations(runs, rs.table, context.params), context.params,
                       baseline_cell(runs, context.params, context.baseline), build_base), build_base


def test_f4_of_two_builds_has_the_gates_across_build_numbers_to_the_digit(tmp_path: Path) -> None:
    """Each strategies cell against build=base at its own strategy and thread count: F4's table, the numbers in
    its PNG and report.md's ratio table are the rows ``harness gate --across build`` decides on, float for float;
    the two pread-512k cells are the regressions, both whiskers below ×1."""
    path = _builds_set(tmp_path)
    done = cli_in_process("gate", "--results", str(tmp_path / "results"), SET_ID, "--across", "build",
                          "--metric", "decode_tps", "--format", "json")
    assert done.returncode == 1, done.stdout + done.stderr
    gate = {c["variant"]: c for c in json.loads(done.stdout)["cells"]}
    assert {v for v, c in gate.items() if c["verdict"] == "regression"} == {
        f"build=strategies strategy=pread-512k threads={t} cold" for t in (2, 4)}

    ratios, _ = _f4_inputs(path)
    assert len(ratios) == len(gate) == 16
    numbers = ("ratio", "low", "high", "p", "n_baseline", "n_candidate")
    for row in ratios.to_dict("records"):
        cell = gate[row["variant"]]
        assert row["baseline"] == cell["baseline"] == row["variant"].replace("build=strategies", "build=base")
        assert tuple(row[k] for k in numbers) == tuple(cell[k] for k in numbers), row["variant"]

    report = _render_f4_only(path)
    png = png_numbers(path / "figures" / "change_vs_baseline.png")
    assert png["across"] == {"axis": "build", "baseline_value": "base"} and png["colour"] == "threads"
    drawn = png["llama-server decode (tok/s)"]
    assert set(drawn) == set(gate)
    for variant, cell in gate.items():
        assert drawn[variant]["baseline"] == cell["baseline"]
        assert [drawn[variant][k] for k in numbers] == [float(f"{cell[k]:.6g}") for k in numbers], variant
    for t in (2, 4):
        slow = drawn[f"build=strategies strategy=pread-512k threads={t} cold"]
        assert slow["ratio"] == pytest.approx(0.8, abs=0.04) and slow["high"] < 0.95
    text = report.read_text()
    assert "## Ratio to build base of the same cell" in text and "`harness gate SET --across build" in text
    slow = "build=strategies strategy=pread-512k threads=2 cold"
    (row,) = [line.split("|")[1:-1] for line in text.splitlines()
              if line.startswith(f"| llama-server decode (tok/s) | {slow}")]
    assert [part.strip() for part in row[2:4]] == [gate[slow]["baseline"], f"{gate[slow]['ratio']:.3g}"]


def test_the_change_table_holds_every_matrix_value_but_the_build_fixed(tmp_path: Path) -> None:
    """report.md's per-round table: a strategies cell's change is against build=base at the same strategy and
    threads in the same round (4 threads decode 1.5x faster than 2: against the first cell they read +50 %)."""
    path = _builds_set(tmp_path)
    rs = load_result_set(path)
    runs, requests = rs.table(RUNS.name), rs.table(REQUESTS.name)
    params = list(SEED_MATRIX)
    table = change_table(runs, requests, rs.table(BENCH.name), params, baseline_cell(runs, params, None), "base")
    assert len(table) == 32 and set(table["metric"]) == {"decode tok/s (server)"}
    rows = table.assign(threads=table["threads"].astype(int)).set_index(["build", "strategy", "threads"])
    per_round = requests.merge(runs[["run_id", "round", *params]], on="run_id") \
        .groupby(["build", "strategy", "threads", "round"])["decode_tps"].mean()
    for strategy in STRATEGIES:
        for t in (2, 4):
            base, cand = per_round.loc[("base", strategy, t)], per_round.loc[("strategies", strategy, t)]
            assert rows.loc[("strategies", strategy, t), "change_pct"] == pytest.approx(
                ((cand / base).mean() - 1) * 100, rel=1e-12)
            assert rows.loc[("base", strategy, t), "change_pct"] == 0.0
            assert rows.loc[("base", strategy, t), "is_baseline"]
            assert not rows.loc[("strategies", strategy, t), "is_baseline"]
    assert rows.loc[("strategies", "pread-512k", 4), "change_pct"] == pytest.approx(-20, abs=4)
    assert abs(rows.loc[("strategies", "off", 4), "change_pct"]) < 5
    report = _render_f4_only(path).read_text()
    assert "## Change vs build base of the same cell and round" in report


def test_f4_of_two_builds_groups_the_strategies_and_colours_the_threads(
        tmp_path: Path, kept_figures: list[MplFigure]) -> None:
    """16 cells read as the seed's figure: the strategies under the ticks in the experiment's order, named once
    below them; the two thread counts side by side in each group in two colours, with a legend; "cold", shared by
    every cell, said once in the title; ticks finer than ×1 alone; no text over another."""
    path = _builds_set(tmp_path)
    ratios, build_base = _f4_inputs(path)
    rs = load_result_set(path)
    builds_figure(ratios, figure_context(rs, tmp_path / "figures"), rs.table(RUNS.name), build_base)
    (fig,) = kept_figures
    (ax,) = [a for a in fig.axes if a.get_title(loc="left")]
    assert [t.get_text() for t in ax.get_xticklabels()] == STRATEGIES and ax.get_xlabel() == "strategy"
    assert "every cell cold" in fig.get_suptitle() and "--across build --baseline-value base" in fig.get_suptitle()
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["threads=2", "threads=4"]
    points: dict[str, list[tuple[float, Any]]] = {}
    for container in ax.containers:
        line = container.lines[0]
        points.setdefault(str(line.get_color()), []).append((float(line.get_xdata()[0]), line))
    assert len(points) == 2 and all(len(p) == 8 for p in points.values())
    left, right = sorted(points.values(), key=lambda p: min(x for x, _ in p))
    for (xl, _), (xr, _) in zip(sorted(left, key=lambda p: p[0]), sorted(right, key=lambda p: p[0]), strict=True):
        assert round(xl) == round(xr) and xl < xr  # threads=2 left of threads=4 in the same group
    ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert "×1" in ticks and len(ticks) >= 3
    assert overlapping_texts(fig) == []


def test_a_build_axis_of_one_value_is_drawn_as_any_other_set(tmp_path: Path) -> None:
    """One build is nothing to compare: F4 and the tables take the experiment's baseline cell as before."""
    matrix: dict[str, list[object]] = {"build": ["base"], "strategy": ["off", "willneed"], "threads": [2, 4]}
    path = write_set(tmp_path, lambda cell: 1.0, matrix=matrix)
    rs = load_result_set(path)
    assert build_baseline(figure_context(rs, path / "figures").matrix) is None
    _render_f4_only(path)
    png = png_numbers(path / "figures" / "change_vs_baseline.png")
    assert "across" not in png
    assert "build=base strategy=off threads=2 cold" in png["llama-server decode (tok/s)"]  # the baseline's own row
    assert "## Change vs the same-session baseline (first cell)" in (path / "report.md").read_text()


def test_f4_of_several_candidate_builds_names_each_under_its_ticks(tmp_path: Path,
                                                                    kept_figures: list[MplFigure]) -> None:
    """Builds willneed and pread against base at 1 and 2 threads: the builds are the groups (the title names them
    and the baseline), the figure is wide enough for its title, and no text lies over another."""
    path = write_set(tmp_path, pread_slower)
    _render_f4_only(path)
    (fig,) = kept_figures
    (ax,) = [a for a in fig.axes if a.get_title(loc="left")]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["willneed", "pread"] and ax.get_xlabel() == "build"
    assert fig.get_suptitle().startswith("build willneed, pread vs build base, same session")
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["threads=1", "threads=2"]
    drawn = png_numbers(path / "figures" / "change_vs_baseline.png")["llama-server decode (tok/s)"]
    assert {v: round(c["ratio"], 1) for v, c in drawn.items()} == {
        "build=willneed threads=1 cold": 1.0, "build=willneed threads=2 cold": 1.0,
        "build=pread threads=1 cold": 0.9, "build=pread threads=2 cold": 0.9}
    assert overlapping_texts(fig) == []


def test_the_baseline_build_is_the_experiments_or_the_axiss_first() -> None:
    builds: dict[str, list[object]] = {"build": ["base", "strategies"], "threads": [2, 4]}
    assert build_baseline(builds) == "base"
    assert build_baseline(builds, {"build": "strategies", "threads": 2}) == "strategies"
    assert build_baseline(builds, {"threads": 2}) == "base"
    assert build_baseline({"build": ["base"], "threads": [2, 4]}) is None
    assert build_baseline({"read_ahead_kb": [8192, 128]}, {"read_ahead_kb": 8192}) is None
