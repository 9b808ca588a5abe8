"""The routing-trace format every part reads (harness/traces/model.py) and the synthetic traces (synth.py)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.traces.model import Trace, TraceError, parse_trace
from harness.traces.synth import synth_trace


def test_a_trace_round_trips_through_its_text() -> None:
    trace = synth_trace(3, 16, 2, 5, s=1.0, reuse=0.5, seed=3)
    back = parse_trace(trace.to_text())
    assert (back.experts == trace.experts).all()
    assert (back.n_layer, back.n_expert, back.n_used, back.tokens) == (3, 16, 2, 5)
    assert back.source == "synth:zipf:1:reuse=0.5:seed=3"


@pytest.mark.parametrize("body, message", [
    ("0 0 1 2\n0 1 1\n", "t.txt:3: expected token, layer and 2 experts, got 3 numbers"),
    ("0 0 1 1\n", "t.txt:2: expected 2 distinct experts in 0..7"),
    ("0 0 1 9\n", "t.txt:2: expected 2 distinct experts in 0..7"),
    ("0 1 1 2\n", "t.txt:2: expected token 0 layer 0"),
    ("0 0 1 2\n", "t.txt: the trace ends inside a token (1 lines for 2 layers)"),
    ("0 0 a 2\n", "t.txt:2: expected integers"),
])
def test_a_malformed_trace_is_named_by_file_and_line(body: str, message: str) -> None:
    with pytest.raises(TraceError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        parse_trace("# harness-trace v1 n_layer=2 n_expert=8 n_used=2\n" + body, "t.txt")
    with pytest.raises(TraceError, match="t.txt:1: not a harness trace"):
        parse_trace("token,layer\n", "t.txt")


def test_zipf_concentrates_and_reuse_repeats_the_previous_token() -> None:
    uniform = synth_trace(4, 64, 4, 400, seed=1)
    zipf = synth_trace(4, 64, 4, 400, s=1.25, seed=1)
    reused = synth_trace(4, 64, 4, 400, reuse=0.5, seed=1)

    def top4_share(trace: Trace) -> float:
        counts = np.bincount(trace.experts[:, 0].ravel(), minlength=64)
        return float(np.sort(counts)[-4:].sum() / counts.sum())

    def kept(trace: Trace) -> float:
        same = [len(set(trace.experts[t, 0]) & set(trace.experts[t - 1, 0])) for t in range(1, trace.tokens)]
        return float(np.mean(same)) / 4

    assert top4_share(uniform) < 0.15 < 0.4 < top4_share(zipf)  # uniform: 4/64 = 6 %
    assert kept(uniform) < 0.15 and 0.4 < kept(reused) < 0.65   # a slot keeps a previous expert half the time
    assert (synth_trace(4, 64, 4, 10, s=1.25, seed=1).experts == zipf.experts[:10]).all()  # seeded


def test_a_trace_of_another_model_is_refused() -> None:
    with pytest.raises(TraceError, match="replay: the trace has n_expert=16, the model 64"):
        synth_trace(2, 16, 2, 3).check_fits(2, 64, 2, "replay")


def test_an_lru_hits_what_it_still_holds() -> None:
    from harness.traces.lru import lru_hits
    # one layer, one expert per token: 0 1 0 2 0 1
    trace = Trace(1, 4, 1, np.array([0, 1, 0, 2, 0, 1], dtype=np.int32).reshape(6, 1, 1))
    assert lru_hits(trace, 2).hits == 2          # 0 hit twice; 1 was evicted by 2 before it came back
    assert lru_hits(trace, 3).hits == 3          # everything fits after the first touches
    assert lru_hits(trace, 1).hits == 0
    sized = lru_hits(trace, 300, {0: 100})       # three experts of 100 bytes fit in 300
    assert (sized.hits, sized.bytes_hit, sized.byte_hit_rate) == (3, 300, 0.5)
    assert lru_hits(trace, 3, warmup_tokens=3).accesses == 3
    assert lru_hits(synth_trace(2, 8, 2, 50, seed=0), 16).hit_rate > 0.9  # the whole model fits: cold misses only
