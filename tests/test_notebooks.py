"""The notebooks (notebooks/<group>.py, one per figure group) run against a real streaming result set and write
exactly the figures `harness report` writes for it, with the same numbers in their metadata."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient
from PIL import Image

from harness.errors import UsageError
from harness.figures import FIGURES
from harness.figures.base import NUMBERS_KEY
from harness.figures.notebook import draw_group, open_set
from harness.results import INCOMPLETE_SUFFIX, SCHEMA_VERSION
from tests.helpers import BUILD_TIMEOUT_S, REPO, run_cli

NOTEBOOKS = REPO / "notebooks"


def _notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.py"))


def _numbers(figures: Path) -> dict[str, dict]:
    return {png.name: json.loads(Image.open(png).text[NUMBERS_KEY]) for png in figures.glob("*.png")}


def test_every_figure_group_has_its_notebook() -> None:
    groups = {figure.group for figure in FIGURES.values()}
    assert {path.stem for path in _notebooks()} == groups
    for path in _notebooks():  # and each notebook draws its own group
        assert re.search(rf"draw_group\(context, \"{path.stem}\"\)", path.read_text()), path.name


def _fake_set(results: Path, name: str, status: str) -> Path:
    path = results / name
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, "set_id": name.split(".")[0],
                                                    "status": status, "experiment": {"name": "x"}}))
    return path


def test_open_set_takes_the_newest_complete_set_or_the_chosen_one(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "results"
    monkeypatch.setenv("HARNESS_RESULTS", str(results))
    monkeypatch.delenv("HARNESS_SET", raising=False)
    monkeypatch.delenv("HARNESS_FIGURES", raising=False)
    with pytest.raises(UsageError, match="no complete result set"):
        open_set()
    older = _fake_set(results, "20260101-000000-x-aaaaaa", "complete")
    _fake_set(results, "20260102-000000-x-bbbbbb", "complete")
    _fake_set(results, "20260103-000000-x-cccccc" + INCOMPLETE_SUFFIX, "running")
    rs, context = open_set()
    assert rs.set_id == "20260102-000000-x-bbbbbb" and context.out_dir == rs.path / "figures"
    monkeypatch.setenv("HARNESS_SET", "aaaaaa")  # a unique part of an id
    monkeypatch.setenv("HARNESS_FIGURES", str(tmp_path / "out"))
    rs, context = open_set()
    assert rs.path == older and context.out_dir == tmp_path / "out"
    with pytest.raises(UsageError, match="no figure group 'nope'"):
        draw_group(context, "nope")


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT_S)  # the streaming_set campaign builds llama.cpp when no build is cached yet
def test_notebooks_regenerate_the_report_figures(streaming_set: Path, tmp_path: Path) -> None:
    drawn: dict[str, dict] = {}
    for path in _notebooks():
        out = tmp_path / "notebooks" / path.stem  # one directory per notebook: what each one drew
        env = {**os.environ, "HARNESS_SET": str(streaming_set), "HARNESS_FIGURES": str(out)}
        notebook = jupytext.read(path)
        NotebookClient(notebook, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(REPO)}}).execute(env=env)
        outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
        errors = [o for o in outputs if o.get("output_type") == "error"]
        assert not errors, f"{path.name}: {errors}"
        # every figure group has data in this set: each notebook drew, and showed inline, a figure
        mine = _numbers(out)
        assert mine and any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} drew nothing"
        assert not set(mine) & set(drawn), f"{path.name} drew another notebook's figure"
        drawn.update(mine)
    copy = tmp_path / "report" / streaming_set.name
    shutil.copytree(streaming_set, copy, ignore=shutil.ignore_patterns("figures", "report.md"))
    done = run_cli("report", str(copy))
    assert done.returncode == 0, done.stderr
    reported = _numbers(copy / "figures")
    assert set(drawn) == set(reported)
    for name, numbers in reported.items():
        assert drawn[name] == numbers, name
