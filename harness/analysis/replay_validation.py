"""Replay against the engine: does the replay program (runner/native/replay.c) stand for llama.cpp's own decode?

Two checks on one result set that holds both (experiments/paper/replay-validation.yaml), pure functions of its
``runs`` and ``requests`` tables (the caller chooses which runs count: harness.results.selection):

(a) **level**: replay ``mmap`` against the stock llama.cpp decode of the same model, budget, cache condition and
    threads. Per metric (device bytes per decoded token, tok/s equivalent) the median over every replay ``mmap``
    run against the median over every request of the stock build, and the relative error
    ``replay / engine - 1``, held to a tolerance (10 % for bytes, 25 % for tok/s: issue 24's targets). Every cell
    of the stock build counts, at any value of the strategy axis: that build ignores the variable
    (patches/llama.cpp/README.md), so all its cells are the same code.
(b) **change**: per strategy, the change the replay predicts against the change the patch measures.
    predicted = median tok/s of replay(strategy) / median tok/s of replay(``mmap``);
    measured = median decode tok/s of the patched build at that strategy / median decode tok/s of the stock
    build **at the same strategy value** (the pairing of ``harness gate --across build``: each patched cell meets
    the stock cell equal in everything else, measured in the same interleaved rounds);
    error = predicted / measured - 1; the same for device bytes per token (``bytes predicted``, ``bytes
    measured``, ``bytes error``). The ``off`` pair (replay ``mmap`` against itself, the patched build with
    nothing set against the stock build) is the A/A row: predicted is 1 by construction, and its measured change
    is how far two runs of the same code differ in this set — an error below that is not a disagreement.

Medians because one stalled request (a page-cache refill, another process's burst) should not move a cell, as in
harness.analysis.ratios; ratios of medians because each side is one number whatever the unit, as asv compares
benchmarks. The pairs (engine strategy value -> replay strategy) follow issue 24: ``off``/stock = ``mmap``,
``willneed`` (0001) = ``mmap-willneed``, ``pread-<B>`` (0002) = ``pread``, ``async-<N>`` (0003) = ``prefetch``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

BYTES_TOLERANCE = 0.10  # issue 24: device bytes per token within 10 %
TPS_TOLERANCE = 0.25  # issue 24: tok/s equivalent within 25 %
REPLAY_STRATEGY = "replay_strategy"  # the replay step's requests column naming the program's --strategy
BYTES = "decode_dev_read_bytes_per_token"
TPS = "decode_tps"
TOKENS = "decode_tokens"  # decoded tokens of one request (engine) or one replay run


@dataclass(frozen=True)
class StrategyPair:
    """One engine strategy (a value of the experiment's strategy axis, HARNESS_EXPERT_STRATEGY) and the replay
    strategy that reads as it does."""

    engine: str
    replay: str


DEFAULT_PAIRS = (StrategyPair("off", "mmap"), StrategyPair("willneed", "mmap-willneed"),
                 StrategyPair("pread-131072", "pread"), StrategyPair("async-4", "prefetch"))


@dataclass(frozen=True)
class Sides:
    """How the tables name the two sides: the engine's step and its axes, the replay's step."""

    engine_step: str = "llama-server"
    replay_step: str = "replay"
    axis: str = "strategy"  # the engine's strategy axis
    build_axis: str = "build"
    stock_build: str = "base"


def observations(runs: pd.DataFrame, requests: pd.DataFrame, sides: Sides = Sides()) -> pd.DataFrame:
    """One row per request of an ok run of either side: ``side`` (engine | replay), ``build``, ``strategy`` (the
    engine's axis value, or the replay's --strategy), ``round``, tok/s and device bytes per token."""
    columns = ["side", "build", "strategy", "round", TPS, BYTES, TOKENS]
    if runs.empty or requests.empty or TPS not in requests or "step" not in runs:
        return pd.DataFrame(columns=columns)
    ok = runs[runs["status"] == "ok"] if "status" in runs else runs
    keep = ["run_id", "step", *[c for c in ("round", sides.axis, sides.build_axis) if c in ok]]
    req_cols = ["run_id", TPS, *[c for c in (BYTES, REPLAY_STRATEGY, TOKENS) if c in requests]]
    data = requests[req_cols].merge(ok[keep], on="run_id", how="inner")
    engine = data[data["step"] == sides.engine_step]
    replay = data[data["step"] == sides.replay_step]
    frames = [pd.DataFrame({
        "side": "engine", "build": _column(engine, sides.build_axis), "strategy": _column(engine, sides.axis),
        "round": _column(engine, "round"), TPS: engine[TPS], BYTES: _column(engine, BYTES),
        TOKENS: _column(engine, TOKENS)}),
        pd.DataFrame({
            "side": "replay", "build": None, "strategy": _column(replay, REPLAY_STRATEGY),
            "round": _column(replay, "round"), TPS: replay[TPS], BYTES: _column(replay, BYTES),
            TOKENS: _column(replay, TOKENS)})]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=columns)
    out = pd.concat(frames, ignore_index=True)[columns]
    out["strategy"] = out["strategy"].astype("string")
    out["build"] = out["build"].astype("string")
    return out


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame else pd.Series(None, index=frame.index, dtype=object)


def _median(values: pd.Series) -> tuple[float, int]:
    finite = pd.to_numeric(values, errors="coerce").dropna()
    finite = finite[finite.map(math.isfinite)]
    return (float(finite.median()) if len(finite) else math.nan), len(finite)


def _ratio(a: float, b: float) -> float:
    return a / b if math.isfinite(a) and math.isfinite(b) and b > 0 else math.nan


def stock(obs: pd.DataFrame, sides: Sides = Sides()) -> pd.DataFrame:
    """The stock build's requests, at every value of the strategy axis (that build ignores it)."""
    return obs[(obs["side"] == "engine") & (obs["build"] == sides.stock_build)]


def replayed(obs: pd.DataFrame, strategy: str) -> pd.DataFrame:
    return obs[(obs["side"] == "replay") & (obs["strategy"] == strategy)]


def level_agreement(obs: pd.DataFrame, sides: Sides = Sides(), replay_strategy: str = "mmap") -> pd.DataFrame:
    """Check (a): per metric, the stock engine's median, replay ``mmap``'s median, the error and the verdict
    (empty when either side has no rows)."""
    engine, replay = stock(obs, sides), replayed(obs, replay_strategy)
    if engine.empty or replay.empty:
        return pd.DataFrame()
    rows = []
    for metric, column, tolerance, scale in (("device MB per token", BYTES, BYTES_TOLERANCE, 1e-6),
                                             ("tok/s (equivalent)", TPS, TPS_TOLERANCE, 1.0)):
        e, n_e = _median(engine[column])
        r, n_r = _median(replay[column])
        error = _ratio(r, e) - 1
        rows.append({"metric": metric, "engine (stock)": e * scale, f"replay {replay_strategy}": r * scale,
                     "error": error, "tolerance": tolerance,
                     "within": bool(abs(error) <= tolerance) if math.isfinite(error) else None,
                     "n engine": n_e, "n replay": n_r})
    return pd.DataFrame(rows)


def token_mismatch(obs: pd.DataFrame, sides: Sides = Sides(), replay_strategy: str = "mmap") -> str | None:
    """A sentence when a cold request of the stock engine and a cold replay run decode different numbers of tokens
    (medians): a cold run's device bytes per token fall as its cache fills, so the level check compares like with
    like only at the same count (on the demo model 64 replayed tokens read 14 % less per token than 32)."""
    engine, _ = _median(stock(obs, sides)[TOKENS])
    replay, _ = _median(replayed(obs, replay_strategy)[TOKENS])
    if not (math.isfinite(engine) and math.isfinite(replay)) or engine == replay:
        return None
    return (f"the stock engine decodes {engine:g} tokens per cold request and replay {replay_strategy} {replay:g} per "
            f"cold run: bytes per token fall as a cold run's cache fills, so give the replay step tokens: equal to "
            f"the requests' n_predict")


def strategy_changes(obs: pd.DataFrame, pairs: Sequence[StrategyPair] = DEFAULT_PAIRS,
                     sides: Sides = Sides(), reference: str = "mmap") -> pd.DataFrame:
    """Check (b): one row per pair that has data on both sides: the replay's predicted change, the patch's
    measured change (patched build ÷ stock build at the same strategy value) and the error."""
    ref, n_ref = _median(replayed(obs, reference)[TPS])
    engine = obs[obs["side"] == "engine"]
    patched = engine[engine["build"].notna() & (engine["build"] != sides.stock_build)]
    base_rows = stock(obs, sides)
    rows = []
    for pair in pairs:
        rep, n_rep = _median(replayed(obs, pair.replay)[TPS])
        base, n_base = _median(base_rows.loc[base_rows["strategy"] == pair.engine, TPS])
        new, n_new = _median(patched.loc[patched["strategy"] == pair.engine, TPS])
        if not (n_rep and n_ref and n_base and n_new):
            continue
        predicted, measured = _ratio(rep, ref), _ratio(new, base)
        rows.append({"strategy": pair.engine, "replay": pair.replay, "replay tok/s": rep,
                     f"replay {reference} tok/s": ref, "predicted": predicted, "stock tok/s": base,
                     "patched tok/s": new, "measured": measured, "error": _ratio(predicted, measured) - 1,
                     **_bytes_change(obs, base_rows, patched, pair, reference),
                     "n replay": n_rep, "n stock": n_base, "n patched": n_new})
    return pd.DataFrame(rows)


def _bytes_change(obs: pd.DataFrame, stock_rows: pd.DataFrame, patched: pd.DataFrame, pair: StrategyPair,
                  reference: str) -> dict[str, float]:
    """The same pairing on device bytes per token: what the strategy changes in the I/O alone, which a loaded
    CPU moves less than tok/s (only through other readers' bytes in a longer window)."""
    predicted = _ratio(_median(replayed(obs, pair.replay)[BYTES])[0], _median(replayed(obs, reference)[BYTES])[0])
    measured = _ratio(_median(patched.loc[patched["strategy"] == pair.engine, BYTES])[0],
                      _median(stock_rows.loc[stock_rows["strategy"] == pair.engine, BYTES])[0])
    return {"bytes predicted": predicted, "bytes measured": measured, "bytes error": _ratio(predicted, measured) - 1}
