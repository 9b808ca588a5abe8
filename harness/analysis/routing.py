"""How a model routes, from BigMoeOnEdge route-trace rows (``harness.parsers.bmoe_route``): per MoE layer,
over a window of decoded tokens,

* ``distinct_experts``: experts chosen at least once (``uniform_distinct``: what independent uniform choices
  of ``n_expert_used`` of ``n_expert`` per token would give over as many tokens, for scale);
* ``top4_share``: the share of all selections that went to the layer's four most chosen experts;
* ``reuse_prev``: per token, the fraction of its experts the previous token (same layer) also chose, averaged;
* ``effective_experts``: exp(entropy) of the layer's selection counts; n_expert for a perfectly even spread,
  fewer the more concentrated (a finite window caps it below n_expert even for uniform routing).

The share and the entropy are ``harness.analysis.trace_stats``'s (which has them, reuse distances and LRU hit rates
for any trace, this one converted by ``harness.traces.bmoe``).

Figures depend on the window's length, so compare traces over the same number of decode tokens (``steps``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.analysis.trace_stats import TOP, effective_experts, top_share

COLUMNS = ["layer", "tokens", "distinct_experts", "uniform_distinct", "top4_share", "reuse_prev",
           "effective_experts"]


def decode_window(rows: list[dict[str, Any]] | pd.DataFrame, steps: int | None = None,
                  turn: int | None = None) -> pd.DataFrame:
    """Decode-phase routings of one turn (the first one by default), limited to its first ``steps`` tokens."""
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    if frame.empty:
        return frame
    decode = frame[frame["phase"] == 1]
    if decode.empty:
        return decode
    decode = decode[decode["turn"] == (decode["turn"].min() if turn is None else turn)]
    if steps is not None:
        decode = decode[decode["step"].isin(sorted(decode["step"].unique())[:steps])]
    return decode


def _reuse(window: pd.DataFrame) -> pd.Series:
    """Per layer: mean over tokens (each whose previous position was routed too) of the share of its experts
    that the previous token also chose."""
    chosen = window[["layer", "step", "expert"]].drop_duplicates()
    earlier = chosen.assign(step=chosen["step"] + 1)
    steps = chosen[["layer", "step"]].drop_duplicates()
    with_prev = steps.merge(earlier[["layer", "step"]].drop_duplicates(), on=["layer", "step"])
    marked = chosen.merge(earlier.assign(again=True), on=["layer", "step", "expert"], how="left")
    marked = marked.merge(with_prev, on=["layer", "step"])
    per_token = marked.assign(again=marked["again"].notna()).groupby(["layer", "step"])["again"].mean()
    return per_token.groupby(level="layer").mean()


def routing_by_layer(window: pd.DataFrame) -> pd.DataFrame:
    """One row per MoE layer of ``window`` (see the module text for the columns)."""
    if window.empty:
        return pd.DataFrame(columns=COLUMNS)
    n_expert, used = int(window["n_expert"].iloc[0]), int(window["n_expert_used"].iloc[0])
    counts = window.groupby(["layer", "expert"]).size()
    by_layer = {int(layer): group.to_numpy() for layer, group in counts.groupby(level="layer")}
    tokens = window.groupby("layer")["step"].nunique()
    out = pd.DataFrame({
        "tokens": tokens, "distinct_experts": pd.Series({k: len(v) for k, v in by_layer.items()}),
        "uniform_distinct": n_expert * (1 - (1 - used / n_expert) ** tokens),
        "top4_share": pd.Series({k: top_share(v, TOP) for k, v in by_layer.items()}),
        "reuse_prev": _reuse(window),
        "effective_experts": pd.Series({k: effective_experts(v) for k, v in by_layer.items()}),
    })
    return out.rename_axis("layer").reset_index()[COLUMNS]


def routing_summary(window: pd.DataFrame) -> dict[str, Any]:
    """The trace's facts and each per-layer figure's mean, min and max over layers."""
    per_layer = routing_by_layer(window)
    if per_layer.empty:
        return {"layers": 0}
    first = window.iloc[0]
    summary: dict[str, Any] = {"arch": first.get("arch"), "n_expert": int(first["n_expert"]),
                               "n_expert_used": int(first["n_expert_used"]), "layers": len(per_layer),
                               "tokens": int(per_layer["tokens"].max())}
    for column in COLUMNS[2:]:
        values = per_layer[column].astype(float)
        summary[column] = {"mean": float(values.mean()), "min": float(values.min()), "max": float(values.max())}
    return summary
