"""llama-bench and llama-server steps end to end on the real llama.cpp build and a tiny synthetic MoE.

Each test writes a run spec the way the campaign does (the step part from the controller's ``runner_spec``),
runs the real runner (``python -m runner run``) in a subprocess, and ingests the run directory with the
controller's step. The build comes from the shared cache (tests/test_engine_build.py builds it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.engines.llamacpp import CPU_NATIVE_FLAGS, DEFAULT_CACHE_DIR, BuildInfo, build_llamacpp
from harness.models.synth import SynthInfo
from harness.parsers import parse
from harness.steps import STEPS
from runner.contract import CONTRACT_VERSION
from tests.helpers import REPO, run_cli, synced_synth_moe, wait_for

SDIST = "llama-cpp-python==0.3.36"
NATIVE_BIN = REPO / "runner" / "native" / "bin"
PROMPTS = REPO / "tests" / "data" / "llama" / "prompts.jsonl"

# Every test here needs the llama.cpp build: whichever runs first builds it when the cache is empty (~6 min on two
# quiet cores, much longer on a busy machine), and pytest-timeout counts fixture setup, so the default is too short.
pytestmark = pytest.mark.timeout(3600)


@pytest.fixture(scope="module")
def llama_bin_dir() -> str:
    cache = Path(os.environ.get("HARNESS_BUILD_CACHE", str(DEFAULT_CACHE_DIR))).expanduser()
    build: BuildInfo = build_llamacpp({"sdist": SDIST}, list(CPU_NATIVE_FLAGS), cache_dir=cache, log=print)
    return str(build.binary("llama-server").parent)


@pytest.fixture(scope="module")
def tiny_moe() -> Iterator[SynthInfo]:
    with synced_synth_moe("llama-tiny", layers=4, experts=8, used=2) as info:
        yield info


def run_step(tmp_path: Path, kind: str, options: dict[str, Any], model: str, bin_dir: str, cache: str,
             collectors: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """One run through the real runner; returns (run.json, tables from the controller's ingest).

    Fails when any process naming the model is still alive after the runner has exited.
    """
    step = STEPS[kind]
    config = step.Config.model_validate(options)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = {"contract": CONTRACT_VERSION, "run_id": f"t-{kind}-{cache}", "cache": cache, "cache_files": [model],
            "block_device": "auto", "native_bin": str(NATIVE_BIN), "collectors": collectors or [], "emulate": None,
            "engines": {"llama.cpp": {"bin_dir": bin_dir}},
            "step": {"kind": kind, **step.runner_spec(config, {"model": model}, cache)}}
    (run_dir / "spec.json").write_text(json.dumps(spec))
    try:
        done = subprocess.run([sys.executable, "-m", "runner", "run", str(run_dir / "spec.json")], cwd=REPO,
                              capture_output=True, text=True, timeout=900)
    finally:
        # whatever happened, nothing of this run may still be running (the runner's job; checked here, and
        # stopped here by pid so that a failing test leaves no server behind either)
        leftover = processes_using(model)
        for line in leftover:
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
    assert leftover == [], leftover
    assert (run_dir / "DONE").exists(), done.stderr
    record = json.loads((run_dir / "run.json").read_text())
    return record, step.ingest(run_dir, record)


def processes_using(path: str) -> list[str]:
    """Command lines of live processes that name ``path`` (the test model is unique to this session)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if path in cmdline and "llama-" in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


@pytest.mark.slow
def test_llama_bench_step_rows_and_samples(tmp_path: Path, llama_bin_dir: str, tiny_moe: SynthInfo) -> None:
    options = {"args": ["-p", 16, "-n", 8, "-t", 1, "-r", 2]}
    collectors = [{"kind": "blockstat", "period_ms": 10}, {"kind": "threads", "period_ms": 5}]
    record, tables = run_step(tmp_path, "llama-bench", options, tiny_moe.path, llama_bin_dir, "cold", collectors)
    assert record["status"] == "ok", record["error"]
    bench = tables["bench"]
    assert [r["test"] for r in bench] == ["pp16", "tg8"]
    assert all(r["avg_tps"] > 0 and len(r["samples_tps"]) == 2 for r in bench)
    assert bench[0]["n_threads"] == 1 and bench[0]["model_filename"] == tiny_moe.path
    assert bench[0]["model_size_bytes"] > 0 and bench[0]["build_commit"]
    assert [(s["test"], s["sample"]) for s in tables["bench_samples"]] == [
        ("pp16", 0), ("pp16", 1), ("tg8", 0), ("tg8", 1)]
    # the collectors ran during the step, on the bench process
    run_dir = tmp_path / "run"
    assert (run_dir / "blockstat.txt").stat().st_size > 0 and (run_dir / "threads.txt").stat().st_size > 0
    assert record["rusage"]["llama-bench"]["exit_code"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_llama_server_step_per_request(tmp_path: Path, llama_bin_dir: str, tiny_moe: SynthInfo, cache: str) -> None:
    options = {"args": ["-t", 1, "-c", 512, "-np", 1], "prompts": str(PROMPTS), "n_predict": 8,
               "decode_window": [3, 8]}
    record, tables = run_step(tmp_path, "llama-server", options, tiny_moe.path, llama_bin_dir, cache)
    assert record["status"] == "ok", record["error"]
    rows = tables["requests"]
    assert [r["request"] for r in rows] == [0, 1, 2] and [r["prompt_index"] for r in rows] == [0, 1, 2]
    for row in rows:
        assert row["cache"] == cache and row["predicted_n"] == 8 and row["prompt_n"] > 10
        assert row["prefill_tps"] > 0 and row["decode_tps"] > 0 and row["decode_tokens"] == 7
        # the decode window lies inside the request: it cannot have moved more bytes or faults
        assert 0 <= row["decode_dev_read_bytes"] <= row["request_dev_read_bytes"]
        assert 0 <= row["decode_majflt"] <= row["request_majflt"]
        assert row["request_utime_s"] + row["request_stime_s"] >= 0
        assert 0 < row["prefill_s"] < row["request_s"] and 0 < row["decode_s"] < row["request_s"]
        assert 0 < row["window_s"] <= row["decode_s"] and row["window_tps"] > 0
        assert 0 <= row["window_dev_read_bytes"] <= row["decode_dev_read_bytes"]
        if cache == "cold":
            # the server's mapping was paged out too: nothing of the model left in memory, so the server
            # faults the weights back in from the device (its own majflt: other disk users cannot fake it)
            assert row["residency_before_pct"] <= 1.0
            assert row["request_majflt"] > 0 and row["request_dev_read_bytes"] > 0
        else:
            # the server's own files were read into the cache before the request: no fault is left but the model's
            assert row["residency_before_pct"] >= 99.0 and row["request_majflt"] == 0, row
    # `harness parse llama-server` reads the runner's records as it reads saved responses
    saved = parse("llama-server", (tmp_path / "run" / "requests.jsonl").read_bytes())
    assert [r["predicted_n"] for r in saved] == [8, 8, 8]
    # every token's arrival, one streamed message per token
    assert [t["token"] for t in tables["tokens"]] == list(range(1, 9)) * 3
    assert record["summary"]["requests"] == 3 and record["rusage"]["llama-server"]["exit_code"] == 0


@pytest.mark.slow
def test_llama_server_bad_args_fail_with_the_log(tmp_path: Path, llama_bin_dir: str, tiny_moe: SynthInfo) -> None:
    options = {"args": ["--no-such-option", 3], "prompts": str(PROMPTS), "n_predict": 8}
    record, tables = run_step(tmp_path, "llama-server", options, tiny_moe.path, llama_bin_dir, "warm")
    assert record["status"] == "failed"
    assert "llama-server exited" in record["error"] and "--no-such-option" in record["error"]
    assert tables == {}


@pytest.mark.slow
def test_llama_server_not_healthy_in_time_is_killed(tmp_path: Path, llama_bin_dir: str,
                                                     tiny_moe: SynthInfo) -> None:
    options = {"args": ["-t", 1], "prompts": str(PROMPTS), "n_predict": 8, "health_timeout_s": 0.001}
    record, _ = run_step(tmp_path, "llama-server", options, tiny_moe.path, llama_bin_dir, "warm")
    assert record["status"] == "failed" and "not healthy within" in record["error"]


CAMPAIGN = """\
name: llama-e2e
model: {synth: {layers: 4, experts: 8, used: 2}}
cache: both
matrix: {threads: [1]}
collect:
  blockstat: {period_ms: 10}
  threads: {period_ms: 5}
steps:
  - llama-bench: {args: [-p, 16, -n, 8, -t, "{threads}", -r, 2]}
  - llama-server:
      args: [-t, "{threads}", -c, 512, -np, 1]
      prompts: tests/data/llama/prompts.jsonl
      n_predict: 8
"""


@pytest.mark.slow
def test_campaign_with_llama_steps_fills_bench_and_requests(tmp_path: Path, llama_bin_dir: str) -> None:
    import pandas as pd

    exp = tmp_path / "llama-e2e.yaml"
    exp.write_text(CAMPAIGN)
    done = run_cli("run", str(exp), "--results", str(tmp_path / "results"),
                   "--scratch", f"/var/tmp/harness-tests/{tmp_path.name}-{os.getpid()}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (result_set,) = (tmp_path / "results").iterdir()
    tables = result_set / "tables"
    runs = pd.read_parquet(tables / "runs.parquet")
    assert sorted(zip(runs["step"], runs["cache"], runs["status"], strict=True)) == [
        ("llama-bench", "cold", "ok"), ("llama-bench", "warm", "ok"),
        ("llama-server", "cold", "ok"), ("llama-server", "warm", "ok")]
    bench = pd.read_parquet(tables / "bench.parquet")
    assert sorted(bench["test"]) == ["pp16", "pp16", "tg8", "tg8"] and (bench["avg_tps"] > 0).all()
    assert len(pd.read_parquet(tables / "bench_samples.parquet")) == 8
    requests = pd.read_parquet(tables / "requests.parquet")
    assert sorted(requests["cache"]) == ["cold"] * 3 + ["warm"] * 3
    assert (requests["predicted_n"] == 8).all() and requests["run_id"].isin(runs["run_id"]).all()
    cold = requests[requests["cache"] == "cold"]
    assert (cold["residency_before_pct"] <= 1.0).all() and (cold["request_majflt"] > 0).all()


@pytest.mark.slow
def test_server_started_again_when_its_port_was_taken(tmp_path: Path, llama_bin_dir: str, tiny_moe: SynthInfo,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from runner.collectors.run import Collectors
    from runner.run_context import RunContext
    from runner.steps import llama_server

    # the race (another process binds the chosen port first) made deterministic: the picker's first
    # answer is a port this test holds; the server is real
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    answers = [busy.getsockname()[1]]
    real_free_port = llama_server.free_port
    monkeypatch.setattr(llama_server, "free_port", lambda: answers.pop() if answers else real_free_port())
    ctx = RunContext({"engines": {"llama.cpp": {"bin_dir": llama_bin_dir}}}, str(tmp_path),
                     Collectors([], str(NATIVE_BIN), str(tmp_path), None))
    spec = {"model": tiny_moe.path, "args": ["-t", 1], "timeout_s": 120}
    try:
        proc, port, load_s = llama_server.start_server(ctx, spec)
        assert port != busy.getsockname()[1] and load_s > 0 and proc.poll() is None
        assert len(ctx.processes) == 2 and ctx.processes[0].returncode == 1  # the first one could not bind
    finally:
        ctx.cleanup()
        busy.close()
    assert processes_using(tiny_moe.path) == []


def _start_runner(tmp_path: Path, bin_dir: str, model: str, n_predict: int) -> subprocess.Popen[bytes]:
    step = STEPS["llama-server"]
    config = step.Config.model_validate({"args": ["-t", 1, "-c", 512, "-np", 1], "prompts": str(PROMPTS),
                                         "n_predict": n_predict, "requests_per_prompt": 50})
    spec = {"contract": CONTRACT_VERSION, "run_id": "t-fault", "cache": "warm", "cache_files": [model],
            "block_device": "auto", "native_bin": str(NATIVE_BIN), "collectors": [], "emulate": None,
            "engines": {"llama.cpp": {"bin_dir": bin_dir}},
            "step": {"kind": "llama-server", **step.runner_spec(config, {"model": model}, "warm")}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    runner = subprocess.Popen([sys.executable, "-m", "runner", "run", str(tmp_path / "spec.json")], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    requests = tmp_path / "requests.jsonl"

    def two_requests_done() -> bool:
        if runner.poll() is not None:
            log = tmp_path / "llama-server.stderr"
            pytest.fail(f"the runner exited ({runner.returncode}) before two requests were recorded: "
                        + (log.read_text()[-2000:] if log.exists() else "no llama-server.stderr"))
        return requests.read_text().count("\n") >= 2  # not there yet: OSError, "not yet"

    try:
        wait_for("two requests recorded in requests.jsonl", two_requests_done, timeout=300)
    except BaseException:
        _stop_leftovers(runner, model)
        raise
    return runner


def _stop_leftovers(runner: subprocess.Popen[bytes], model: str) -> list[str]:
    if runner.poll() is None:
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
    leftover = processes_using(model)
    for line in leftover:
        os.kill(int(line.split(":")[0]), signal.SIGKILL)
    return leftover


@pytest.mark.slow
def test_server_killed_mid_run_fails_the_run_with_its_exit(tmp_path: Path, llama_bin_dir: str,
                                                         tiny_moe: SynthInfo) -> None:
    runner = _start_runner(tmp_path, llama_bin_dir, tiny_moe.path, n_predict=400)
    try:
        (server,) = processes_using(tiny_moe.path)
        os.kill(int(server.split(":")[0]), signal.SIGKILL)  # a crash, or the OOM killer, mid-request
        assert runner.wait(timeout=120) == 1
    finally:
        leftover = _stop_leftovers(runner, tiny_moe.path)
    assert leftover == []
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["status"] == "failed" and "llama-server exited with -9" in record["error"]
    assert record["rusage"]["llama-server"]["exit_code"] == -9
    assert len(STEPS["llama-server"].ingest(tmp_path, record)["requests"]) >= 2


@pytest.mark.slow
def test_runner_stopped_mid_request_leaves_no_server(tmp_path: Path, llama_bin_dir: str,
                                                     tiny_moe: SynthInfo) -> None:
    runner = _start_runner(tmp_path, llama_bin_dir, tiny_moe.path, n_predict=400)
    try:
        runner.send_signal(signal.SIGTERM)  # as the controller does on Ctrl-C, in the middle of a request
        assert runner.wait(timeout=120) == 1
    finally:
        leftover = _stop_leftovers(runner, tiny_moe.path)
    assert leftover == []
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["status"] == "interrupted"
    # the requests measured before the stop are kept and ingest
    rows = STEPS["llama-server"].ingest(tmp_path, record)["requests"]
    assert len(rows) >= 2 and all(r["predicted_n"] == 400 for r in rows)


@pytest.mark.slow
def test_cold_and_warm_requests_generate_the_same_text(tmp_path: Path, llama_bin_dir: str,
                                                       tiny_moe: SynthInfo) -> None:
    # temperature 0: paging the weights out and back in must not change a single byte of the output
    options = {"args": ["-t", 1, "-c", 512, "-np", 1], "prompts": str(PROMPTS), "n_predict": 16}
    texts = {}
    for cache in ("cold", "warm"):
        (tmp_path / cache).mkdir()
        record, _ = run_step(tmp_path / cache, "llama-server", options, tiny_moe.path, llama_bin_dir, cache)
        assert record["status"] == "ok", record["error"]
        lines = (tmp_path / cache / "run" / "requests.jsonl").read_text().splitlines()
        texts[cache] = [json.loads(line)["content"] for line in lines]
    assert len(texts["cold"]) == 3 and all(texts["cold"])
    assert texts["cold"] == texts["warm"]


@pytest.mark.slow
def test_llama_server_honours_a_variable_it_reads(tmp_path: Path, llama_bin_dir: str, tiny_moe: SynthInfo) -> None:
    """llama.cpp reads LLAMA_ARG_CTX_SIZE as -c (common/arg.cpp's set_env): the real server's own log shows the
    context the variable asked for (768, a multiple of 256 it keeps as is; the model's default is 4096), so the
    variable reached the engine process through the runner."""
    options = {"args": ["-t", 1, "-np", 1], "prompts": str(PROMPTS), "n_predict": 4,
               "env": {"LLAMA_ARG_CTX_SIZE": "768"}}
    record, tables = run_step(tmp_path, "llama-server", options, tiny_moe.path, llama_bin_dir, "warm")
    assert record["status"] == "ok", record.get("error")
    assert record["spec"]["step"]["env"] == {"LLAMA_ARG_CTX_SIZE": "768"}
    log = (tmp_path / "run" / "llama-server.stderr").read_text(errors="replace")
    assert re.findall(r"n_ctx_slot = (\d+)", log) == ["768"], log[-2000:]
    assert len(tables["requests"]) >= 1
