"""Which samples are compared with which: the one pairing ``harness compare``, ``harness gate`` and F4 share.

Samples (tidy rows with a ``cell`` column, :class:`harness.results.cell.CellKey`) are grouped by the caller's
columns (``target, step, test, metric`` for compare and gate, ``panel, target, cache`` for F4): a pair never
crosses a target, a step or test, a metric, or (the baseline rule's job) a cache condition. Every run that
:func:`harness.results.selection.usable_runs` kept contributes, whatever its round: a cell's sample is all of its
rounds. Within a group each cell is paired with the cell a *baseline rule* names, so the three callers keep the
numbers they always gave while sharing the code:

- ``compare``/``gate`` in one set: the cell a ``--baseline-variant`` names with the same engine label and cache
  condition (``harness.commands.comparison``'s rule);
- ``compare``/``gate`` across two sets: :func:`same_cell` looked up in the other set (``base=``), grouped by the
  variant too, so each cell meets itself;
- ``compare``/``gate --across AXIS`` in one set: :func:`across`, the cell equal in every part of its key but the
  axis, whose value is the baseline's (``build=base`` for ``build=strategies threads=2 cold``): the change one
  axis makes, everything else held fixed;
- F4: the experiment's ``baseline`` matrix values under the cell's cache condition on its target, *without* an
  engine label: a bmoe cell is drawn against llama.cpp's baseline, and the baseline's own row is kept
  (``with_self``, ratio 1).

The statistics stay in :mod:`harness.analysis.ratios`: this module only says which rows meet which.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import pandas as pd

from harness.results.cell import CellKey

# the baseline rule: a candidate cell and the cells its group holds (in the baseline frame) -> the baseline cell
# among them, or None when the group has none for it
BaselineRule = Callable[[CellKey, Sequence[CellKey]], CellKey | None]


@dataclass(frozen=True)
class CellPair:
    """One comparison: the group it belongs to (the values of the caller's ``by`` columns), the baseline and
    candidate cells and each one's rows of the group."""

    group: tuple[object, ...]
    base: CellKey
    cand: CellKey
    base_rows: pd.DataFrame
    cand_rows: pd.DataFrame


def same_cell(cell: CellKey, cells: Sequence[CellKey]) -> CellKey | None:
    """The rule across two sets: the same cell, when the other set measured it."""
    return cell if cell in cells else None


def across(axis: str, value: str) -> BaselineRule:
    """The rule of ``--across AXIS``: the cell equal to the candidate in target, engine label, cache condition
    and every matrix value but ``axis``'s, which is ``value``. A cell that does not vary over the axis (a step
    whose ``over:`` leaves it out) has no baseline on it."""
    def rule(cell: CellKey, cells: Sequence[CellKey]) -> CellKey | None:
        if axis not in dict(cell.matrix):
            return None
        wanted = replace(cell, matrix=tuple((k, value if k == axis else v) for k, v in cell.matrix))
        return wanted if wanted in cells else None

    return rule


def _groups(frame: pd.DataFrame, by: list[str]) -> dict[tuple[object, ...], pd.DataFrame]:
    """The frame's groups in order of first appearance (rows with a missing ``by`` value form no group)."""
    return {tuple(key) if isinstance(key, tuple) else (key,): group
            for key, group in frame.groupby(by, sort=False)}


def _by_cell(group: pd.DataFrame) -> dict[CellKey, pd.DataFrame]:
    """A group's rows per cell, cells in order of first appearance."""
    cells: list[CellKey] = list(dict.fromkeys(group["cell"]))
    return {cell: group[group["cell"] == cell] for cell in cells}


def pair_cells(cand: pd.DataFrame, by: list[str], baseline: BaselineRule, *, base: pd.DataFrame | None = None,
               wanted: Callable[[CellKey], bool] | None = None, with_self: bool = False) -> list[CellPair]:
    """Each cell of ``cand`` (those ``wanted`` keeps) against its baseline cell in the same ``by`` group of
    ``base`` (``cand`` itself when not given: one set), named by ``baseline``. A cell whose group in ``base`` is
    missing, or has no cell the rule names, is not paired; a cell that is its own baseline is paired with itself
    only ``with_self``. Pairs come in order of first appearance: group, then cell."""
    base_groups = _groups(cand if base is None else base, by)
    pairs: list[CellPair] = []
    for key, group in _groups(cand, by).items():
        if key not in base_groups:
            continue
        base_cells = _by_cell(base_groups[key])
        for cell, rows in _by_cell(group).items():
            if wanted is not None and not wanted(cell):
                continue
            base_cell = baseline(cell, list(base_cells))
            if base_cell is None or base_cell not in base_cells or (base_cell == cell and base is None
                                                                    and not with_self):
                continue
            pairs.append(CellPair(key, base_cell, cell, base_cells[base_cell], rows))
    return pairs
