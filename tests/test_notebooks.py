"""The figures notebook executes against a real result set and writes the figures again."""

from __future__ import annotations

import os
from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient

from tests.helpers import REPO

pytestmark = pytest.mark.slow


def test_figures_notebook_regenerates_figures(small_campaign: dict, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert small_campaign["done"].returncode == 0, small_campaign["done"].stderr
    (set_path,) = small_campaign["sets"]
    monkeypatch.setenv("HARNESS_SET", str(set_path))
    monkeypatch.setenv("HARNESS_FIGURES", str(tmp_path))
    notebook = jupytext.read(REPO / "notebooks" / "figures.py")
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO)}}).execute(env=dict(os.environ))
    for name in ("fio_ladder", "read_accounting", "timeline_local"):
        png = tmp_path / f"{name}.png"
        assert png.exists() and png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 5000
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
