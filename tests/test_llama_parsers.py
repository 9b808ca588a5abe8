"""llama-bench and llama-server parsers on real captured output (tests/data/llama-*), values read by eye."""

from __future__ import annotations

import json

import pytest

from harness.parsers import ParseError, parse
from harness.parsers.llama_bench import sample_rows
from harness.parsers.llama_server import USAGE
from tests.helpers import FIXTURES, cli_in_process

BENCH = FIXTURES / "llama-bench"
JSONL = BENCH / "llama-0c1e570-qwen3moe-1.6G-in-512M-cgroup-mmap.jsonl"
JSON = BENCH / "llama-0c1e570-tiny-qwen3moe.json"
SERVER = FIXTURES / "llama-server" / "completion-timings-excerpt.json"


def test_bench_jsonl_rows() -> None:
    rows = parse("llama-bench", JSONL.read_bytes())
    assert [r["test"] for r in rows] == ["pp16", "tg32"]
    pp, tg = rows
    assert (pp["n_prompt"], pp["n_gen"], pp["n_threads"], pp["load_mode"]) == (16, 0, 2, "mmap")
    assert pp["avg_tps"] == 16.763053 and pp["stddev_tps"] == 0.112630
    assert pp["samples_tps"] == [16.7212, 16.8906, 16.6773]
    assert tg["avg_tps"] == 3.925509 and tg["samples_ns"] == [9002403950, 7064514712, 8666823266]
    assert tg["build_commit"] == "0c1e570" and tg["model_filename"] == "big-qwen3moe.gguf"
    assert tg["model_size_bytes"] == 1626595328
    # every key of the build is kept as printed, new ones included
    assert tg["n_cpu_moe"] == 0 and tg["repack"] is True and tg["test_time"] == "2026-11-29T08:32:11Z"


def test_bench_json_array_rows() -> None:
    rows = parse("llama-bench", JSON.read_bytes())
    assert [(r["test"], r["avg_tps"], r["load_mode"]) for r in rows] == [
        ("pp16", 9514.351805, "auto"), ("tg16", 4534.666676, "auto")]
    assert rows[0]["model_size_bytes"] == 8215552 and rows[1]["samples_tps"] == [4534.67]


def test_bench_older_build_without_load_mode() -> None:
    old = {"build_commit": "abc", "n_prompt": 512, "n_gen": 128, "n_depth": 256, "n_threads": 6, "use_mmap": True,
           "avg_ts": 2.5, "stddev_ts": 0.1, "samples_ts": [2.4, 2.6], "samples_ns": [1, 2]}
    (row,) = parse("llama-bench", (json.dumps(old) + "\n").encode())
    assert row["test"] == "pp512+tg128 @ d256"
    assert row["load_mode"] is None and row["use_mmap"] is True
    assert row["model_size_bytes"] is None and row["avg_tps"] == 2.5


def test_bench_sample_rows() -> None:
    samples = sample_rows(parse("llama-bench", JSONL.read_bytes()))
    assert len(samples) == 6
    assert [(s["test"], s["sample"], s["sample_tps"]) for s in samples[3:]] == [
        ("tg32", 0, 3.55461), ("tg32", 1, 4.52968), ("tg32", 2, 3.69224)]
    assert samples[4]["sample_ns"] == 7064514712 and samples[4]["bench_index"] == 1


def test_bench_bad_input_says_where() -> None:
    with pytest.raises(ParseError, match="line 2"):
        parse("llama-bench", JSONL.read_bytes().splitlines()[0] + b"\n{not json\n")
    with pytest.raises(ParseError, match="no llama-bench results"):
        parse("llama-bench", b"main: error: failed to load model\n")


def test_server_saved_response() -> None:
    (row,) = parse("llama-server", SERVER.read_bytes())
    assert (row["prompt_n"], row["prompt_ms"], row["predicted_n"], row["predicted_ms"]) == (6, 201.665, 600, 47212.818)
    assert row["prefill_tps"] == 29.752312002578535 and row["decode_tps"] == 12.708413211005539
    assert row["cache_n"] is None and row["draft_n"] is None  # older build, no speculative decoding
    assert row["stop_type"] == "limit" and row["tokens_cached"] == 605


def test_server_stream_and_jsonl() -> None:
    final = {"stop": True, "timings": {"cache_n": 0, "prompt_n": 17, "prompt_ms": 18.4, "predicted_n": 4,
                                       "predicted_ms": 9.4, "predicted_per_second": 425.5, "draft_n": 3,
                                       "draft_n_accepted": 2}}
    stream = 'data: {"content": "eb", "stop": false}\n\ndata: ' + json.dumps(final) + "\n\n"
    (row,) = parse("llama-server", stream.encode())
    assert (row["cache_n"], row["predicted_n"], row["decode_tps"], row["draft_n_accepted"]) == (0, 4, 425.5, 2)
    lines = SERVER.read_text().strip() + "\n" + json.dumps(final) + "\n"
    assert [r["predicted_n"] for r in parse("llama-server", lines.encode())] == [600, 4]
    array = json.dumps([json.loads(SERVER.read_text()), final], indent=2)
    assert [r["response"] for r in parse("llama-server", array.encode())] == [0, 1]
    with pytest.raises(ParseError, match="error: model is loading"):
        parse("llama-server", b'{"error": {"code": 503, "message": "model is loading"}}')


def test_harness_parse_cli_reads_both() -> None:
    done = cli_in_process("parse", "llama-bench", str(JSONL), "--format", "csv")
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0].split(",")
    assert header[:3] == ["test", "n_prompt", "n_gen"] and "avg_tps" in header
    done = cli_in_process("parse", "llama-server", str(SERVER))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["decode_tps"] == 12.708413211005539


# --- published llama-bench outputs (tests/data/llama-bench/SOURCE.md), every row read by eye from the file ---

TABLES = {  # file: (build_commit, [(test, avg_tps, stddev_tps, n_gpu_layers, backends)], size text, params)
    "pr2626-first-version-cuda.md": (None, [("pp512", 2242.06, 24.26, 99, "CUDA"), ("tg128", 43.09, 0.41, 99, "CUDA")],
                                     None, None),
    "pr2059-opencl-vulkan-rocm-rx6800xt.md": (None, [
        ("pp512", 103.91, 13.10, 0, "OpenCL"), ("tg128", 4.45, 0.05, 0, "OpenCL"),
        ("pp512", 121.56, 10.09, 99, "OpenCL"), ("tg128", 21.17, 0.09, 99, "OpenCL"),
        ("pp512", 71.12, 4.05, 0, "Vulkan"), ("tg128", 4.46, 0.05, 0, "Vulkan"),
        ("pp512", 374.44, 4.66, 99, "Vulkan"), ("tg128", 34.13, 0.45, 99, "Vulkan"),
        ("pp512", 248.76, 2.48, 0, "ROCm"), ("tg128", 4.48, 0.03, 0, "ROCm"), ("pp512", 684.11, 3.10, 99, "ROCm")],
        "9.95 GiB", 13_020_000_000),
    "pr13324-vulkan-rtx2070-fa.md": ("141a908a", [("pp512", 139.97, 1.06, 99, "Vulkan"),
                                                  ("tg128", 35.87, 1.01, 99, "Vulkan")], "2.37 GiB", 4_020_000_000),
    "ai-benchmarks-20-p550-rx580-vulkan.md": ("e598697d", [
        ("pp512", 346.76, 0.45, 99, "Vulkan"), ("pp4096", 255.79, 12.26, 99, "Vulkan"),
        ("tg128", 36.23, 17.62, 99, "Vulkan"), ("pp4096+tg128", 182.59, 2.66, 99, "Vulkan")],
        "1.87 GiB", 3_210_000_000),
    "issue18570-vulkan-r9-depth.md": (None, [
        ("pp512", 273.35, 0.0, 99, "Vulkan"), ("tg128", 42.74, 0.0, 99, "Vulkan"),
        ("pp512 @ d5000", 170.06, 0.0, 99, "Vulkan"), ("tg128 @ d5000", 9.09, 0.0, 99, "Vulkan")],
        "2.30 GiB", 3_430_000_000),
    "issue25547-m5-blas-mtl.md": (None, [("pp256", 597.06, 0.0, None, "BLAS,MTL"),
                                         ("tg64", 20.21, 0.0, None, "BLAS,MTL")], "5.28 GiB", 8_950_000_000),
    "pr4560-jetson-tx2-cuda.md": (None, [
        ("pp512", 2.97, 0.05, 10, "CUDA"), ("tg128", 0.65, 0.0, 10, "CUDA"), ("pp512", 3.49, 0.03, 20, "CUDA"),
        ("tg128", 0.83, 0.0, 20, "CUDA"), ("pp512", 4.38, 0.04, 30, "CUDA"), ("tg128", 1.14, 0.0, 30, "CUDA"),
        ("pp512", 4.49, 0.03, 31, "CUDA")], "4.43 GiB", 7_720_000_000),
    "pr6017-8xA100-n-batch.md": (None, [
        ("pp512", 8381.22, 2.50, 99, "CUDA"), ("pp1024", 13312.63, 5.10, 99, "CUDA"),
        ("pp2048", 14723.17, 5.76, 99, "CUDA")], "12.55 GiB", 6_740_000_000),
    "issue13164-qwen3moe-vulkan-rpc-sm-row.md": (None, [
        ("pp512 @ d512", 85.83, 0.80, 99, "Vulkan,RPC"), ("tg128 @ d512", 60.13, 0.61, 99, "Vulkan,RPC"),
        ("pp512 @ d512", 138.50, 2.04, 99, "Vulkan,RPC"), ("tg128 @ d512", 60.72, 0.07, 99, "Vulkan,RPC"),
        ("pp512 @ d512", 148.52, 1.58, 99, "Vulkan,RPC")], "15.25 GiB", 30_530_000_000),
    "readme-5a32f10-depth-cuda.md": (None, [
        ("pp512", 7340.20, 23.45, 99, "CUDA"), ("tg128", 120.60, 0.59, 99, "CUDA"),
        ("pp512 @ d512", 6425.91, 18.88, 99, "CUDA"), ("tg128 @ d512", 116.71, 0.60, 99, "CUDA")],
        "4.36 GiB", 7_620_000_000),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_bench_markdown_tables_of_the_field(name: str) -> None:
    build, expected, size, params = TABLES[name]
    rows = parse("llama-bench", (BENCH / name).read_bytes())
    assert [(r["test"], r["avg_tps"], r["stddev_tps"], r.get("n_gpu_layers"), r["backends"]) for r in rows] == expected
    assert {r["build_commit"] for r in rows} == {build}
    assert {r.get("model_size_text") for r in rows} == {size} and {r.get("model_n_params") for r in rows} == {params}
    assert all(r["samples_tps"] is None and r["model_filename"] is None for r in rows)  # a table does not print them


def test_bench_markdown_units_and_columns() -> None:
    (pp, tg) = parse("llama-bench", (BENCH / "pr13324-vulkan-rtx2070-fa.md").read_bytes())
    assert pp["model_size_bytes"] == round(2.37 * 2**30) and pp["model_type"] == "qwen3 4B Q4_K - Medium"
    assert pp["flash_attn"] == 1 and pp["build_number"] == 5298 and (pp["n_prompt"], pp["n_gen"]) == (512, 0)
    (_, _, _, pg) = parse("llama-bench", (BENCH / "ai-benchmarks-20-p550-rx580-vulkan.md").read_bytes())
    assert (pg["n_prompt"], pg["n_gen"], pg["n_depth"], pg["build_number"]) == (4096, 128, 0, 4696)
    rows = parse("llama-bench", (BENCH / "issue25547-m5-blas-mtl.md").read_bytes())
    assert rows[1]["n_threads"] == 4 and rows[1]["model_size_bytes"] == round(5.28 * 2**30)
    assert parse("llama-bench", (BENCH / "issue18570-vulkan-r9-depth.md").read_bytes())[3]["n_depth"] == 5000
    rows = parse("llama-bench", (BENCH / "issue13164-qwen3moe-vulkan-rpc-sm-row.md").read_bytes())
    assert [(r["n_batch"], r["split_mode"], r["n_depth"]) for r in rows][::2] == [(16, "row", 512), (32, "row", 512),
                                                                                  (64, "row", 512)]
    assert rows[0]["model_type"] == "qwen3moe 30B.A3B IQ4_XS - 4.25 bpw"  # wider than its column: still one cell
    assert [r["n_batch"] for r in parse("llama-bench", (BENCH / "pr6017-8xA100-n-batch.md").read_bytes())] == [8192] * 3


def test_bench_csv_sql_jsonl_of_one_build_read_alike() -> None:
    """The README of 5a32f10 prints one build's two tests in csv, jsonl and sql (separate runs: values differ)."""
    csv_rows = parse("llama-bench", (BENCH / "readme-5a32f10-rtx4080.csv").read_bytes())
    sql_rows = parse("llama-bench", (BENCH / "readme-5a32f10-rtx4080.sql").read_bytes())
    jsonl_rows = parse("llama-bench", (BENCH / "readme-5a32f10-rtx4080.jsonl").read_bytes())
    assert [(r["test"], r["avg_tps"], r["stddev_tps"], r["avg_ns"]) for r in csv_rows] == [
        ("pp512", 7285.676949, 100.064434, 70285660), ("tg128", 119.915244, 0.430617, 1067431600)]
    assert [(r["test"], r["avg_tps"], r["stddev_tps"], r["avg_ns"]) for r in sql_rows] == [
        ("pp512", 7324.546977, 54.032613, 69905000), ("tg128", 120.346696, 0.504647, 1063608780)]
    assert [(r["test"], r["avg_tps"], r["samples_tps"]) for r in jsonl_rows] == [
        ("pp512", 7263.609157, [7155.74, 7188.71, 7276.44, 7373.37, 7323.8]),
        ("tg128", 119.844681, [120.038, 120.203, 118.624, 120.377, 119.982])]
    for rows in (csv_rows, sql_rows, jsonl_rows):  # the same types whatever the format
        row = rows[0]
        assert (row["build_commit"], row["build_number"], row["model_size_bytes"], row["model_n_params"]) == (
            "8cf427ff", 5163, 4677120000, 7615616512)
        assert (row["n_threads"], row["n_gpu_layers"], row["use_mmap"], row["cpu_strict"]) == (8, 99, True, False)
        assert row["cpu_info"] == "AMD Ryzen 7 7800X3D 8-Core Processor" and row["n_depth"] == 0
    assert csv_rows[0]["samples_tps"] is None and sql_rows[1]["test_time"] == "2025-04-24T12:00:09Z"


def test_bench_oldest_json_schema() -> None:
    rows = parse("llama-bench", (BENCH / "readme-1773271-rtx3090ti.json").read_bytes())
    assert [(r["test"], r["avg_tps"], r["n_depth"], r["cuda"], r["mul_mat_q"]) for r in rows] == [
        ("pp512", 2410.974041, None, True, True), ("tg128", 130.965708, None, True, True)]
    assert rows[1]["samples_ns"] == [984472709, 974901233, 989474741, 970729355, 967548060]


def test_bench_refuses_what_it_cannot_read_naming_the_line() -> None:
    with pytest.raises(ParseError, match=r"line 2: llama-bench CSV: 27 values for the header's 26 fields"):
        parse("llama-bench", (BENCH / "readme-1773271-rtx3090ti-unmatched.csv").read_bytes())
    table = (BENCH / "pr13324-vulkan-rtx2070-fa.md").read_text().replace("139.97 ± 1.06", "139.97")
    with pytest.raises(ParseError, match=r"line 5: .*t/s '139.97'"):
        parse("llama-bench", table.encode())
    with pytest.raises(ParseError, match=r"line 2: not llama-bench output .*'model,test,tps'"):
        parse("llama-bench", b"ggml_vulkan: Found 1 Vulkan devices:\nmodel,test,tps\nx,pp512,1.0\n")


def test_bench_json_after_log_lines_on_stdout() -> None:
    """Vulkan builds print ggml_vulkan: lines on stdout: before the JSON they no longer hide it."""
    log = b"ggml_vulkan: Found 1 Vulkan devices:\nggml_vulkan: 0 = AMD Radeon RX 580 (radv) | uma: 0\n"
    for name in ("readme-1773271-rtx3090ti.json", "readme-5a32f10-rtx4080.jsonl"):
        data = (BENCH / name).read_bytes()
        assert parse("llama-bench", log + data + b"\nbuild: 3469684 (1275)\n") == parse("llama-bench", data)


def test_harness_parse_cli_reads_a_markdown_table_and_names_a_bad_line(tmp_path) -> None:
    done = cli_in_process("parse", "llama-bench", str(BENCH / "pr2059-opencl-vulkan-rocm-rx6800xt.md"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[4]["avg_tps"] == 71.12
    done = cli_in_process("parse", "llama-bench", str(BENCH / "readme-1773271-rtx3090ti-unmatched.csv"))
    assert done.returncode == 2
    assert "readme-1773271-rtx3090ti-unmatched.csv: line 2: llama-bench CSV" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


# --- llama-server: published responses (tests/data/llama-server/SOURCE.md) ---

SERVER_DATA = FIXTURES / "llama-server"


def test_server_native_stream_with_timings_before_the_end() -> None:
    (row,) = parse("llama-server", (SERVER_DATA / "pr10720-completion-stream.sse").read_bytes())
    assert (row["prompt_n"], row["prompt_ms"], row["predicted_n"], row["predicted_ms"]) == (16, 209.562, 4, 62.882)
    assert row["prefill_tps"] == 76.34971989196514 and row["decode_tps"] == 63.611208294901566
    assert (row["tokens_predicted"], row["tokens_evaluated"], row["cache_n"], row["stop_type"]) == (4, 16, None, None)
    assert "prompt_tokens" not in row  # native rows keep their columns


def test_server_openai_final_chunks_read_usage() -> None:
    (row,) = parse("llama-server", (SERVER_DATA / "b6097-chat-final-chunk.json").read_bytes())
    assert (row["prompt_tokens"], row["completion_tokens"], row["total_tokens"]) == (1085, 247, 1332)
    assert row["cached_tokens"] is None  # b6097 printed no prompt_tokens_details
    assert (row["prompt_n"], row["predicted_n"], row["decode_tps"]) == (1085, 247, 264.5587652496171)
    assert (row["finish_reason"], row["stop_type"]) == ("stop", None)  # eos or a stop word: not told apart
    (row,) = parse("llama-server", (SERVER_DATA / "b6103-chat-final-chunk-pretty.json").read_bytes())
    # 892 prompt tokens, 721 of them evaluated: the rest came from the cache, and the row shows both
    assert (row["prompt_tokens"], row["prompt_n"], row["completion_tokens"]) == (892, 721, 332)
    assert row["prefill_tps"] == 5292.520002936211 and row["predicted_ms"] == 1253.787


def test_server_openai_stream_of_chunks_is_one_response_with_cached_tokens() -> None:
    """A /v1/chat/completions stream: the chunks share an id; finish_reason, usage and timings come in the last
    ones (the shape of b6097's final chunk, with the cached_tokens newer builds print)."""
    first = {"choices": [{"finish_reason": None, "index": 0, "delta": {"content": "Hi"}}], "id": "chatcmpl-a",
             "object": "chat.completion.chunk"}
    last = {"choices": [{"finish_reason": "length", "index": 0, "delta": {}}], "id": "chatcmpl-a",
            "object": "chat.completion.chunk",
            "usage": {"completion_tokens": 8, "prompt_tokens": 2143, "total_tokens": 2151,
                      "prompt_tokens_details": {"cached_tokens": 2126}},
            "timings": {"cache_n": 2126, "prompt_n": 17, "prompt_ms": 30.5, "predicted_n": 8, "predicted_ms": 80.0,
                        "predicted_per_second": 100.0}}
    stream = "".join(f"data: {json.dumps(c)}\n\n" for c in (first, first, last)) + "data: [DONE]\n\n"
    (row,) = parse("llama-server", stream.encode())
    assert (row["cached_tokens"], row["prompt_tokens"], row["cache_n"], row["prompt_n"]) == (2126, 2143, 2126, 17)
    assert (row["finish_reason"], row["stop_type"], row["decode_tps"]) == ("length", "limit", 100.0)
    two = stream + stream.replace("chatcmpl-a", "chatcmpl-b")
    assert [r["response"] for r in parse("llama-server", two.encode())] == [0, 1]


def test_server_older_stopped_flags_become_stop_type() -> None:
    base = json.loads((SERVER_DATA / "completion-timings-excerpt.json").read_text())
    base.pop("stop_type", None)
    for flags, expected in (({"stopped_eos": True, "stopped_limit": False, "stopped_word": False}, "eos"),
                            ({"stopped_eos": False, "stopped_limit": True, "stopped_word": False}, "limit"),
                            ({"stopped_eos": False, "stopped_limit": False, "stopped_word": True}, "word"),
                            ({"stopped_eos": False, "stopped_limit": False, "stopped_word": False}, "none"),
                            ({}, None)):
        (row,) = parse("llama-server", json.dumps({**base, **flags}).encode())
        assert row["stop_type"] == expected, flags


# recorded responses of llama-server builds b5994..b10452 (maruel/genai's go-vcr cassettes; SOURCE.md), by hand:
# file: (finish_reason, stop_type, prompt_tokens, completion_tokens, cached_tokens, cache_n, prompt_n, predicted_n,
#        prompt_ms, predicted_ms, decode_tps)
RECORDED = {
    "genai-b5994-chat-stream-stop.sse": ("stop", None, 17, 3, None, None, 1, 3, 48.272, 95.575, 31.388961548522104),
    "genai-b5994-chat-stream-tool-calls.sse": ("tool_calls", None, 303, 46, None, None, 1, 46, 100.854, 4345.916,
                                               10.58465004845929),
    # timings on the last two chunks: the response's are the last ones
    "genai-b6134-chat-stream-stop-word.sse": ("stop", None, 22, 14, None, None, 17, 14, 127.418, 9204.5,
                                              1.5209951654082243),
    "genai-b6283-chat-stream-logprobs.sse": ("stop", None, 17, 3, None, None, 1, 3, 15.386, 71.362, 42.03918051624114),
    "genai-b8180-chat-stream-length.sse": ("length", "limit", None, None, None, 4, 14, 16, 177.071, 1047.445,
                                           15.275265049716214),
    "genai-b8180-chat-sync-thinking.json": ("stop", None, 386, 11, None, 0, 386, 11, 2335.58, 991.101,
                                            11.098767935861229),
    "genai-b9020-chat-sync-length.json": ("length", "limit", 19, 16, 0, 0, 19, 16, 19.679, 147.369, 108.57100204249197),
    "genai-b9020-chat-sync-stop.json": ("stop", None, 39, 14, 0, 0, 39, 14, 22.902, 84.321, 166.0321865253021),
    "genai-b9020-chat-sync-cached.json": ("stop", None, 115, 3, 111, 111, 4, 3, 18.394, 19.788, 151.60703456640388),
    "genai-b10452-chat-stream-stop-word.sse": ("stop", None, None, None, None, 0, 20, 15, 11.44, 69.468,
                                               201.5316404675534),
    "genai-b10452-chat-stream-length.sse": ("length", "limit", None, None, None, 0, 23, 16, 89.682, 140.907,
                                            106.45319253124401),
}
_RECORDED_KEYS = ("finish_reason", "stop_type", "prompt_tokens", "completion_tokens", "cached_tokens", "cache_n",
                  "prompt_n", "predicted_n", "prompt_ms", "predicted_ms", "decode_tps")


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_server_recorded_openai_responses(name: str) -> None:
    (row,) = parse("llama-server", (SERVER_DATA / name).read_bytes())  # a stream's chunks are one response
    assert tuple(row[key] for key in _RECORDED_KEYS) == RECORDED[name]
    assert set(USAGE) <= set(row)  # every OpenAI-compatible row has the usage columns, None where not printed


def test_server_cached_prompt_tokens_are_visible() -> None:
    """The row no longer hides that 111 of 115 prompt tokens came from the cache (b9020)."""
    (row,) = parse("llama-server", (SERVER_DATA / "genai-b9020-chat-sync-cached.json").read_bytes())
    assert (row["cached_tokens"], row["prompt_tokens"], row["prompt_n"]) == (111, 115, 4)
    assert row["total_tokens"] == 118 and row["prefill_tps"] == 217.46221593998044


NATIVE = {  # file: (stop_type, tokens_predicted, tokens_evaluated, tokens_cached, prompt_n, predicted_n, predicted_ms)
    "genai-native-completion-sync-eos.json": ("eos", 3, 17, 19, 1, 3, 110.105),
    "genai-native-completion-sync-limit.json": ("limit", 16, 18, 33, 1, 16, 834.469),
    "genai-native-completion-stream-word.sse": ("word", 12, 21, 32, 17, 12, 618.955),
}


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_server_recorded_native_responses(name: str) -> None:
    """2025 /completion responses; the stream sends timings on its last two chunks: one response, the last's."""
    (row,) = parse("llama-server", (SERVER_DATA / name).read_bytes())
    assert (row["stop_type"], row["tokens_predicted"], row["tokens_evaluated"], row["tokens_cached"], row["prompt_n"],
            row["predicted_n"], row["predicted_ms"]) == NATIVE[name]
    assert row["truncated"] is False and row["cache_n"] is None and "prompt_tokens" not in row


def test_server_older_build_stopped_flags_of_a_real_response() -> None:
    """b1662 (Dec 2023) said why it stopped with stopped_eos/stopped_limit/stopped_word only."""
    (row,) = parse("llama-server", (SERVER_DATA / "b1662-completion-stopped-limit.json").read_bytes())
    assert row["stop_type"] == "limit"
    assert (row["prompt_n"], row["prompt_ms"], row["predicted_n"], row["predicted_ms"]) == (11, 588.103, 128, 16142.462)
    assert (row["tokens_predicted"], row["tokens_evaluated"], row["tokens_cached"]) == (128, 11, 139)
    assert row["cache_n"] is None and row["decode_tps"] == 7.929397634635906  # this build had no cache_n


@pytest.mark.parametrize("folder", ["llama-bench", "llama-server", "bmoe/summary-only"])
def test_every_capture_names_its_source_and_is_read(folder: str) -> None:
    """A capture without its SOURCE.md line cannot be checked against where it came from; each one is read (the
    one published CSV whose rows do not match its header is refused, naming the line)."""
    kind = {"llama-bench": "llama-bench", "llama-server": "llama-server", "bmoe/summary-only": "bmoe"}[folder]
    source = (FIXTURES / folder.split("/")[0] / "SOURCE.md").read_text()
    captures = sorted(p for p in (FIXTURES / folder).iterdir() if p.is_file() and p.name != "SOURCE.md")
    assert len(captures) >= 10
    for path in captures:
        assert path.name in source, f"{path.name} is not in {folder}'s SOURCE.md"
        if path.name == "readme-1773271-rtx3090ti-unmatched.csv":
            with pytest.raises(ParseError, match="line 2"):
                parse(kind, path.read_bytes())
        else:
            assert parse(kind, path.read_bytes()), path.name
