"""Trace statistics (popularity, reuse distance, LRU hit rates) checked by hand on a tiny trace and against the
route-trace figures of harness.analysis.routing, and BigMoeOnEdge route traces read as traces."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.routing import decode_window, routing_by_layer
from harness.analysis.trace_stats import cache_stats, layer_stats, reuse_distances, summary, trace_report
from harness.parsers.bmoe_route import parse_bmoe_route
from harness.traces.bmoe import load_trace, read_route_trace
from harness.traces.model import Trace, TraceError, write_trace
from harness.traces.synth import synth_trace
from tests.helpers import DATA

ROUTES = DATA / "bmoe" / "routes"
QWEN = ROUTES / "qwen-decode6.route.csv"


def _tiny() -> Trace:
    # one layer, 4 experts, 2 used: expert 0 at tokens 0, 1, 3; expert 1 at 0, 2, 3; 2 at 1; 3 at 2
    return Trace(1, 4, 2, np.array([[[0, 1]], [[0, 2]], [[3, 1]], [[0, 1]]], dtype=np.int32), "hand")


def test_popularity_and_reuse_distance_of_a_hand_checked_trace() -> None:
    assert reuse_distances(_tiny(), 0).tolist() == [0, 0, 1, 0, 0, 2, 2, 1]  # 0 marks a first selection
    stats = layer_stats(_tiny(), 0)
    assert (stats.tokens, stats.distinct_experts) == (4, 4)
    assert stats.top4_share == 1.0 and stats.topk_share == 6 / 8  # experts 0 and 1 took 6 of the 8 selections
    entropy = -(2 * 3 / 8 * math.log(3 / 8) + 2 * 1 / 8 * math.log(1 / 8))
    assert stats.effective_experts == pytest.approx(math.exp(entropy))
    assert (stats.reuse_median, stats.reuse_p90) == (1.5, pytest.approx(2.0))  # over the reuses 1, 2, 2, 1
    assert (stats.reuse_d1_share, stats.never_reused) == (2 / 8, 4 / 8)


def test_a_layer_that_never_reuses_has_no_reuse_distance() -> None:
    trace = Trace(1, 4, 2, np.array([[[0, 1]], [[2, 3]]], dtype=np.int32))
    stats = layer_stats(trace, 0)
    assert (stats.reuse_median, stats.reuse_p90, stats.never_reused) == (None, None, 1.0)
    assert "reuse_median" not in summary([stats])  # a figure no layer has is left out, not reported as 0


def test_figures_agree_with_the_route_trace_analysis_on_a_real_trace() -> None:
    window = decode_window(parse_bmoe_route(QWEN.read_bytes()))
    expected = routing_by_layer(window).set_index("layer")
    trace = read_route_trace(QWEN)
    for stats in (layer_stats(trace, layer) for layer in range(trace.n_layer)):
        row = expected.loc[stats.layer]
        assert stats.distinct_experts == row["distinct_experts"]
        assert stats.top4_share == pytest.approx(row["top4_share"])
        assert stats.effective_experts == pytest.approx(row["effective_experts"])


def test_skewed_routing_concentrates_and_reuse_shortens_distances() -> None:
    uniform = summary([layer_stats(synth_trace(4, 64, 4, 400, seed=1), layer) for layer in range(4)])
    zipf = summary([layer_stats(synth_trace(4, 64, 4, 400, s=1.25, seed=1), layer) for layer in range(4)])
    reusing = summary([layer_stats(synth_trace(4, 64, 4, 400, reuse=0.8, seed=1), layer) for layer in range(4)])
    assert zipf["top4_share"]["mean"] > 3 * uniform["top4_share"]["mean"]
    assert zipf["effective_experts"]["mean"] < 0.6 * uniform["effective_experts"]["mean"]
    assert uniform["effective_experts"]["mean"] > 0.9 * 64
    assert reusing["reuse_d1_share"]["mean"] > 0.6 > uniform["reuse_d1_share"]["mean"]


def test_lru_hit_rate_grows_with_the_cache_and_a_cache_of_everything_misses_only_first_touches() -> None:
    trace = synth_trace(3, 32, 4, 200, s=1.0, seed=2)
    rates = [c.hit_rate for c in cache_stats(trace, [4, 12, 48, 3 * 32])]
    assert rates == sorted(rates) and rates[0] < rates[-1]
    firsts = sum(layer_stats(trace, layer).distinct_experts for layer in range(3))
    assert rates[-1] == pytest.approx(1 - firsts / (200 * 3 * 4))


def test_cache_in_bytes_counts_each_layers_expert_size() -> None:
    # layer 0 (1000 B experts) always routes expert 0, layer 1 (3000 B) alternates 0 and 1: a 4000 B LRU keeps
    # layer 0's expert and the last of layer 1's, so layer 0 hits from the second token and layer 1 never does
    tokens = 10
    trace = Trace(2, 2, 1, np.array([[[0], [t % 2]] for t in range(tokens)], dtype=np.int32))
    (stats,) = cache_stats(trace, [4000], {0: 1000, 1: 3000})
    assert (stats.unit, stats.capacity_experts) == ("bytes", 2.0)  # 4000 B of 2000 B experts on average
    assert (stats.hits, stats.accesses) == (tokens - 1, 2 * tokens)
    assert stats.byte_hit_rate == pytest.approx((tokens - 1) * 1000 / (tokens * 4000))


def test_route_trace_becomes_the_decode_tokens_of_one_turn_in_slot_order() -> None:
    trace = load_trace(QWEN)
    assert (trace.tokens, trace.n_layer, trace.n_expert, trace.n_used) == (6, 48, 128, 6)
    assert trace.experts[0, 0].tolist() == [60, 49, 78, 50, 106, 32]  # step 28, layer 0, slots 0..5 of the file
    assert trace.source == "bmoe-route:qwen-decode6.route.csv:turn=0"
    report = trace_report(trace, [288])
    assert report["trace"]["tokens"] == 6 and len(report["layers"]) == 48 and report["cache"][0]["accesses"] == 1728


def test_a_route_trace_missing_a_layers_row_names_step_layer_and_slot(tmp_path: Path) -> None:
    lines = QWEN.read_text().splitlines()
    cut = tmp_path / "cut.route.csv"
    cut.write_text("\n".join(line for line in lines if not line.startswith("0,1,29,3,2,")) + "\n")
    with pytest.raises(TraceError, match=r"cut.route.csv: decode step 29 has no row for layer 3 slot 2"):
        load_trace(cut)


def test_load_trace_reads_a_harness_trace_and_refuses_anything_else_by_its_first_line(tmp_path: Path) -> None:
    path = tmp_path / "t.trace"
    write_trace(_tiny(), path)
    assert load_trace(path).experts.tolist() == _tiny().experts.tolist()
    other = tmp_path / "x.csv"
    other.write_text("turn,phase\n")
    with pytest.raises(TraceError, match=r"x.csv:1: not a routing trace"):
        load_trace(other)
    broken = tmp_path / "b.route.csv"
    broken.write_text("# route_trace v1\nturn,phase,step,layer,slot,expert\n")
    with pytest.raises(TraceError, match=r"b.route.csv:2: no '# model=\.\.\."):
        load_trace(broken)
