"""CellKey: the typed key of a cell, whose label is the ``variant`` string sets have always carried, and whose
parse() reads only what a user types for ``--baseline-variant`` / ``--variant``."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.commands.comparison import cross_set_pairs, same_session_pairs
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


def _found(rows: list[tuple[str, str, str, float]]) -> pd.DataFrame:
    """Samples as results.samples gives them: (target, arm, cache, value) per row."""
    out = []
    for i, (target, arm, cache, value) in enumerate(rows):
        cell = CellKey.of({"arm": arm, "cache": cache}, ["arm"], target=target)
        out.append({"target": target, "variant": cell.label(), "step": "llama-server", "test": "",
                    "metric": "decode_tps", "round": 1, "value": value, "run_id": f"r{i}", "cell": cell})
    return pd.DataFrame(out)


def test_same_session_pairs_keep_the_cache_condition_and_target() -> None:
    found = _found([(t, arm, cache, 1.0) for t in ("b1", "b2") for arm in "ab" for cache in ("cold", "warm")])
    pairs = same_session_pairs(found, "arm=a")
    assert sorted((p.target, p.variant, p.baseline) for p in pairs) == [
        (t, f"arm=b {c}", f"arm=a {c}") for t in ("b1", "b2") for c in ("cold", "warm")]
    assert all(set(p.base_runs) | set(p.cand_runs) <= {(p.target, r) for r in found["run_id"]} for p in pairs)


def test_a_cell_missing_on_one_side_is_not_paired() -> None:
    base = _found([("b1", "a", "cold", 1.0), ("b1", "b", "cold", 2.0)])
    cand = _found([("b1", "a", "cold", 1.5), ("b1", "b", "warm", 2.5), ("b2", "a", "cold", 3.0)])
    pairs = cross_set_pairs(base, cand, "BASE")
    assert [(p.target, p.variant, list(p.base_values), list(p.cand_values)) for p in pairs] == \
        [("b1", "arm=a cold", [1.0], [1.5])]
    assert same_session_pairs(cand, "arm=a") == []  # no arm=a warm for arm=b warm; on b2 only the baseline


def test_one_pairing_serves_compare_and_f4_with_their_own_baseline_rule() -> None:
    """pair_cells: rounds pooled into one sample per cell, never across target or cache condition; F4's rule
    (no engine label) pairs a bmoe cell with llama.cpp's baseline, compare's wants the same engine label."""
    from harness.figures.change import f4_baseline
    from harness.results.pairing import pair_cells, same_cell

    rows = []
    for target in ("b1", "b2"):
        for engine, label in (("llama.cpp", "llama-server"), ("bigmoeonedge", "bmoe-cache256")):
            for arm in "ab":
                for rnd in (1, 2):
                    cell = CellKey.of({"arm": arm, "cache": "cold", "engine": engine, "step_label": label},
                                      ["arm"], target=target)
                    rows.append({"target": target, "cache": "cold", "variant": cell.label(), "round": rnd,
                                 "value": float(rnd), "run_id": f"{target}{label}{arm}{rnd}", "cell": cell})
    found = pd.DataFrame(rows)
    f4 = pair_cells(found, ["target", "cache"], f4_baseline({"arm": "a"}, ["arm"]), with_self=True)
    assert {(p.cand.target, p.cand.label(), p.base.label()) for p in f4} == {
        (t, v, "arm=a cold") for t in ("b1", "b2")
        for v in ("arm=a cold", "arm=b cold", "bmoe-cache256 arm=a cold", "bmoe-cache256 arm=b cold")}
    assert all(list(p.cand_rows["round"]) == [1, 2] and p.base.target == p.cand.target for p in f4)
    compare = same_session_pairs(found.assign(step="s", test="", metric="m"), "arm=a")
    assert sorted((p.target, p.variant, p.baseline) for p in compare) == [
        (t, f"{e}arm=b cold", f"{e}arm=a cold") for t in ("b1", "b2") for e in ("", "bmoe-cache256 ")]
    assert pair_cells(found[found["target"] == "b1"], ["target"], same_cell, base=found[found["target"] == "b2"]) == []
