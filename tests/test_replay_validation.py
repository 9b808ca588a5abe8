"""Replay against the engine (harness.analysis.replay_validation and report.md's section), on hand-made tables:
which runs meet which, the medians, the errors against issue 24's tolerances."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.replay_validation import (
    BYTES,
    DEFAULT_PAIRS,
    REPLAY_STRATEGY,
    TOKENS,
    TPS,
    level_agreement,
    observations,
    strategy_changes,
    token_mismatch,
)
from harness.figures.replay_report import replay_validation_lines
from harness.results.loader import ResultSet

MIB = 1 << 20


def _tables(engine: dict[tuple[str, str], list[float]], replay: dict[str, list[float]],
            engine_bytes: float = 40 * MIB, replay_bytes: float = 42 * MIB) -> tuple[pd.DataFrame, pd.DataFrame]:
    """runs and requests: per (build, strategy) a llama-server run with one request per tok/s given; per replay
    strategy one replay run per tok/s given (the replay step's one row per run)."""
    runs, requests = [], []
    for (build, strategy), values in engine.items():
        run_id = f"e-{build}-{strategy}"
        runs.append({"run_id": run_id, "step": "llama-server", "status": "ok", "round": 1, "build": build,
                     "strategy": strategy, "engine": "llama.cpp"})
        requests += [{"run_id": run_id, TPS: v, BYTES: engine_bytes} for v in values]
    for strategy, values in replay.items():
        for i, v in enumerate(values):
            run_id = f"r-{strategy}-{i}"
            runs.append({"run_id": run_id, "step": "replay", "status": "ok", "round": i + 1, "build": None,
                         "strategy": None, "engine": "replay"})
            requests.append({"run_id": run_id, TPS: v, BYTES: replay_bytes, REPLAY_STRATEGY: strategy})
    return pd.DataFrame(runs), pd.DataFrame(requests)


ENGINE = {("base", "off"): [10.0, 11.0, 12.0], ("strategies", "off"): [10.0, 12.0, 14.0],
          ("base", "willneed"): [9.0, 10.0, 11.0], ("strategies", "willneed"): [14.0, 15.0, 16.0],
          ("base", "pread-131072"): [10.0], ("strategies", "pread-131072"): [5.0]}
REPLAY = {"mmap": [11.0, 13.0], "mmap-willneed": [18.0, 18.0], "pread": [6.0, 6.0]}


def test_level_check_pools_every_stock_cell_and_holds_each_metric_to_its_tolerance() -> None:
    runs, requests = _tables(ENGINE, REPLAY)
    level = level_agreement(observations(runs, requests)).set_index("metric")
    tps = level.loc["tok/s (equivalent)"]
    # stock = the base build at every strategy value: 10 11 12 9 10 11 10 -> median 10; replay mmap median 12
    assert tps["engine (stock)"] == 10.0 and tps["replay mmap"] == 12.0 and tps["n engine"] == 7
    assert tps["error"] == pytest.approx(0.2) and tps["within"]
    size = level.loc["device MB per token"]
    assert size["error"] == pytest.approx(0.05) and size["within"]
    assert size["engine (stock)"] == pytest.approx(40 * MIB / 1e6)
    wide = level_agreement(observations(*_tables(ENGINE, REPLAY, replay_bytes=48 * MIB))).set_index("metric")
    assert wide.loc["device MB per token", "error"] == pytest.approx(0.2)
    assert not wide.loc["device MB per token", "within"]


def test_each_strategy_is_predicted_by_replay_ratio_and_measured_against_the_stock_cell_of_its_value() -> None:
    changes = strategy_changes(observations(*_tables(ENGINE, REPLAY))).set_index("strategy")
    assert list(changes.index) == ["off", "willneed", "pread-131072"]  # async-4: no rows on either side, no row
    willneed = changes.loc["willneed"]
    assert willneed["predicted"] == pytest.approx(18.0 / 12.0)  # replay(mmap-willneed) / replay(mmap)
    assert willneed["measured"] == pytest.approx(15.0 / 10.0)  # patched willneed / stock willneed, not stock off
    assert willneed["error"] == pytest.approx((18 / 12) / 1.5 - 1)
    off = changes.loc["off"]  # the A/A row: predicted 1 by construction, measured the noise
    assert off["predicted"] == 1.0 and off["measured"] == pytest.approx(12.0 / 11.0)
    pread = changes.loc["pread-131072"]
    assert pread["predicted"] == pytest.approx(0.5) and pread["measured"] == pytest.approx(0.5)
    assert pread["error"] == pytest.approx(0.0)
    assert pread["bytes predicted"] == pytest.approx(1.0) and pread["bytes measured"] == pytest.approx(1.0)
    assert (changes["n patched"] > 0).all()


def test_the_bytes_change_pairs_like_the_tok_s_change() -> None:
    runs, requests = _tables(ENGINE, REPLAY)
    willneed_patched = requests["run_id"] == "e-strategies-willneed"
    willneed_replay = requests["run_id"].str.startswith("r-mmap-willneed")
    requests.loc[willneed_patched, BYTES] = 30 * MIB  # the patched engine reads 25 % fewer bytes with WILLNEED
    requests.loc[willneed_replay, BYTES] = 21 * MIB  # the replay predicts 50 % fewer
    row = strategy_changes(observations(runs, requests)).set_index("strategy").loc["willneed"]
    assert row["bytes measured"] == pytest.approx(0.75) and row["bytes predicted"] == pytest.approx(0.5)
    assert row["bytes error"] == pytest.approx(0.5 / 0.75 - 1)


def test_failed_runs_and_missing_sides_give_no_numbers() -> None:
    runs, requests = _tables(ENGINE, REPLAY)
    failed = runs.assign(status=runs["status"].where(runs["step"] != "replay", "failed"))
    obs = observations(failed, requests)
    assert level_agreement(obs).empty and strategy_changes(obs).empty
    only_engine = observations(*_tables(ENGINE, {}))
    assert level_agreement(only_engine).empty


def test_the_default_pairs_follow_the_patch_series() -> None:
    assert {(p.engine, p.replay) for p in DEFAULT_PAIRS} == {
        ("off", "mmap"), ("willneed", "mmap-willneed"), ("pread-131072", "pread"), ("async-4", "prefetch")}


def test_report_section_appears_only_with_both_sides(tmp_path: Path) -> None:
    runs, requests = _tables(ENGINE, REPLAY)
    both = ResultSet(tmp_path, {"set_id": "s", "matrix": {}}, {"runs": runs, "requests": requests})
    lines = replay_validation_lines(both)
    text = "\n".join(lines)
    assert "## Replay against the engine" in text
    assert "| willneed" in text and "mmap-willneed" in text and "A/A" in text
    engine_only = runs[runs["step"] != "replay"]
    alone = ResultSet(tmp_path, {"set_id": "s", "matrix": {}}, {"runs": engine_only, "requests": requests})
    assert replay_validation_lines(alone) == []
    perturbed = runs.assign(perturbed=runs["step"] == "replay")
    hidden = ResultSet(tmp_path, {"set_id": "s", "matrix": {}}, {"runs": perturbed, "requests": requests})
    assert "no usable runs" in "\n".join(replay_validation_lines(hidden))


def test_the_validation_experiment_runs_every_pair_on_both_sides_in_each_round() -> None:
    from harness.campaign.plan import build_plan
    from harness.config.experiment import load_experiment

    plan = build_plan(load_experiment(Path(__file__).parents[1] / "experiments/paper/replay-validation.yaml"))
    for round_ in (1, 2):
        runs = [r for r in plan.runs if r.round == round_]
        replays = {r.cell.config.strategy for r in runs if r.step == "replay"}
        engine = {(r.params["build"], r.params["strategy"]) for r in runs if r.step == "llama-server"}
        assert replays == {p.replay for p in DEFAULT_PAIRS}
        assert engine == {(b, p.engine) for p in DEFAULT_PAIRS for b in ("base", "strategies")}
        threads = {r.cell.config.threads for r in runs if r.step == "replay"}
        assert threads == {2} and all("2" in r.cell.config.args for r in runs if r.step == "llama-server")
        # like with like: one cold replay run decodes as many tokens as one cold request
        tokens = {r.cell.config.tokens for r in runs if r.step == "replay"}
        assert tokens == {r.cell.config.n_predict for r in runs if r.step == "llama-server"}


def test_a_replay_of_another_token_count_than_the_requests_is_called_out(tmp_path: Path) -> None:
    runs, requests = _tables(ENGINE, REPLAY)
    replay = requests[REPLAY_STRATEGY].notna()
    same = requests.assign(**{TOKENS: 31})
    assert token_mismatch(observations(runs, same)) is None
    other = same.copy()
    other.loc[replay, TOKENS] = 63
    sentence = token_mismatch(observations(runs, other))
    assert sentence is not None and "31 tokens per cold request" in sentence and "mmap 63" in sentence
    report = ResultSet(tmp_path, {"set_id": "s", "matrix": {}}, {"runs": runs, "requests": other})
    assert "Not like with like" in "\n".join(replay_validation_lines(report))
