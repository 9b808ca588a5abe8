"""BigMoeOnEdge's output (harness/parsers/bmoe.py) on real captures from its archive (tests/data/bmoe/SOURCE.md):
every capture parses, values checked by hand against the files, "unmeasured" is null and never 0, a CSV and the log
of the same run agree, and malformed input is one line naming file and line through ``harness parse bmoe``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness.parsers import ParseError, parse
from harness.parsers.bmoe import (
    REQUEST_COLUMNS,
    SUMMARY_COLUMNS,
    TOKEN_COLUMNS,
    bmoe_request_row,
    is_bmoe_csv,
    parse_bmoe_csv,
    parse_bmoe_log,
)
from harness.results.metrics import METRICS
from tests.helpers import DATA, cli_in_process

BMOE = DATA / "bmoe"
MIB = 1 << 20
CSVS = sorted(BMOE.glob("*.csv"))
LOGS = sorted([*BMOE.glob("*.log"), *BMOE.glob("*.out")])
# (csv, log) of one run: the archive keeps both for these
PAIRS = [(BMOE / f"{stem}.csv", BMOE / f"{stem}.{ext}") for stem, ext in (
    ("2026-07-12_qwen_stream", "log"), ("2026-07-12_qwen_mmap", "log"), ("2026-07-12_qwen_c2000_l2", "log"),
    ("2026-07-13_gemma_auto_ov", "log"), ("2026-07-17_gpt_k2", "out"), ("synth_nocache", "log"),
    ("synth_cache16", "log"))]
# the log prints per-token values with fewer decimals than the CSV (wall_ms %.1f against %.3f, read_mb %.2f MiB)
TOKEN_TOLERANCE = {"wall_ms": 0.0505, "io_ms": 0.0505, "compute_ms": 0.0505, "mgmt_ms": 0.0505, "stall_ms": 0.0505,
                   "cpu_ms": 0.0505, "cache_hit_pct": 0.0505, "dense_resident_frac": 0.0005, "read_bytes": 0.005 * MIB}


def read(name: str) -> bytes:
    return (BMOE / name).read_bytes()


def only_summary(tables: dict[str, list[dict]]) -> dict:
    assert len(tables["summary"]) == 1
    return tables["summary"][0]


@pytest.mark.parametrize("path", CSVS + LOGS, ids=lambda p: p.name)
def test_every_capture_parses_to_the_documented_columns(path: Path) -> None:
    data = path.read_bytes()
    assert is_bmoe_csv(data) == (path.suffix == ".csv")
    tables = parse_bmoe_csv(data) if path.suffix == ".csv" else parse_bmoe_log(data)
    assert tables["summary"], "every capture ends with a summary"
    for row in tables["summary"]:
        assert list(row)[:len(SUMMARY_COLUMNS)] == list(SUMMARY_COLUMNS)
        assert row["tokens"] > 0 and row["tok_s"] > 0
    for row in tables["tokens"]:
        assert list(row) == list(TOKEN_COLUMNS)
    if path.suffix == ".csv":
        assert [row["token"] for row in tables["tokens"]] == list(range(1, tables["summary"][0]["tokens"] + 1))


def test_oldest_csv_values_by_hand_and_missing_columns_null() -> None:
    # 2026-07-12: 8 columns, serial streaming without a cache: "1,256,563.097,462.868,100.228,1101791232,-1.00,0.000"
    tables = parse_bmoe_csv(read("2026-07-12_qwen_stream.csv"))
    first = tables["tokens"][0]
    assert (first["token"], first["steps"], first["wall_ms"], first["io_ms"], first["compute_ms"]) == \
        (1, 256, 563.097, 462.868, 100.228)
    assert first["read_bytes"] == 1101791232
    assert first["cache_hit_pct"] is None  # -1: no cache
    assert first["stall_ms"] is None  # serial: the engine writes 0
    assert first["mgmt_ms"] is None and first["majflt"] is None and first["cpu_ms"] is None  # no such columns yet
    summary = only_summary(tables)
    assert (summary["tok_s"], summary["s_per_token"], summary["read_mib"], summary["n_prompt"]) == \
        (1.709, 0.585, 268992.0, 34)
    assert summary["streaming"] is True and summary["overlap"] is False
    assert summary["stall_s_per_token"] is None and summary["cache_hit_pct"] is None


def test_newest_csv_values_by_hand_with_preamble() -> None:
    # 2026-07-17 gpt_k2: "# bmoe_metrics v1" + model/moe_stream lines; token 2:
    # "2,256,669.787,1250.767,330.805,952676352,-1.00,337.939,1.043,56,1450.425,-1.000,0,0.22,0.0,3925.8,..."
    tables = parse_bmoe_csv(read("2026-07-17_gpt_k2.csv"))
    second = tables["tokens"][1]
    assert (second["io_ms"], second["stall_ms"], second["mgmt_ms"], second["majflt"], second["cpu_ms"]) == \
        (1250.767, 337.939, 1.043, 56, 1450.425)
    assert second["dense_resident_frac"] is None and tables["tokens"][2]["dense_resident_frac"] == 0.992
    assert second["rss_mib"] == 3925.8 and second["cache_budget_mib"] is None  # cache_mb=0: no cache
    summary = only_summary(tables)
    assert summary["cfg_bmoe_metrics"] == "v1" and summary["cfg_arch"] == "gpt-oss"
    assert summary["cfg_n_expert_used"] == 2 and summary["cfg_dense_weights"] == "anon"
    assert (summary["tok_s"], summary["cpu_s_per_token"], summary["majflt_per_token"]) == (1.790, 1.0034, 6.0)
    assert summary["overlap"] is True and summary["stall_s_per_token"] == 0.316
    assert summary["token_demand_mib"] == 907.7


def test_unmeasured_cpu_and_faults_are_null_not_zero() -> None:
    # the desktop capture (2026-07-24 pc-J): majflt 0 and cpu_ms 0.000 on every row, cpu_s/tok=0.0000 in the summary
    tables = parse_bmoe_csv(read("2026-07-24-desktop-qwen36_pc-J-auto-overlap-drop.csv"))
    assert all(row["cpu_ms"] is None and row["majflt"] is None for row in tables["tokens"])
    assert all(row["rss_mib"] is None for row in tables["tokens"])  # rss_mib 0.0: the per-process split is missing
    summary = only_summary(tables)
    assert summary["cpu_s_per_token"] is None and summary["majflt_per_token"] is None
    assert (summary["experts_dropped"], summary["experts_routed"], summary["cache_hit_pct"]) == (5146, 81920, 92.3)
    assert tables["tokens"][0]["compute_ms"] == 160.400  # the clamped residual stays what the engine said


def test_mmap_run_has_no_engine_io_columns() -> None:
    # without --moe-stream the kernel reads the experts: io_ms 0, read_bytes 0 mean "not counted", not "nothing"
    for tables in (parse_bmoe_csv(read("2026-07-12_qwen_mmap.csv")), parse_bmoe_log(read("2026-07-12_qwen_mmap.log"))):
        summary = only_summary(tables)
        assert summary["streaming"] is False and summary["tok_s"] == 2.0
        assert summary["read_mib"] is None and summary["io_s_per_token"] is None
        assert summary["compute_s_per_token"] is None
    tokens = parse_bmoe_csv(read("2026-07-12_qwen_mmap.csv"))["tokens"]
    assert tokens[0]["wall_ms"] == 1250.017
    assert all(row["io_ms"] is None and row["read_bytes"] is None and row["compute_ms"] is None for row in tokens)


def test_end_of_run_lines_old_and_new_formats() -> None:
    old = only_summary(parse_bmoe_log(read("2026-07-12_qwen_stream.log")))  # BOM, no "+ cache mgmt"
    assert (old["tokens"], old["read_mib_per_token"], old["io_s_per_token"], old["read_mib_per_s"]) == \
        (256, 1050.75, 0.462, 2272)
    assert old["mgmt_s_per_token"] is None and old["overlap"] is False
    auto = only_summary(parse_bmoe_log(read("2026-07-13_gemma_auto_ov.log")))  # "(auto, resized 0×)", moe-overlap
    assert (auto["cache_budget_mib"], auto["cache_resizes"], auto["stall_s_per_token"]) == (4610, 0, 0.058)
    assert auto["mgmt_s_per_token"] == 0.022
    prefetch = only_summary(parse_bmoe_log(read("2026-07-12-pr23_qwen_sg_pf2.log")))  # + moe-prefetch, spec-gate
    assert (prefetch["spec_read_mib"], prefetch["spec_useful"], prefetch["spec_experts"]) == (42606.2, 12449, 13734)
    traced = only_summary(parse_bmoe_log(read("2026-07-15-route-trace_qwen.log")))  # llama.cpp's log around it
    assert (traced["cpu_occupancy_pct"], traced["threads"], traced["majflt_per_token"]) == (82.5, 4, 18.26)
    assert (traced["ttft_s"], traced["cache_hit_pct"], traced["cache_resident_mib"]) == (36.053, 74.9, 3997.7)


def test_a_log_of_several_runs_gives_one_summary_each() -> None:
    rows = parse_bmoe_log(read("2026-07-20-cache-replay_qwen-ab-run1.log"))["summary"]
    assert [(r["request"], r["tok_s"], r["cache_hit_pct"]) for r in rows] == [(0, 5.310, 70.8), (1, 3.567, 72.8)]


def test_progress_lines_per_token_and_answer_hash() -> None:
    tables = parse_bmoe_log(read("format-sample-progress.log"))
    tokens = tables["tokens"]
    assert [row["token"] for row in tokens] == [1, 2, 3, 4]
    assert tokens[0]["read_bytes"] == round(97.50 * MIB) and tokens[0]["io_ms"] == 81.3
    assert tokens[0]["majflt"] == 3 and tokens[2]["majflt"] == 0  # a measured 0 stays 0
    assert tokens[1]["cpu_ms"] is None and tokens[1]["majflt"] is None  # cpu_ms 0.0: unmeasured, and so its faults
    assert tokens[1]["dense_resident_frac"] is None  # -1
    assert all(row["stall_ms"] is None for row in tokens)  # serial (no moe-overlap line)
    summary = only_summary(tables)  # the answer's own "generation: sat on" line is not read
    assert (summary["tokens"], summary["tok_s"], summary["cache_evictions"], summary["cache_rereads"]) == \
        (4, 13.201, 3, 2)
    assert summary["output_sha256"] == hashlib.sha256(b"The cat\ngeneration: sat on").hexdigest()


def test_session_mode_done_line() -> None:
    tables = parse_bmoe_log(read("format-sample-session.log"))
    assert {row["request"] for row in tables["tokens"]} == {7}
    summary = only_summary(tables)
    assert (summary["source"], summary["request"], summary["tok_s"], summary["read_mib"]) == ("done", 7, 8.403, 195.0)
    assert summary["cache_hit_pct"] is None and summary["cache_resident_mib"] is None  # -1: no cache
    assert summary["output_sha256"] == hashlib.sha256(b"Hi!").hexdigest()


@pytest.mark.parametrize(("csv_path", "log_path"), PAIRS, ids=lambda p: p.name)
def test_csv_and_log_of_one_run_agree(csv_path: Path, log_path: Path) -> None:
    from_csv = only_summary(parse_bmoe_csv(csv_path.read_bytes()))
    from_log = only_summary(parse_bmoe_log(log_path.read_bytes()))
    # the log prints some numbers with fewer decimals than the CSV: compare at the log's precision
    tolerance = {"read_mib_per_token": 0.005, "read_mib_per_s": 0.5, "prefill_tps": 0.055, "ttft_s": 0.0015}
    compared = 0
    for key in SUMMARY_COLUMNS:
        a, b = from_csv[key], from_log[key]
        if a is None or b is None or key in ("source", "output_sha256"):
            continue
        compared += 1
        assert b == pytest.approx(a, abs=tolerance.get(key, 1e-9)), key
    assert compared >= 8
    assert from_csv["streaming"] == from_log["streaming"] and from_csv["overlap"] == from_log["overlap"]


@pytest.mark.parametrize("stem", ["synth_nocache", "synth_cache16"])
def test_csv_and_log_tokens_of_one_run_agree(stem: str) -> None:
    from_csv = parse_bmoe_csv(read(f"{stem}.csv"))["tokens"]
    from_log = parse_bmoe_log(read(f"{stem}.log"))["tokens"]
    assert [row["token"] for row in from_csv] == [row["token"] for row in from_log] == list(range(1, 17 if "16" in
                                                                                               stem else 13))
    compared = 0
    for a, b in zip(from_csv, from_log, strict=True):
        for key, tolerance in TOKEN_TOLERANCE.items():
            assert (a[key] is None) == (b[key] is None), (a["token"], key)  # the same null rules from either file
            if a[key] is not None:
                compared += 1
                assert b[key] == pytest.approx(a[key], abs=tolerance), (a["token"], key)
        assert a["majflt"] == b["majflt"]
    assert compared >= 6 * len(from_csv)


def test_newest_v2_capture_values_by_hand() -> None:
    # bmoe-cli 0.19.0 built from the archive, --cache-mb 16 --force-cache: CSV row 1 "1,16,7.048,4.483,2.281,1585152,
    # 19.35,0.000,0.285,0,6.106,-1.000,0,..." and row 2 "...,0.264,1,..." (loop_overhead_ms 0.264, wall_ms 9.936)
    csv = parse_bmoe_csv(read("synth_cache16.csv"))
    first, second = csv["tokens"][:2]
    assert (first["io_ms"], first["read_bytes"], first["cache_hit_pct"], first["mgmt_ms"]) == \
        (4.483, 1585152, 19.35, 0.285)
    assert first["majflt"] == 0 and first["cpu_ms"] == 6.106  # measured (cpu_ms > 0): a 0 fault count is real
    assert first["stall_ms"] is None  # serial
    assert first["gap_ms"] is None and second["gap_ms"] == pytest.approx(0.264 + 9.936)
    summary = only_summary(csv)
    assert (summary["cfg_bmoe_metrics"], summary["cfg_engine"], summary["cfg_cache_mb"]) == ("v2", "0.19.0", 16)
    assert (summary["tok_s"], summary["cache_evictions"], summary["cache_rereads"]) == (74.077, 7, 1)
    log = parse_bmoe_log(read("synth_cache16.log"))
    assert log["tokens"][0]["io_ms"] == 4.5 and log["tokens"][0]["read_bytes"] == round(1.51 * MIB)
    # the answer block holds the whole text, which is every BMOE_PROGRESS delta_text joined (no "reset" here)
    deltas = "".join(json.loads(line.split(" ", 1)[1])["delta_text"] for line in
                     read("synth_cache16.log").decode().splitlines() if line.startswith("BMOE_PROGRESS"))
    assert only_summary(log)["output_sha256"] == hashlib.sha256(deltas.encode()).hexdigest()


def test_request_row_uses_the_harness_names() -> None:
    summary = only_summary(parse_bmoe_log(read("2026-07-17_gpt_k2.out")))
    row = bmoe_request_row(summary)
    assert set(row) == {"request", *REQUEST_COLUMNS}
    assert row["decode_tps"] == 1.790 and row["prefill_tps"] == 1.8 and row["prompt_n"] == 96
    assert row["predicted_per_token_ms"] == pytest.approx(559.0)
    assert row["engine_read_bytes_per_token"] == pytest.approx(908.52 * MIB)
    assert row["engine_cache_hit_pct"] is None  # no cache
    for name in ("decode_tps", "prefill_tps"):  # compare, gate and F4 read these columns of the requests table
        assert METRICS[name].needs == (name,) and METRICS[name].table.name == "requests"


def test_parse_command_reads_both_kinds(tmp_path: Path) -> None:
    for name, rows in (("2026-07-17_gpt_k2.csv", 257), ("2026-07-17_gpt_k2.out", 1)):
        result = cli_in_process("parse", "bmoe", str(BMOE / name))
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert len(out) == rows and out[0]["table"] == "summary" and out[0]["tok_s"] == 1.790
        assert {row["table"] for row in out[1:]} <= {"tokens"}
    assert parse("bmoe", read("2026-07-12_qwen_stream.csv"))[1]["io_ms"] == 462.868


MALFORMED = [
    ("bad.log", 'BMOE_PROGRESS {"step":1,"steps":4,"wall_ms":120.4\n', "line 1: BMOE_PROGRESS: invalid JSON"),
    ("bad2.log", 'BMOE_PROGRESS {"steps":4,"wall_ms":1.0}\n', "line 1: BMOE_PROGRESS: no 'step'"),
    ("bad.txt", "generation: 4 tokens, 0.076 s/token (13.201 tok/s)\nmoe-stream: read 17 MiB\n",
     "line 2: malformed 'moe-stream:' line"),
    ("bad.csv", "step,steps,wall_ms,io_ms\n1,4,1.0,0.5\n2,4,1.0\n", "line 3: expected 4 comma-separated fields"),
    ("bad2.csv", "step,steps,wall_ms\n1,4,fast\n", "line 2: not a number"),
    ("bad3.csv", "# bmoe_metrics v9\nstep,steps,wall_ms\n", "line 1: bmoe_metrics v9: this parser reads v1 and v2"),
    ("bad4.csv", "step,steps,wall_ms\n1,4,1.0\n# summary tokens=4 s/tok\n", "line 3: # summary: expected key=number"),
    ("empty.log", "llama_model_loader: nothing else\n", "no BigMoeOnEdge output found"),
]


@pytest.mark.parametrize(("name", "text", "expected"), MALFORMED, ids=[case[0] for case in MALFORMED])
def test_malformed_input_says_what_and_which_line(name: str, text: str, expected: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse("bmoe", text.encode())
    assert expected in str(caught.value)


def test_malformed_input_through_the_cli_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    for name, text, expected in (MALFORMED[0], MALFORMED[2], MALFORMED[3]):
        path = tmp_path / name
        path.write_text(text)
        result = cli_in_process("parse", "bmoe", str(path))
        message = result.stderr.strip()
        assert result.returncode == 2 and "\n" not in message and "Traceback" not in message, message
        assert f"{path}: {expected}" in message, message


def test_answer_text_with_unicode_line_separators_stays_inside_its_json_line() -> None:
    # bmoe-cli escapes only control characters below 0x20: U+2028 and U+0085 reach the log raw, inside delta_text
    line = ('BMOE_PROGRESS {"step":1,"steps":1,"wall_ms":5.0,"io_ms":1.0,"compute_ms":4.0,"mgmt_ms":0.0,'
            '"stall_ms":0.0,"read_mb":1.00,"cache_hit_pct":-1.0,"majflt":0,"cpu_ms":9.0,'
            '"dense_resident_frac":1.000,"delta_reasoning":"","delta_text":"a\u2028b\x85c\\u001c"}\n')
    tokens = parse_bmoe_log(line.encode())["tokens"]
    assert [(row["token"], row["read_bytes"]) for row in tokens] == [(1, MIB)]


# summary-only logs: cuts of the archive's logs holding only the end-of-run moe- lines (SOURCE.md, summary-only/)
SUMMARY_ONLY = {  # file: (s_per_token, read_mib, read_mib_per_token, compute, mgmt, io, MiB/s, stall, cache_hit_pct)
    "2026-07-12_qwen_stream.moe.log": (0.585, 268992.0, 1050.75, 0.123, None, 0.462, 2272, None, None),
    "2026-07-12_qwen_stream_ov.moe.log": (0.785, 268992.0, 1050.75, 0.412, None, 1.627, 646, None, None),
    "2026-07-12_gemma_c2000_l4.moe.log": (0.447, 93586.7, 365.57, 0.226, None, 0.221, 1652, None, 58.0),
    "2026-07-12-pr23_gemma_base.moe.log": (0.317, 93562.6, 365.48, 0.138, 0.046, 0.535, 683, 0.133, 58.0),
    "2026-07-12-pr23_qwen_sg_pf2.moe.log": (0.334, 98947.3, 386.51, 0.230, 0.099, 0.464, 834, 0.006, 88.1),
    "2026-07-13_qwen_auto_ov.moe.log": (0.229, 43391.7, 169.50, 0.154, 0.024, 0.236, 718, 0.051, 81.5),
    "2026-07-14_gptoss-matrix_k2_io4_pf0.moe.log": (1.455, 12858.0, 535.75, 1.159, 0.094, 0.747, 717, 0.202, 20.4),
    "2026-07-15-route-trace_qwen.moe.log": (0.177, 20023.9, 156.44, 0.114, 0.021, 0.208, 753, 0.042, 74.9),
    "2026-07-17_driver-k2.moe.log": (0.456, 151128.4, 590.35, 0.156, 0.084, 1.118, 528, 0.217, 32.0),
    "2026-07-20-cache-replay_driver2_lanes8.moe.log": (0.414, 150371.5, 587.39, 0.131, 0.067, 1.065, 551, None, 32.3),
    "2026-07-20-sidecar_ab-sidecar_a1.moe.log": (0.396, 62868.0, 654.88, 0.068, 0.0, 0.327, 2001, None, None),
}
_SUMMARY_ONLY_KEYS = ("s_per_token", "read_mib", "read_mib_per_token", "compute_s_per_token", "mgmt_s_per_token",
                      "io_s_per_token", "read_mib_per_s", "stall_s_per_token", "cache_hit_pct")


@pytest.mark.parametrize("name", sorted(SUMMARY_ONLY))
def test_summary_only_log_values_by_hand_and_the_rest_null(name: str) -> None:
    tables = parse_bmoe_log((DATA / "bmoe" / "summary-only" / name).read_bytes())
    assert tables["tokens"] == []
    (row,) = tables["summary"]
    assert tuple(row[key] for key in _SUMMARY_ONLY_KEYS) == SUMMARY_ONLY[name]
    assert row["source"] == "log" and row["streaming"] is True
    # what a summary-only log does not print: no invented token count, rate, prefill or load time
    assert (row["tokens"], row["tok_s"], row["n_prompt"], row["prefill_s"], row["load_s"], row["ttft_s"]) == (
        None, None, None, None, None, None)


def test_summary_only_prefetch_and_auto_budget_lines() -> None:
    (row,) = parse_bmoe_log((DATA / "bmoe" / "summary-only" / "2026-07-12-pr23_qwen_sg_pf2.moe.log").read_bytes())[
        "summary"]
    assert (row["spec_read_mib"], row["spec_useful"], row["spec_experts"]) == (42606.2, 12449, 13734)
    (row,) = parse_bmoe_log((DATA / "bmoe" / "summary-only" / "2026-07-13_qwen_auto_ov.moe.log").read_bytes())[
        "summary"]
    assert (row["cache_budget_mib"], row["cache_resizes"], row["cache_resident_mib"]) == (4675, 0, 4675.3)


def test_summary_only_lines_of_several_runs_give_a_row_each() -> None:
    """What `grep -E 'moe-stream:|moe-overlap:'` keeps of a log holding several runs."""
    folder = DATA / "bmoe" / "summary-only"
    data = b"".join((folder / name).read_bytes() for name in (
        "2026-07-17_driver-k2.moe.log", "2026-07-12_qwen_stream.moe.log", "2026-07-12-pr23_gemma_base.moe.log"))
    rows = parse_bmoe_log(data)["summary"]
    assert [(r["request"], r["s_per_token"], r["overlap"]) for r in rows] == [
        (0, 0.456, True), (1, 0.585, False), (2, 0.317, True)]


def test_summary_only_does_not_change_full_logs() -> None:
    """A log with its generation: line is read as before: the moe-stream decode figure is not a column there."""
    (row,) = parse_bmoe_log((DATA / "bmoe" / "2026-07-12_qwen_stream.log").read_bytes())["summary"]
    assert "decode_s_per_token" not in row and row["s_per_token"] == 0.585 and row["tokens"] == 256
