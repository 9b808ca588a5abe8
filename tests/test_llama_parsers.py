"""llama-bench and llama-server parsers on real captured output (tests/data/llama-*), values read by eye."""

from __future__ import annotations

import json

import pytest

from harness.parsers import ParseError, parse
from harness.parsers.llama_bench import sample_rows
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
