"""Plan expansion: cartesian matrix, cache conditions, interleaved rounds, templating."""

from __future__ import annotations

from pathlib import Path

from harness.campaign.plan import build_plan
from harness.campaign.resolve import load_resolved

EXP = """\
name: order
files:
  data: {create: 1M}
matrix:
  bs: [64k, 1M]
  seed: [1, 2]
cache: both
rounds: 2
steps:
  - read: {file: data, bs: "{bs}", seed: "{seed}"}
"""


def plan_of(tmp_path: Path, text: str):  # noqa: ANN201
    path = tmp_path / "e.yaml"
    path.write_text(text)
    return build_plan(load_resolved(path))


def test_cartesian_product_times_cache_times_rounds(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, EXP)
    assert len(plan.runs) == 2 * 2 * 2 * 2
    cells = {(r.params["bs"], r.params["seed"], r.cache) for r in plan.runs}
    assert len(cells) == 8


def test_rounds_interleave_a_b_a_b(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, EXP)
    keys = [(r.params["bs"], r.params["seed"], r.cache) for r in plan.runs]
    first, second = keys[:8], keys[8:]
    assert first == second, "round 2 repeats round 1's order"
    assert [r.round for r in plan.runs] == [1] * 8 + [2] * 8
    # never all-A-then-all-B: consecutive runs differ
    assert all(a != b for a, b in zip(keys, keys[1:], strict=False))


def test_repeat_is_back_to_back_inside_a_round(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, EXP.replace("rounds: 2", "rounds: 1\nrepeat: 3"))
    keys = [(r.params["bs"], r.params["seed"], r.cache) for r in plan.runs]
    assert keys[:3] == [keys[0]] * 3 and keys[3] != keys[0]
    assert [r.repeat for r in plan.runs[:4]] == [1, 2, 3, 1]


def test_templates_keep_types_and_render_into_config(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, EXP)
    configs = {(r.params["bs"], r.params["seed"]): r.cell.config for r in plan.runs}
    assert configs[("1M", 2)].bs == "1M" and configs[("1M", 2)].seed == 2
    assert isinstance(configs[("64k", 1)].seed, int)


def test_run_ids_unique_ordered_and_readable(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, EXP + "  - read: {file: data, pattern: rand}\n")
    ids = [r.run_id for r in plan.runs]
    assert len(set(ids)) == len(ids) and ids == sorted(ids)
    assert ids[0] == "0001-read1-64k-1-cold-r1"
    # every step runs for every matrix cell; two steps of one kind are numbered
    assert ids[8] == "0009-read2-64k-1-cold-r1" and len(ids) == 2 * 16


def test_estimate_counts_every_run(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, EXP)
    assert plan.estimate_s == sum(r.estimate_s for r in plan.runs) > 0


def test_step_over_and_cache_narrow_a_step(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, EXP + "  - fio: {file: data, jobs: [randread-64k-qd1], runtime_s: 1}\n"
                                   "    over: [seed]\n    cache: cold\n")
    fio = [r for r in plan.runs if r.step == "fio"]
    # 2 seeds x 1 cache x 2 rounds; bs stays at the baseline cell's value (the first)
    assert len(fio) == 4
    assert {r.params["bs"] for r in fio} == {"64k"} and {r.params["seed"] for r in fio} == {1, 2}
    assert {r.cache for r in fio} == {"cold"}


def test_step_over_unknown_key_is_an_error_with_line(tmp_path: Path) -> None:
    import pytest

    from harness.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        plan_of(tmp_path, EXP + "  - fio: {file: data}\n    over: [threads]\n")
    assert info.value.line == 12 and info.value.field == "steps[1].over"
