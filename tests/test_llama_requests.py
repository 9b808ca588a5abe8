"""llama step pieces that need no llama.cpp build: config checks, prompts, request windows, cold page-out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.steps import STEPS
from harness.steps.llamacpp import LlamaBenchConfig, LlamaServerConfig, request_row, token_rows
from runner import pagecache
from runner.steps import pageout
from runner.steps.llama_server import proc_stat
from runner.steps.pageout import make_cold, warm_engine_files
from tests.helpers import REPO, run_cli, wait_for

NATIVE_BIN = str(REPO / "runner" / "native" / "bin")


def test_owned_args_are_refused() -> None:
    with pytest.raises(ValidationError, match="--port"):
        LlamaServerConfig.model_validate({"prompts": ["hi"], "args": ["-t", 2, "--port", 8080]})
    with pytest.raises(ValidationError, match="stream"):
        LlamaServerConfig.model_validate({"prompts": ["hi"], "request": {"stream": False}})
    with pytest.raises(ValidationError, match="-o"):
        LlamaBenchConfig.model_validate({"args": ["-p", 16, "-o", "csv"]})
    assert LlamaBenchConfig.model_validate({"args": ["-t", 2, "-r", 3]}).args == ["-t", 2, "-r", 3]


def test_prompts_file_is_read_into_the_spec(tmp_path: Path) -> None:
    config = LlamaServerConfig.model_validate({"prompts": "experiments/prompts/short.jsonl", "n_predict": 16})
    assert len(config.prompts) == 5 and config.prompts[0].startswith("Explain in two sentences")
    spec = STEPS["llama-server"].runner_spec(config, {"model": "/m/model.gguf"}, "cold")
    # the prompts travel in the spec, so a remote target needs no copy of the file
    assert spec["prompts"] == config.prompts and spec["model"] == "/m/model.gguf" and spec["cache"] == "cold"
    assert spec["n_predict"] == 16 and spec["timeout_s"] > 0
    assert spec["request"] == {"ignore_eos": True}  # fixed decode length unless asked otherwise
    natural = LlamaServerConfig.model_validate({"prompts": ["hi"], "ignore_eos": False, "request": {"top_k": 1}})
    assert STEPS["llama-server"].runner_spec(natural, {"model": "/m"}, "warm")["request"] == {
        "ignore_eos": False, "top_k": 1}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"text": "no prompt key"}\n')
    with pytest.raises(ValidationError, match="bad.jsonl:2"):
        LlamaServerConfig.model_validate({"prompts": str(bad)})
    with pytest.raises(ValidationError, match="not found"):
        LlamaServerConfig.model_validate({"prompts": str(tmp_path / "missing.jsonl")})


def test_plan_names_the_line_of_a_bad_llama_step(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    exp = tmp_path / "x.yaml"
    exp.write_text(f"name: x\nmodel: {model}\nmatrix: {{threads: [1, 2]}}\nsteps:\n"
                   "  - llama-bench: {args: [-t, '{threads}']}\n"
                   "  - llama-server:\n      prompts: nowhere.jsonl\n")
    done = run_cli("plan", str(exp))
    assert done.returncode != 0
    assert "x.yaml:7" in done.stderr and "nowhere.jsonl" in done.stderr


def _stat(read_ios: int, read_sectors: int, time_in_queue_ms: int) -> str:
    # 11-field /sys/block/DEV/stat: read_ios merges sectors ticks, write x4, in_flight io_ticks time_in_queue
    return f"{read_ios} 0 {read_sectors} 0 0 0 0 0 0 0 {time_in_queue_ms}"


def test_request_row_splits_prefill_and_decode() -> None:
    s = 1_000_000_000
    record = {
        "index": 4, "prompt_index": 1, "repeat": 1, "cache": "cold", "n_predict": 5, "residency_before_pct": 0.2,
        "timings": {"prompt_n": 20, "prompt_ms": 500.0, "prompt_per_second": 40.0, "predicted_n": 5,
                    "predicted_ms": 2000.0, "predicted_per_second": 2.5},
        "marks": {
            "start": {"mono_ns": 10 * s, "blockstat": _stat(100, 1000, 50),
                      "proc": {"majflt": 7, "utime_s": 1.0, "stime_s": 0.5}},
            "first_token": {"mono_ns": 11 * s, "blockstat": _stat(110, 3000, 1050),
                            "proc": {"majflt": 17, "utime_s": 1.5, "stime_s": 0.75}},
            "end": {"mono_ns": 13 * s, "blockstat": _stat(130, 7096, 4050),
                    "proc": {"majflt": 57, "utime_s": 3.0, "stime_s": 1.25}}}}
    row = request_row(record)
    assert (row["request"], row["prompt_index"], row["cache"], row["t_ns"]) == (4, 1, "cold", 10 * s)
    assert (row["prefill_tps"], row["decode_tps"], row["predicted_n"]) == (40.0, 2.5, 5)
    assert (row["request_s"], row["prefill_s"], row["decode_s"]) == (3.0, 1.0, 2.0)
    assert row["request_dev_read_bytes"] == 6096 * 512 and row["request_dev_read_ios"] == 30
    assert row["decode_dev_read_bytes"] == 4096 * 512 and row["decode_dev_read_ios"] == 20
    assert row["decode_dev_avg_read_io_bytes"] == 4096 * 512 / 20
    assert row["decode_dev_avg_inflight"] == 1.5  # 3000 ms in queue over 2 s
    assert row["prefill_dev_avg_inflight"] == 1.0 and row["decode_dev_read_bytes_per_s"] == 4096 * 512 / 2
    assert (row["request_majflt"], row["decode_majflt"], row["decode_utime_s"], row["decode_stime_s"]) == (
        50, 40, 1.5, 0.5)
    # 5 tokens predicted: the first ends prefill, 4 are generated in the decode window
    assert row["decode_tokens"] == 4 and row["decode_dev_read_bytes_per_token"] == 4096 * 512 / 4
    assert row["decode_majflt_per_token"] == 10
    assert (row["t_first_token_ns"], row["t_end_ns"]) == (11 * s, 13 * s)
    assert "window_s" not in row  # no decode_window asked for
    assert row["cold_reached"] is True and row["pageout_error"] is None
    record["residency_before_pct"], record["pageout"] = 40.0, {"error": "process_madvise: Function not implemented"}
    row = request_row(record)
    assert row["cold_reached"] is False and "not implemented" in row["pageout_error"]
    assert "output_sha256" not in row  # no text recorded
    record.update(cache="warm", residency_before_pct=99.5, content="héllo")
    row = request_row(record)
    assert row["warm_reached"] is True and "cold_reached" not in row
    # sha256 of the UTF-8 text (printf 'héllo' | sha256sum)
    assert row["output_sha256"] == "3c48591d8d098a4538f5e013dfcf406e948eac4d3277b10bf614e295d6068179"


def test_request_without_first_token_keeps_its_row() -> None:
    record = {"index": 0, "cache": "warm", "marks": {"start": {"mono_ns": 0, "blockstat": None, "proc": None}}}
    row = request_row(record)
    assert row["request"] == 0 and row["decode_s"] is None and row["request_dev_read_bytes"] is None


def _synced_random_file(path: Path, nbytes: int) -> Path:
    """``nbytes`` of random data at ``path``, on the disk (so that a dropped page must be read from the device)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(nbytes))
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    return path


def _mapping_holder(*paths: Path) -> subprocess.Popen[bytes]:
    """A process that maps ``paths`` (read-only, untouched) and touches every page of the first per stdin line."""
    return subprocess.Popen(
        [sys.executable, "-c", "import mmap,sys; f=[open(p,'rb') for p in sys.argv[1:]]; m=[mmap.mmap(h.fileno(),0,"
         "access=mmap.ACCESS_READ) for h in f]\nfor _ in iter(sys.stdin.readline, ''):\n"
         " print(sum(m[0][i] for i in range(0, len(m[0]), 4096)), flush=True)", *map(str, paths)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def test_cold_pages_out_a_file_another_process_maps(tmp_path: Path) -> None:
    # fadvise(DONTNEED) alone leaves mapped pages; a llama-server maps its whole model
    path = _synced_random_file(Path("/var/tmp/harness-tests") / f"mapped-{os.getpid()}.bin", 8 << 20)
    holder = _mapping_holder(path)
    try:
        holder.stdin.write(b"touch\n")
        holder.stdin.flush()
        holder.stdout.readline()  # every page touched and mapped
        pagecache._cachectl(NATIVE_BIN, "drop", [str(path)])
        assert pagecache.residency(NATIVE_BIN, [str(path)])[0]["resident_pct"] > 90  # DONTNEED alone: still there
        majflt_before = proc_stat(holder.pid)["majflt"]
        evicted, residency = make_cold(NATIVE_BIN, holder.pid, str(path))
        assert evicted["mapped_bytes"] == 8 << 20 and "error" not in evicted
        assert residency[0]["resident_pct"] <= 1.0
        holder.stdin.write(b"touch\n")
        holder.stdin.flush()
        holder.stdout.readline()
        # the holder's next touch had to fault the pages back in
        assert proc_stat(holder.pid)["majflt"] > majflt_before
    finally:
        holder.kill()
        holder.wait()
        path.unlink()


def test_a_request_meets_the_servers_own_files_cached_and_the_model_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    # code a request runs first (sampling, streaming, a libm routine) would fault in from the device and count as
    # the model's faults: every file the server maps but the model is read into the cache before the request
    base = Path("/var/tmp/harness-tests") / f"engine-{os.getpid()}"
    engine, model = base / "libengine.so", base / "model.gguf"
    for path in (engine, model):
        _synced_random_file(path, 4 << 20)
    holder = _mapping_holder(engine, model)
    try:
        wait_for("the holder's two mappings", lambda: sum(
            str(base) in line for line in Path(f"/proc/{holder.pid}/maps").read_text().splitlines()) == 2)
        pagecache.drop(NATIVE_BIN, [str(engine), str(model)])  # mapped but never touched: DONTNEED evicts them
        assert [r["resident_pct"] for r in pagecache.residency(NATIVE_BIN, [str(engine), str(model)])] == [0, 0]
        # a CUDA build's libraries are hundreds of MiB, mostly never touched: files past the cap are left
        monkeypatch.setattr(pageout, "ENGINE_FILE_MAX_BYTES", 1 << 20)
        assert str(engine) in warm_engine_files(NATIVE_BIN, holder.pid, str(model))["left"]
        assert pagecache.residency(NATIVE_BIN, [str(engine)])[0]["resident_pct"] == 0
        monkeypatch.undo()
        warmed = warm_engine_files(NATIVE_BIN, holder.pid, str(model))
        assert warmed["files"] >= 2 and warmed["read"] >= 1 and "left" not in warmed  # + python and its libraries
        engine_row, model_row = pagecache.residency(NATIVE_BIN, [str(engine), str(model)])
        assert engine_row["resident_pct"] == 100 and model_row["resident_pct"] == 0
        majflt_before = proc_stat(holder.pid)["majflt"]
        holder.stdin.write(b"touch\n")
        holder.stdin.flush()
        holder.stdout.readline()
        assert proc_stat(holder.pid)["majflt"] == majflt_before  # the engine's pages came from the cache
    finally:
        holder.kill()
        holder.wait()
        for path in (engine, model):
            path.unlink()
        base.rmdir()


def test_decode_window_and_token_times() -> None:
    s = 1_000_000_000

    def mark(t: float, read_sectors: int, majflt: int) -> dict:
        return {"mono_ns": int(t * s), "blockstat": _stat(read_sectors // 8, read_sectors, 0),
                "proc": {"majflt": majflt, "utime_s": 0.0, "stime_s": 0.0}}
    record = {"index": 2, "cache": "warm", "decode_window": [3, 6],
              "timings": {"prompt_n": 9, "predicted_n": 6},
              "token_ns": [int(t * s) for t in (1.0, 1.5, 2.0, 2.25, 2.5, 3.0)], "token_counts": [1, 2, 3, 4, 5, 6],
              "marks": {"start": mark(0, 0, 0), "first_token": mark(1.0, 800, 1), "window_start": mark(1.5, 1600, 2),
                        "window_end": mark(3.0, 4800, 5), "end": mark(3.0, 4800, 5)}}
    row = request_row(record)
    # tokens 3..6 arrive between token 2 (1.5 s) and token 6 (3.0 s)
    assert (row["window_first_token"], row["window_last_token"], row["window_s"]) == (3, 6, 1.5)
    assert row["window_tps"] == 4 / 1.5 and row["window_dev_read_bytes"] == 3200 * 512 and row["window_majflt"] == 3
    assert row["decode_client_tps"] == 5 / 2.0  # tokens 2..6 over the 2 s after the first
    tokens = token_rows(record)
    assert [(t["token"], t["gap_ms"]) for t in tokens] == [
        (1, None), (2, 500.0), (3, 500.0), (4, 250.0), (5, 250.0), (6, 500.0)]
    assert tokens[0]["request"] == 2 and tokens[5]["t_ns"] == 3 * s
    with pytest.raises(ValidationError, match="decode_window"):
        LlamaServerConfig.model_validate({"prompts": ["hi"], "n_predict": 8, "decode_window": [1, 8]})
    with pytest.raises(ValidationError, match="n_predict"):
        LlamaServerConfig.model_validate({"prompts": ["hi"], "n_predict": 8, "decode_window": [2, 9]})


def test_stop_server_escalates_to_sigkill_and_takes_the_group(tmp_path: Path) -> None:
    from runner.collectors.run import Collectors
    from runner.run_context import RunContext
    from runner.steps.llama_server import stop_server

    ctx = RunContext({}, str(tmp_path), Collectors([], NATIVE_BIN, str(tmp_path), None))
    # a "server" that ignores SIGTERM and has a child of its own in its process group
    proc = ctx.spawn(["sh", "-c", "trap '' TERM; sleep 300 & echo $! > child.pid; wait"], name="stubborn")
    child_pid_file = tmp_path / "child.pid"
    child = int(wait_for("the stubborn server's child to write child.pid", lambda: child_pid_file.read_text().strip(),
                         timeout=60, interval=0.01))
    try:
        assert stop_server(ctx, proc, grace_s=0.2) == -9
        assert ctx.rusage["stubborn"]["exit_code"] == -9
        # the server's own child went with the group (gone, or a zombie waiting for init to reap it)
        try:
            state = Path(f"/proc/{child}/stat").read_text().rpartition(")")[2].split()[0]
        except FileNotFoundError:
            state = "gone"
        assert state in ("gone", "Z")
    finally:
        ctx.cleanup()


def test_token_count_follows_the_servers_running_count() -> None:
    from runner.steps.llama_http import _running_count

    # tokens 2 and 3 ended in incomplete UTF-8: the server held them back and sent them with token 4,
    # listing one token id; its running count says where the stream really is
    stream = [{"content": "a", "tokens": [10], "tokens_predicted": 1},
              {"content": "\u00e9b", "tokens": [11], "tokens_predicted": 4},
              {"content": "", "tokens": [], "stop": True, "tokens_predicted": 4}]
    counts, count = [], 0
    for msg in stream:
        count = _running_count(msg, count)
        counts.append(count)
    assert counts == [1, 4, 4]
    # builds without tokens_predicted: token ids, else one per message with text
    assert _running_count({"tokens": [1, 2]}, 3) == 5 and _running_count({"content": "x"}, 3) == 4
    assert _running_count({"content": "", "stop": True}, 3) == 3


def test_cold_and_warm_bounds_are_the_runners() -> None:
    """The controller judges a request's residency by the bounds the runner prepared the cache to: one definition
    (runner/contract.py), so the two cannot drift apart."""
    from harness.steps.llamacpp import request_row
    from runner import contract, pagecache

    assert (pagecache.COLD_MAX_PCT, pagecache.WARM_MIN_PCT) == (contract.COLD_MAX_PCT, contract.WARM_MIN_PCT)
    at_bound = {"index": 0, "residency_before_pct": contract.COLD_MAX_PCT}
    assert request_row({**at_bound, "cache": "cold"})["cold_reached"] is True
    assert request_row({**at_bound, "cache": "cold", "residency_before_pct": contract.COLD_MAX_PCT + 0.1}
                       )["cold_reached"] is False
    assert request_row({"index": 0, "cache": "warm", "residency_before_pct": contract.WARM_MIN_PCT}
                       )["warm_reached"] is True
