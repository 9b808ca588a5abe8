"""F4 and report.md's change tables for a set whose matrix has a ``build`` axis: each non-baseline build against
the baseline build of the same session, per cell (everything equal but the build), the pairing of ``harness gate
--across build``, so the figure and the gate give the same numbers. A set without a build axis (or with one value
of it) draws F4 and writes report.md exactly as before: a real set the harness wrote, checked byte for byte
against what the harness drew from it before F4 knew builds (tests/data/harness/SOURCE.md)."""

from __future__ import annotations

import shutil
from pathlib import Path
from unittest.mock import patch

from PIL import Image

from harness.figures import FIGURES
from harness.figures.report import render

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
