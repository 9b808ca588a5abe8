"""Routing that means something: BigMoeOnEdge route traces parsed and measured (figures checked by hand on a real
trace's rows), and synthetic models whose router picks experts as asked (``--routing``), with ``narrow`` writing
exactly the bytes the writer wrote before routing existed."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, quants

from harness.analysis.routing import decode_window, routing_by_layer, routing_summary
from harness.campaign.prepare import synth_key
from harness.config.experiment import SynthSpec
from harness.errors import ConfigError
from harness.models.errors import ModelError
from harness.models.inspect import inspect_gguf
from harness.models.routing import (
    DEFAULT_ZIPF_S,
    parse_routing,
    plan_routing,
    planned_inclusion,
    reserved_dims,
    target_inclusion,
)
from harness.models.synth import ROUTING_KEY, synth_moe
from harness.parsers import ParseError
from harness.parsers.bmoe_route import parse_bmoe_route
from tests.helpers import BUILD_TIMEOUT_S, DATA, REPO, cli_in_process

ROUTES = DATA / "bmoe" / "routes"
TINY_SYNTH = {"layers": 2, "experts": 16, "used": 4, "hidden": 64, "ff": 32, "seed": 3}


def _rows(name: str) -> list[dict]:
    return parse_bmoe_route((ROUTES / name).read_bytes())


# --- the trace parser ---------------------------------------------------------------------------------------------

def test_route_rows_carry_the_preamble_and_every_column() -> None:
    rows = _rows("qwen-tiny.route.csv")
    assert len(rows) == 6 + 36  # one prefill cell (step 0, layer 0) and 3 decode steps x 2 layers, 6 experts each
    first = rows[0]
    assert first == {"arch": "qwen3moe", "n_layer": 48, "n_expert": 128, "n_expert_used": 6, "turn": 0, "phase": 0,
                     "step": 0, "layer": 0, "slot": 0, "expert": 49, "residency": 0, "expert_bytes": 3059712,
                     "dropped": None, "weight": 0.221297, "phase_name": "prefill"}
    hit = next(r for r in rows if (r["step"], r["layer"], r["slot"]) == (29, 1, 2))
    assert (hit["expert"], hit["residency"], hit["expert_bytes"], hit["phase_name"]) == (119, 1, 0, "decode")


def test_columns_are_read_by_name_and_nan_weight_is_null() -> None:
    trace = (b"# route_trace v1\n# model=/m x.gguf arch=qwen3moe n_layer=2 n_expert=8 n_expert_used=2\n"
             b"# layer=0 expert_bytes=10 dense_bytes=5\n"
             b"turn,phase,layer,step,slot,expert,weight,residency,expert_bytes,dropped\n"
             b"0,1,1,40,0,7,nan,0,0,1\n")
    (row,) = parse_bmoe_route(trace)
    assert (row["layer"], row["step"], row["expert"], row["weight"], row["dropped"]) == (1, 40, 7, None, 1)


@pytest.mark.parametrize(("text", "message"), [
    (b"turn,phase\n", "line 1: not a BigMoeOnEdge route trace"),
    (b"# route_trace v1\nturn,phase,step,layer,slot,expert\n0,1,2,0,0,5\n", "line 2: no '# model=... n_expert="),
    (b"# route_trace v1\n# model=m arch=a n_layer=1 n_expert=8 n_expert_used=2\n"
     b"turn,phase,step,layer,slot,expert\n0,1,2,0,0,5\n0,1,2,0\n", "line 5: row does not match"),
    (b"# route_trace v1\n# model=m arch=a n_layer=1 n_expert=8 n_expert_used=2\n"
     b"turn,phase,step,layer,slot,expert\n0,1,x,0,0,5\n", "line 4: not a number"),
])
def test_a_broken_trace_is_named_with_its_line(text: bytes, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_bmoe_route(text)


def test_harness_parse_bmoe_route_prints_the_rows() -> None:
    done = cli_in_process("parse", "bmoe-route", str(ROUTES / "qwen-tiny.route.csv"))
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 42


# --- the routing figures ------------------------------------------------------------------------------------------

def test_figures_of_a_real_trace_match_the_hand_count() -> None:
    """Layer 0 decoded {60,49,78,50,106,32}, {84,119,40,102,22,72}, {58,32,78,72,49,48}: 14 distinct, four
    experts twice (8 of 18 selections), reuse 0/6 then 1/6; layer 1: 15 distinct, three twice, reuse 1/6, 2/6."""
    window = decode_window(_rows("qwen-tiny.route.csv"))
    assert sorted(window["step"].unique()) == [28, 29, 30]  # the prefill row is not decode
    layers = routing_by_layer(window).set_index("layer")
    assert layers.loc[0, "distinct_experts"] == 14 and layers.loc[1, "distinct_experts"] == 15
    assert layers.loc[0, "top4_share"] == pytest.approx(8 / 18) and layers.loc[1, "top4_share"] == pytest.approx(7 / 18)
    assert layers.loc[0, "reuse_prev"] == pytest.approx(1 / 12) and layers.loc[1, "reuse_prev"] == pytest.approx(1 / 4)
    entropy0 = 4 * (2 / 18) * math.log(9) + 10 * (1 / 18) * math.log(18)
    assert layers.loc[0, "effective_experts"] == pytest.approx(math.exp(entropy0))
    assert layers.loc[0, "uniform_distinct"] == pytest.approx(128 * (1 - (122 / 128) ** 3))
    assert routing_by_layer(decode_window(_rows("qwen-tiny.route.csv"), steps=2)).loc[0, "distinct_experts"] == 12


@pytest.mark.parametrize(("name", "layers", "used"), [("qwen", 48, 6), ("gemma", 30, 6), ("gptoss", 36, 2)])
def test_real_traces_route_far_narrower_than_uniform(name: str, layers: int, used: int) -> None:
    summary = routing_summary(decode_window(_rows(f"{name}-decode6.route.csv")))
    assert (summary["layers"], summary["tokens"], summary["n_expert_used"]) == (layers, 6, used)
    distinct = summary["distinct_experts"]
    assert used <= distinct["min"] <= distinct["mean"] <= distinct["max"] <= 6 * used
    # every model reuses far more of the previous token's experts than independent uniform choices would (k/n)
    assert summary["reuse_prev"]["mean"] > 3 * used / 128


def test_model_inspect_prints_the_routing_of_a_trace(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    synth_moe(model, **TINY_SYNTH)
    done = cli_in_process("model", "inspect", str(model), "--route-trace", str(ROUTES / "qwen-tiny.route.csv"))
    assert done.returncode == 0, done.stderr
    assert "routing (synthetic)    │ narrow" in done.stdout
    assert "3 decoded tokens" in done.stdout and "top-4 share of selections" in done.stdout
    line = next(t for t in done.stdout.splitlines() if "distinct experts per layer" in t)
    assert [cell.strip() for cell in line.split("│")[2:5]] == ["14.5", "14.0", "15.0"]
    as_json = json.loads(cli_in_process("model", "inspect", str(model), "--format", "json", "--route-trace",
                                        str(ROUTES / "qwen-tiny.route.csv")).stdout)
    assert [layer["distinct_experts"] for layer in as_json["route_trace"]["layers"]] == [14, 15]
    bad = cli_in_process("model", "inspect", str(model), "--route-trace", str(ROUTES / "SOURCE.md"))
    assert bad.returncode == 2 and "not a BigMoeOnEdge route trace" in bad.stderr


# --- synthetic models with a routing ------------------------------------------------------------------------------

def test_narrow_writes_the_bytes_of_the_writer_before_routing(tmp_path: Path) -> None:
    """Hashes computed with the writer as it was before --routing existed (commit c7e78c0)."""
    for routing in ({}, {"routing": "narrow"}):
        synth_moe(tmp_path / "n.gguf", **TINY_SYNTH, **routing)
        digest = hashlib.sha256((tmp_path / "n.gguf").read_bytes()).hexdigest()
        assert digest == "e97d8d0f2140b65b26676d7db0f9868504a04b9e4d6613e23e79c0f85f25592a"
    synth_moe(tmp_path / "q.gguf", layers=1, experts=8, used=2, hidden=64, ff=32, quant="q8_0", vocab=300, seed=7)
    assert hashlib.sha256((tmp_path / "q.gguf").read_bytes()).hexdigest() == \
        "a8f13b89e199842aafe386df01250663c48434d9a0c467a2f4e5c832ee3e1031"


def test_the_model_cache_key_changes_only_for_a_routing_other_than_narrow() -> None:
    demo = {"size": "1.6G", "experts": 64, "used": 4, "hidden": 512}
    # the key of quickstart's model before routing existed: its cached 1.6 GB file keeps being found
    assert synth_key(SynthSpec(**demo)) == synth_key(SynthSpec(**demo, routing="narrow")) == "5c467592a4bedbb3"
    keys = {synth_key(SynthSpec(**demo, routing=r)) for r in ("uniform", "zipf:1.1", "zipf:0.8")}
    assert len(keys) == 3 and "5c467592a4bedbb3" not in keys
    # "zipf" is the default exponent spelled out: one model, one key
    spelled = SynthSpec(**demo, routing=f"zipf:{DEFAULT_ZIPF_S}")
    assert synth_key(SynthSpec(**demo, routing="zipf")) == synth_key(spelled)
    with pytest.raises(ValueError, match="routing"):
        SynthSpec(routing="zipf:")


@pytest.mark.parametrize("text", ["zipf:", "zipf:-1", "Zipf:1", "broad", ""])
def test_an_unknown_routing_is_refused(text: str, tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="narrow, uniform, zipf or zipf:S"):
        parse_routing(text)
    assert str(parse_routing("zipf")) == f"zipf:{DEFAULT_ZIPF_S:g}" and str(parse_routing("zipf:1.10")) == "zipf:1.1"


def test_synth_cli_refuses_a_bad_routing(tmp_path: Path) -> None:
    done = cli_in_process("model", "synth", "--out", str(tmp_path / "x.gguf"), "--routing", "zipf:x")
    assert done.returncode == 2 and "--routing: expected narrow, uniform, zipf or zipf:S" in done.stderr
    assert not (tmp_path / "x.gguf").exists()


def test_zipf_target_shares_fall_with_rank_and_sum_to_the_experts_used() -> None:
    incl = target_inclusion(64, 4, 1.1)
    assert incl.sum() == pytest.approx(4) and incl.max() <= 1.0
    assert np.all(np.diff(incl) <= 1e-12) and incl[1] / incl[2] == pytest.approx((3 / 2) ** 1.1)
    assert np.allclose(target_inclusion(64, 4, 0.0), 4 / 64)


@pytest.mark.parametrize("routing", ["uniform", "zipf:1.1"])
def test_the_fitted_router_picks_experts_as_asked(routing: str) -> None:
    plan = plan_routing(parse_routing(routing), seed=1, layers=2, experts=16, used=2, hidden=64, n_vocab=512,
                        qtype=quants.GGMLQuantizationType.F16, eos=511)
    want = np.sort(target_inclusion(16, 2, plan.routing.s))[::-1]
    for layer in (0, 1):
        got = np.sort(planned_inclusion(plan, layer, 2))[::-1]
        assert np.abs(got - want).sum() < 0.15, (layer, got.round(3), want.round(3))
    # layers have their own popularity order
    assert np.argmax(planned_inclusion(plan, 0, 2)) != np.argmax(planned_inclusion(plan, 1, 2)) or routing == "uniform"


def test_a_shaped_file_holds_the_router_and_walk_the_plan_says(tmp_path: Path) -> None:
    """Read back from the GGUF what llama.cpp reads (token codes after q8_0 rounding, the F32 router, the untied
    head) and check: metadata records the routing, greedy decoding walks one cycle through every token but EOS,
    and each token's top-k at every layer is what the plan fitted."""
    out = tmp_path / "z.gguf"
    info = synth_moe(out, **{**TINY_SYNTH, "layers": 2}, quant="q8_0", vocab=300, routing="zipf:1.1")
    meta = inspect_gguf(out).metadata
    assert meta[ROUTING_KEY] == "zipf:1.1" and '"routing": "zipf:1.1"' in meta["general.description"]
    assert info.routing == "zipf:1.1"
    tensors = {t.name: t for t in GGUFReader(out).tensors}
    r = reserved_dims(64)
    embd = quants.dequantize(tensors["token_embd.weight"].data, tensors["token_embd.weight"].tensor_type)
    head = quants.dequantize(tensors["output.weight"].data, tensors["output.weight"].tensor_type)
    nxt = np.argmax(embd[:, :r] @ head[:, :r].T, axis=1)
    seen, token = [], 0
    for _ in range(299):
        seen.append(token)
        token = int(nxt[token])
    assert token == 0 and sorted(seen) == list(range(299))  # one cycle; 299 (EOS) never produced
    plan = plan_routing(parse_routing("zipf:1.1"), seed=3, layers=2, experts=16, used=4, hidden=64, n_vocab=300,
                        qtype=tensors["token_embd.weight"].tensor_type, eos=299)
    for layer in (0, 1):
        gate = np.asarray(tensors[f"blk.{layer}.ffn_gate_inp.weight"].data)
        assert not gate[:, r:].any()  # the router reads only the reserved coordinates
        picked = np.sort(np.argsort(-(embd @ gate.T), axis=1)[:, :4], axis=1)
        planned = np.sort(np.argsort(-(plan.codes @ plan.gates[layer].T), axis=1)[:, :4], axis=1)
        assert (picked == planned).all(axis=1).mean() > 0.99
    down = quants.dequantize(tensors["blk.0.ffn_down_exps.weight"].data, tensors["blk.0.ffn_down_exps.weight"]
                             .tensor_type)
    assert not down[:, :r, :].any()  # no layer overwrites the token code


# --- slow: the archive's whole traces, and the real engine on shaped models ---------------------------------------

def _archive_or_skip() -> Path:
    from harness.engines.bigmoeonedge.source import PINNED_COMMIT, SOURCES_ENV, archive_name

    folder = os.environ.get(SOURCES_ENV)
    archive = Path(folder or ".") / archive_name("BigMoeOnEdge", PINNED_COMMIT)
    if not folder or not archive.is_file():
        pytest.skip(f"no BigMoeOnEdge-2d4f2b1.tar.gz in ${SOURCES_ENV} ({folder or 'unset'})")
    return archive


@pytest.mark.slow
def test_whole_real_traces_reproduce_the_authors_figures() -> None:
    """The archive's findings.md (2026-07-15-route-trace) says: mean distinct experts per layer over the decode,
    qwen 64 (33-107), gemma 67 (52-97), gptoss 36 (19-64); the previous token's experts predict 38.0 %, 35.7 %,
    17.9 % of the next token's. Our parser and figures, on the same files, must say the same."""
    archive = _archive_or_skip()
    said = {"qwen": (64, 33, 107, 0.380), "gemma": (67, 52, 97, 0.357), "gptoss": (36, 19, 64, 0.179)}
    with tarfile.open(archive) as tar:
        for name, (mean, low, high, reuse) in said.items():
            member = f"BigMoeOnEdge-2d4f2b1/docs/bench-data/2026-07-15-route-trace/{name}.route.csv"
            summary = routing_summary(decode_window(parse_bmoe_route(tar.extractfile(member).read())))
            distinct = summary["distinct_experts"]
            assert (round(distinct["mean"]), distinct["min"], distinct["max"]) == (mean, low, high), name
            assert round(summary["reuse_prev"]["mean"], 3) == reuse, name


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_bmoe_measures_uniform_routing_wider_than_narrow(tmp_path: Path) -> None:
    """bmoe-cli built through the harness's builder decodes 24 tokens of a narrow and a uniform model (64 experts,
    4 used) with --route-trace: uniform must use clearly more distinct experts per layer, and reuse fewer."""
    _archive_or_skip()
    from harness.campaign.prepare import BUILD_CACHE
    from harness.engines import ENGINES

    engine = ENGINES["bigmoeonedge"]
    cli = engine.build(engine.spec(None), REPO, BUILD_CACHE, lambda _message: None).binaries["bmoe-cli"]
    measured = {}
    for routing in ("narrow", "uniform"):
        model, trace = tmp_path / f"{routing}.gguf", tmp_path / f"{routing}.route.csv"
        synth_moe(model, layers=4, experts=64, used=4, hidden=256, ff=64, routing=routing)
        done = subprocess.run([cli, "-m", str(model), "-p", "Explain how experts are chosen.", "-n", "24", "-t", "2",
                               "-c", "256", "--moe-stream", "--cache-mb", "0", "--route-trace", str(trace)],
                              capture_output=True, text=True, errors="replace", timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        measured[routing] = routing_summary(decode_window(parse_bmoe_route(trace.read_bytes()), 24))
    narrow, uniform = measured["narrow"], measured["uniform"]
    assert uniform["tokens"] == 24
    assert uniform["distinct_experts"]["mean"] > narrow["distinct_experts"]["mean"] + 8, measured
    assert uniform["distinct_experts"]["mean"] > 0.8 * uniform["uniform_distinct"]["mean"], measured
    assert uniform["reuse_prev"]["mean"] < narrow["reuse_prev"]["mean"], measured


def test_experiment_yaml_asks_for_a_routing_and_the_campaign_model_has_it(tmp_path: Path) -> None:
    from harness.campaign.prepare import synth_model
    from harness.config.experiment import load_experiment

    experiment = tmp_path / "e.yaml"
    experiment.write_text("name: r\nmodel: {synth: {layers: 1, experts: 8, used: 2, hidden: 64, ff: 32, "
                          "routing: zipf:1.1}}\nsteps: [{read: {file: model}}]\n")
    spec = load_experiment(experiment).experiment.named_files()["model"].synth
    path, described = synth_model(spec, lambda _message: None, cache=tmp_path / "models")
    assert described["routing"] == "zipf:1.1" and inspect_gguf(path).metadata[ROUTING_KEY] == "zipf:1.1"
    experiment.write_text(experiment.read_text().replace("zipf:1.1", "zipf:x"))
    with pytest.raises(ConfigError, match="e.yaml:2.*routing"):
        load_experiment(experiment)
