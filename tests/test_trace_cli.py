"""``harness trace synth|stats|record`` as a user runs them: files written, tables and JSON printed, bad input
refused in one line (exit 2); the slow test records real routing from llama.cpp's decode of synthetic models."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.models.synth import synth_moe
from harness.traces.model import read_trace
from tests.helpers import BUILD_TIMEOUT_S, DATA, REPO, cli_in_process, run_cli

QWEN = DATA / "bmoe" / "routes" / "qwen-decode6.route.csv"


def _one_line_error(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model") / "m.gguf"
    synth_moe(out, layers=3, experts=16, used=2, hidden=64, ff=32)
    return out


def test_synth_writes_the_asked_geometry_routing_and_seed(tmp_path: Path) -> None:
    out = tmp_path / "z.trace"
    done = cli_in_process("trace", "synth", "--out", str(out), "--layers", "3", "--experts", "32", "--used", "4",
                          "--tokens", "50", "--routing", "zipf:1.1", "--reuse", "0.2", "--seed", "7")
    assert done.returncode == 0, done.stderr
    trace = read_trace(out)
    assert (trace.n_layer, trace.n_expert, trace.n_used, trace.tokens) == (3, 32, 4, 50)
    assert trace.source == "synth:zipf:1.1:reuse=0.2:seed=7"
    again = tmp_path / "again.trace"
    cli_in_process("trace", "synth", "--out", str(again), "--layers", "3", "--experts", "32", "--used", "4",
                   "--tokens", "50", "--routing", "zipf:1.1", "--reuse", "0.2", "--seed", "7")
    assert again.read_text() == out.read_text()  # seeded: the same trace again


def test_synth_takes_the_geometry_from_a_model(tmp_path: Path, small_model: Path) -> None:
    out = tmp_path / "m.trace"
    assert cli_in_process("trace", "synth", "--out", str(out), "--model", str(small_model),
                          "--tokens", "5").returncode == 0
    trace = read_trace(out)
    assert (trace.n_layer, trace.n_expert, trace.n_used) == (3, 16, 2) and trace.source.startswith("synth:uniform")


@pytest.mark.parametrize("args, fragment", [
    (["--layers", "2", "--experts", "8", "--used", "2", "--routing", "narrow"], "--routing: expected uniform"),
    (["--layers", "2", "--experts", "8"], "give --model GGUF, or all of --layers, --experts and --used"),
    (["--layers", "2", "--experts", "8", "--used", "9"], "n_used must be in 1..n_expert (8), got 9"),
    (["--layers", "2", "--experts", "8", "--used", "2", "--reuse", "2"], "0 <= reuse <= 1"),
])
def test_synth_refuses_bad_input_in_one_line(tmp_path: Path, args: list[str], fragment: str) -> None:
    _one_line_error(cli_in_process("trace", "synth", "--out", str(tmp_path / "x"), *args), fragment)


def test_stats_prints_layers_and_lru_tables_of_a_route_trace() -> None:
    done = cli_in_process("trace", "stats", str(QWEN), "--cache-experts", "288,1000")
    assert done.returncode == 0, done.stderr
    assert "bmoe-route:qwen-decode6.route.csv:turn=0: 6 tokens, 48 layers, 6 of 128 experts" in done.stdout
    assert "LRU expert cache" in done.stdout and "288 experts" in done.stdout and "1000 experts" in done.stdout
    assert "never reused" in done.stdout and "mean" in done.stdout


def test_stats_json_sizes_the_cache_in_bytes_with_the_model(tmp_path: Path, small_model: Path) -> None:
    trace = tmp_path / "t.trace"
    cli_in_process("trace", "synth", "--out", str(trace), "--model", str(small_model), "--tokens", "40",
                   "--routing", "zipf")
    done = cli_in_process("trace", "stats", str(trace), "--model", str(small_model), "--cache", "64K,1M",
                          "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["trace"]["tokens"] == 40 and len(report["layers"]) == 3
    small, big = report["cache"]
    assert (small["unit"], small["capacity"], big["capacity"]) == ("bytes", 64 * 1024, 1024 * 1024)
    assert big["hit_rate"] >= small["hit_rate"]
    assert big["hit_rate"] == pytest.approx(1 - sum(s["distinct_experts"] for s in report["layers"]) / (40 * 3 * 2))


def test_stats_by_default_tries_caches_of_one_to_eight_tokens_of_experts(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    cli_in_process("trace", "synth", "--out", str(trace), "--layers", "2", "--experts", "16", "--used", "2")
    report = json.loads(cli_in_process("trace", "stats", str(trace), "--format", "json").stdout)
    assert [c["capacity"] for c in report["cache"]] == [4, 8, 16, 32] and report["cache"][0]["unit"] == "experts"
    warm = json.loads(cli_in_process("trace", "stats", str(trace), "--warmup", "100", "--format", "json").stdout)
    # 156 of the 256 tokens counted; a cache of every expert (32) misses nothing once warm
    assert warm["cache"][-1]["accesses"] == 156 * 2 * 2 and warm["cache"][-1]["hit_rate"] == 1.0


def test_stats_refuses_bad_input_in_one_line(tmp_path: Path, small_model: Path) -> None:
    _one_line_error(cli_in_process("trace", "stats", str(QWEN), "--cache", "1G"), "--cache is in bytes")
    _one_line_error(cli_in_process("trace", "stats", str(QWEN), "--model", str(small_model)),
                    "qwen-decode6.route.csv: the trace has n_layer=48, the model 3")
    _one_line_error(cli_in_process("trace", "stats", str(QWEN), "--cache-experts", "x"), "--cache-experts")
    _one_line_error(cli_in_process("trace", "stats", str(QWEN), "--format", "csv"), "--format")
    _one_line_error(cli_in_process("trace", "stats", str(QWEN), "--warmup", "6"), "--warmup: expected 0..5")
    _one_line_error(cli_in_process("trace", "stats", str(REPO / "pyproject.toml")),
                    "pyproject.toml:1: not a routing trace")


def test_record_refuses_bad_prompts_before_building_anything(tmp_path: Path, small_model: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "fine"}\n{"text": "no prompt key"}\n')
    _one_line_error(cli_in_process("trace", "record", str(small_model), str(prompts), "--out", str(tmp_path / "t")),
                    "p.jsonl:2: expected {\"prompt\"")
    _one_line_error(cli_in_process("trace", "record", str(tmp_path / "none.gguf"), str(prompts), "--out", "t"),
                    "none.gguf: no such model file")


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_record_reads_llamacpp_routing_zipf_concentrated_and_uniform_not(tmp_path: Path) -> None:
    """llama.cpp (the harness's build) decodes two prompts, 64 tokens each, on a zipf and a uniform synthetic
    qwen3moe (4 layers, 64 experts, 4 used); the recorded routing must have the model's geometry, n_used distinct
    experts per token and layer, and the zipf model's top-4 share well above the uniform one's (near 4 x 4/64 = 6 %
    over a long window); a prompt that does not fit the context is refused in one line. (A synthetic model's greedy
    decode walks one fixed cycle of tokens, so prompts ending in the same token decode the same tokens: these two
    end differently.)"""
    from harness.analysis.trace_stats import layer_stats, summary

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Explain why a solid state drive is fast"}\n'
                       '{"prompt": "What is the capital of Australia?"}\n')
    top4 = {}
    for routing in ("zipf", "uniform"):
        model, out = tmp_path / f"{routing}.gguf", tmp_path / f"{routing}.trace"
        synth_moe(model, layers=4, experts=64, used=4, hidden=256, ff=64, routing=routing)
        done = run_cli("trace", "record", str(model), str(prompts), "--out", str(out), "-n", "64", "--threads", "2",
                       timeout=BUILD_TIMEOUT_S)
        assert done.returncode == 0, done.stderr[-2000:]
        trace = read_trace(out)
        # the synthetic model never ends an answer: every prompt decodes all its tokens
        assert (trace.n_layer, trace.n_expert, trace.n_used, trace.tokens) == (4, 64, 4, 2 * 64)
        assert trace.source == f"llama.cpp:{routing}.gguf"
        assert all(len(set(ids.tolist())) == 4 for ids in trace.experts.reshape(-1, 4))
        top4[routing] = summary([layer_stats(trace, layer) for layer in range(4)])["top4_share"]["mean"]
    assert top4["uniform"] < 0.2, top4
    assert top4["zipf"] > 3 * top4["uniform"], top4
    too_long = run_cli("trace", "record", str(tmp_path / "zipf.gguf"), str(prompts), "--out", str(tmp_path / "x"),
                       "-n", "64", "--ctx", "16", timeout=600)
    _one_line_error(too_long, "with 64 to decode that exceeds the context of 16 (--ctx)")


def test_the_recorder_needs_a_static_llamacpp_build_and_says_so(tmp_path: Path) -> None:
    from harness.engines.errors import BuildError
    from harness.engines.llamacpp.build import BuildInfo
    from harness.engines.llamacpp.recorder import build_recorder

    key_dir = tmp_path / "cache" / "k"
    for header in ("src/include/llama.h", "src/ggml/include/ggml.h", "build/src/libllama.so"):
        (key_dir / header).parent.mkdir(parents=True, exist_ok=True)
        (key_dir / header).write_text("")
    build = BuildInfo(key="k" * 64, dir=str(key_dir), source={}, source_dir="", commit=None, cmake_flags=[],
                      patches=[], compiler="", binaries={}, binary_sha256={}, versions={}, build_seconds=0,
                      built_at="", log="")
    with pytest.raises(BuildError, match="has no libllama.a under .*needs a static build"):
        build_recorder(build)
    (key_dir / "src/include/llama.h").unlink()
    with pytest.raises(BuildError, match="has no include/llama.h beside ggml/include/ggml.h"):
        build_recorder(build)


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_recorded_routing_is_the_one_bigmoeonedge_traces_for_the_same_decode(tmp_path: Path) -> None:
    """The same zipf model and prompt, 24 greedy tokens: the trace `trace record` writes equals, token by token and
    layer by layer in rank order, the decode phase of BigMoeOnEdge's own --route-trace (its RouterHook reads the same
    ffn_moe_topk nodes, of the same llama.cpp, with its own code)."""
    import os

    from harness.campaign.prepare import BUILD_CACHE
    from harness.engines import ENGINES
    from harness.engines.bigmoeonedge.source import PINNED_COMMIT, SOURCES_ENV, archive_name
    from harness.traces.bmoe import load_trace

    folder = os.environ.get(SOURCES_ENV)
    if not folder or not (Path(folder) / archive_name("BigMoeOnEdge", PINNED_COMMIT)).is_file():
        pytest.skip(f"no BigMoeOnEdge archive in ${SOURCES_ENV} ({folder or 'unset'})")
    engine = ENGINES["bigmoeonedge"]
    cli = engine.build(engine.spec(None), REPO, BUILD_CACHE, lambda _message: None).binaries["bmoe-cli"]
    model, route, out = tmp_path / "z.gguf", tmp_path / "z.route.csv", tmp_path / "z.trace"
    synth_moe(model, layers=4, experts=64, used=4, hidden=256, ff=64, routing="zipf")
    prompt = "Explain why a solid state drive is fast"
    done = subprocess.run([cli, "-m", str(model), "-p", prompt, "-n", "24", "-t", "2", "-c", "256", "--moe-stream",
                           "--cache-mb", "0", "--route-trace", str(route)], capture_output=True, text=True,
                          errors="replace", timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": prompt}) + "\n")
    recorded = run_cli("trace", "record", str(model), str(prompts), "--out", str(out), "-n", "24",
                       timeout=BUILD_TIMEOUT_S)
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    ours, theirs = read_trace(out), load_trace(route)
    assert ours.tokens == theirs.tokens == 24
    assert (ours.experts == theirs.experts).all()
