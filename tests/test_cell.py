"""CellKey: the typed key of a cell, whose label is the ``variant`` string sets have always carried, and whose
parse() reads only what a user types for ``--baseline-variant`` / ``--variant``."""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.results.cell import CellKey
from harness.results.variants import variant_label

PARAMS = ["read_ahead_kb", "threads"]
ROW = {"read_ahead_kb": 8192, "threads": 1, "cache": "cold"}


@pytest.mark.parametrize(("row", "label"), [
    ({**ROW, "engine": "bigmoeonedge", "step_label": "bmoe-cache256"},
     "bmoe-cache256 read_ahead_kb=8192 threads=1 cold"),
    ({**ROW, "engine": "llama.cpp", "step_label": "llama-server"}, "read_ahead_kb=8192 threads=1 cold"),
    ({**ROW, "engine": None, "step_label": "fio"}, "read_ahead_kb=8192 threads=1 cold"),
    ({**ROW, "engine": "bigmoeonedge", "step_label": None}, "bigmoeonedge read_ahead_kb=8192 threads=1 cold"),
    ({"threads": 2, "read_ahead_kb": float("nan"), "cache": "warm"}, "threads=2 warm"),
    ({"read_ahead_kb": 128, "threads": 2}, "read_ahead_kb=128 threads=2"),
])
def test_the_label_is_the_variant_string_sets_carry(row: dict[str, object], label: str) -> None:
    key = CellKey.of(row, PARAMS)
    assert key.label() == variant_label(row, PARAMS) == label
    assert CellKey.parse(label) == key  # what a user copies from a table names that cell again


def test_keys_are_hashable_and_ordered_by_target_engine_matrix_cache() -> None:
    a = CellKey.of({**ROW, "threads": 1}, PARAMS, target="board-a")
    b = CellKey.of({**ROW, "threads": 2}, PARAMS, target="board-a")
    c = CellKey.of({**ROW, "threads": 1}, PARAMS, target="board-b")
    warm = CellKey.of({**ROW, "cache": "warm"}, PARAMS, target="board-a")
    assert sorted([c, warm, b, a]) == [a, warm, b, c]
    assert len({a, CellKey.of(dict(ROW), PARAMS, target="board-a"), c}) == 2
    assert a.label() == c.label() and a != c  # the target is part of the key, not of the label


def test_a_typed_name_matches_every_cell_it_names_in_any_order() -> None:
    cold = CellKey.of(ROW, PARAMS)
    warm = CellKey.of({**ROW, "cache": "warm"}, PARAMS)
    wanted = CellKey.parse("threads=1 read_ahead_kb=8192")
    assert cold.matches(wanted) and warm.matches(wanted)
    assert cold.matches(CellKey.parse("cold threads=1")) and not warm.matches(CellKey.parse("cold threads=1"))
    assert not cold.matches(CellKey.parse("threads=2"))


@pytest.mark.parametrize(("text", "message"), [
    ("", "--baseline-variant: empty cell name"),
    ("threads=", "--baseline-variant: 'threads=' in 'threads=' is not key=value"),
    ("threads=1 threads=2", "--baseline-variant: threads given twice in 'threads=1 threads=2'"),
    ("cold warm", "--baseline-variant: 'cold warm' names two cache conditions (cold, warm)"),
    ("bmoe-a bmoe-b threads=1", "--baseline-variant: 'bmoe-a bmoe-b threads=1' names two engine labels"),
])
def test_a_bad_typed_name_is_one_line_naming_the_option(text: str, message: str) -> None:
    with pytest.raises(UsageError) as error:
        CellKey.parse(text, where="--baseline-variant")
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
