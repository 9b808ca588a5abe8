"""What every figure shares: the :class:`Figure` record (name, tables it needs, draw function), the registry
of figures by name, the context a figure is drawn in, and :func:`save` (footer, metadata, PNG + SVG).

Every figure carries the set id and the settings it was made under in its PNG/SVG metadata and in a
footer, so a figure that travels alone still says where it came from. Figures read a result set's tables
only (``harness.results.tables`` names them); they never import steps, boards or the campaign.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from harness import __version__  # noqa: E402
from harness.figures.layout import plain  # noqa: E402
from harness.registry import Registry  # noqa: E402
from harness.results.emulation import emulation_note  # noqa: E402
from harness.results.tables import Table  # noqa: E402

MB = 1e6


@dataclass
class FigureContext:
    """What a figure is drawn from and into: the set's tables, its matrix keys and baseline, the output."""

    table: Callable[[str], pd.DataFrame]  # a table by name; empty when the set has none
    out_dir: Path
    set_id: str
    settings: str
    params: list[str] = field(default_factory=list)  # the experiment's matrix keys
    baseline: dict[str, Any] | None = None  # the experiment's baseline cell, if it names one
    matrix: dict[str, list[Any]] = field(default_factory=dict)  # the experiment's matrix: each key's values, in order

    def save(self, fig: Any, name: str, runs: pd.DataFrame | None = None,
             numbers: dict[str, Any] | None = None) -> list[Path]:
        return save(fig, self.out_dir, name, self.set_id, self.settings, runs, numbers)


Draw = Callable[[FigureContext], list[Path]]


@dataclass(frozen=True)
class Figure:
    name: str
    needs: tuple[str, ...]  # tables that must all have rows
    draw: Draw
    needs_any: tuple[str, ...] = ()  # of these, at least one must have rows
    group: str = "storage"  # the notebook that draws it (notebooks/<group>.py)

    def missing(self, has_rows: Callable[[str], bool]) -> str | None:
        """Why the figure cannot be drawn from these tables ('no fio table'), or None when it can."""
        for name in self.needs:
            if not has_rows(name):
                return f"no {name} table"
        if self.needs_any and not any(has_rows(name) for name in self.needs_any):
            return f"no {' or '.join(self.needs_any)} table"
        return None


FIGURES: Registry[Figure] = Registry("figure")


def register_figure(name: str, needs: tuple[Table, ...], needs_any: tuple[Table, ...] = (),
                    group: str = "storage") -> Callable[[Draw], Draw]:
    """Register the decorated ``draw(context) -> paths`` as figure ``name`` of notebook ``group``, drawn when
    ``needs`` have rows."""

    def register(draw: Draw) -> Draw:
        figure = Figure(name, tuple(t.name for t in needs), draw, tuple(t.name for t in needs_any), group)
        FIGURES.add(name, figure, draw)
        return draw

    return register


NUMBERS_KEY = "harness-numbers"  # PNG text chunk: the figure's key numbers as JSON


def save(fig: Any, out_dir: Path, name: str, set_id: str, settings: str,
         runs: pd.DataFrame | None = None, numbers: dict[str, Any] | None = None) -> list[Path]:
    """Footer and metadata; pass the runs the figure was made from so their board emulation shows, and the
    numbers it shows (r, n, means) so a figure regenerated elsewhere can be checked against this one (rounded to
    6 significant digits, non-finite ones as null: the same set gives the same JSON)."""
    note = emulation_note(runs)
    settings = f"{settings} · {note}" if note else settings
    # the footer goes below everything already drawn (rotated tick labels reach under the axes)
    fig.draw_without_rendering()  # the layout, without rasterizing: the files below are the real drawings
    # the layout is done: freeze it, or savefig lays the figure out and draws it twice for every file
    fig.set_layout_engine("none")
    for legend in fig.legends:  # a legend anchored to the figure's box would follow the crop onto the footer
        if legend.get_bbox_to_anchor() is fig.bbox:
            legend.set_bbox_to_anchor((0, 0, 1, 1), transform=fig.transFigure)
    renderer = fig.canvas.get_renderer()
    bottom = fig.get_tightbbox(renderer).y0 / fig.get_figheight()
    fig.text(0.01, bottom - 0.01, f"{set_id} · {settings}", fontsize=6, color="0.4", ha="left", va="top")
    # the box to save, measured once: bbox_inches="tight" would draw the figure again for each file
    box = fig.get_tightbbox(renderer).padded(0.1)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        path = out_dir / f"{name}.{ext}"
        meta = {"Title": name, "Description": f"set {set_id}; {settings}"}
        if ext == "png":
            meta["Software"] = f"harness {__version__}"
            meta[NUMBERS_KEY] = json.dumps(plain(numbers or {}), sort_keys=True, default=str)
        fig.savefig(path, dpi=120, metadata=meta, bbox_inches=box)
        paths.append(path)
    plt.close(fig)
    return paths
