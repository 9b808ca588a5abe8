"""Engines declared in YAML (engines/*.yaml, an experiment's engines:): the shipped declarations read their samples
(tests/data/engines/<name>/, each with a SOURCE.md) into the expected rows, a bad declaration is one line with
file:line, the run template keeps every argument one argument, the decode window, probes kept as facts, and (slow)
one declared engine run for real in a small campaign."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.campaign.declared import engine_facts
from harness.config.declared_engine import load_declaration
from harness.parsers.declared import extract
from runner.steps.declared import render_argv, run_probes
from tests.helpers import REPO, cli_in_process, run_campaign

SAMPLES = REPO / "tests" / "data" / "engines"


def _rules(name: str) -> tuple[list[dict], list[int] | None]:
    declaration = load_declaration(REPO / "engines" / f"{name}.yaml").declaration
    window = list(declaration.decode_window) if declaration.decode_window else None
    return [rule.model_dump(exclude_none=True) for rule in declaration.extract], window


def test_every_shipped_declaration_is_named_after_its_file_and_has_samples() -> None:
    shipped = sorted((REPO / "engines").glob("*.yaml"))
    assert {"flash-moe", "inferssd", "powerinfer"} <= {p.stem for p in shipped}
    for path in shipped:
        assert load_declaration(path).declaration.name == path.stem
        assert (SAMPLES / path.stem / "SOURCE.md").is_file()


def test_powerinfer_reads_2023_print_timings() -> None:
    rules, _ = _rules("powerinfer")
    tables = extract(rules, {"stderr": (SAMPLES / "powerinfer" / "print-timings.stderr").read_bytes()})
    assert tables["tokens"] == []
    assert tables["requests"] == [{
        "request": 0, "load_ms": 1234.56, "prompt_ms": 925.78, "prompt_n": 24, "prompt_per_token_ms": 38.57,
        "prefill_tps": 25.92, "predicted_ms": 4178.32, "predicted_n": 31, "predicted_per_token_ms": 134.78,
        "decode_tps": 7.42, "total_ms": 5211.06}]


def test_powerinfer_reads_llama_perf_context_print_and_not_the_sampler_line() -> None:
    rules, _ = _rules("powerinfer")
    row = extract(rules, {"stderr": (SAMPLES / "powerinfer" / "perf-context.stderr").read_bytes()})["requests"][0]
    assert row == {"request": 0, "load_ms": 812.40, "prompt_ms": 402.11, "prompt_n": 16, "prompt_per_token_ms": 25.13,
                   "prefill_tps": 39.79, "predicted_ms": 3875.00, "predicted_n": 31, "predicted_per_token_ms": 125.00,
                   "decode_tps": 8.00, "total_ms": 4700.22}


def test_flash_moe_tokens_statistics_timing_and_results_tsv() -> None:
    rules, _ = _rules("flash-moe")
    outputs = {name: (SAMPLES / "flash-moe" / f"run.{name}").read_bytes() for name in ("stdout", "stderr")}
    outputs["results.tsv"] = (SAMPLES / "flash-moe" / "results.tsv").read_bytes()
    tables = extract(rules, outputs, [2, 4])
    assert tables["tokens"] == [
        {"request": 0, "token": 1, "token_id": 785, "gap_ms": 412},
        {"request": 0, "token": 2, "token_id": 1850, "gap_ms": 298},
        {"request": 0, "token": 3, "token_id": 311, "gap_ms": 301},
        {"request": 0, "token": 4, "token_id": 1281, "gap_ms": 295}]
    row = tables["requests"][0]
    assert row["total_ms"] == pytest.approx(2900.0) and row["ttft_ms"] == 1604 and row["predicted_n"] == 4
    assert row["predicted_ms"] == pytest.approx(1300.0) and row["decode_tps"] == 2.31
    assert (row["experts_k"], row["layers"]) == (4, 60)
    assert row["layer_expert_io_ms"] == 2.345 and row["layer_total_layer_ms"] == 4.760
    assert row["layer_sum_phases_ms"] == 5.257
    assert "layer_cmd_buffers_ms" not in row  # a count with trailing text, not a phase time
    # the last row of the experiment log
    assert (row["tsv_tok_s"], row["tsv_ttft_ms"], row["tsv_commit"]) == (2.49, 2712, "a5a969f")
    # tokens 2..4 took 298 + 301 + 295 ms
    assert row["window_s"] == pytest.approx(0.894) and row["window_tps"] == pytest.approx(3 / 0.894)


def test_inferssd_load_and_pack_build_apart_from_decode_and_its_window() -> None:
    rules, window = _rules("inferssd")
    assert window == [129, 256]  # the declaration's own window
    stdout = (SAMPLES / "inferssd" / "run.stdout").read_bytes()
    row = extract(rules, {"stdout": stdout}, [2, 4])["requests"][0]
    assert row == {"request": 0, "load_ms": 850.5, "pack_build_ms": 12000.0, "prompt_ms": 95.0, "predicted_n": 4,
                   "predicted_ms": 100.0, "window_first_token": 2, "window_last_token": 4,
                   "window_s": pytest.approx(0.1), "window_tps": pytest.approx(30.0)}


def test_a_window_the_engine_did_not_reach_is_null_not_zero() -> None:
    rules, window = _rules("inferssd")
    row = extract(rules, {"stdout": (SAMPLES / "inferssd" / "run.stdout").read_bytes()}, window)["requests"][0]
    assert (row["window_first_token"], row["window_last_token"]) == (129, 256)
    assert row["window_s"] is None and row["window_tps"] is None


def test_missing_output_gives_no_rows_and_bad_json_names_the_line() -> None:
    rules, _ = _rules("inferssd")
    assert extract(rules, {}) == {"tokens": [], "requests": []}
    with pytest.raises(ValueError, match="line 2: stdout: invalid JSON after 'INFERSSD_TOKEN '"):
        extract(rules, {"stdout": b'INFERSSD_TOKEN {"index": 1, "ms": 2}\nINFERSSD_TOKEN {oops\n'})


def test_run_template_keeps_each_argument_whole() -> None:
    values = {"binary": "/opt/my engine/bin", "prompt": 'say "hi"; rm -rf / $(x) `y`', "odd": "{prompt}", "n": 8}
    argv = render_argv(["{binary}", "-p", "{prompt}", "--odd={odd}", "-n", "{n}"], values)
    assert argv == ["/opt/my engine/bin", "-p", 'say "hi"; rm -rf / $(x) `y`', "--odd={prompt}", "-n", "8"]


def test_bad_declaration_is_exit_2_with_file_line_and_field(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text("name: x\nengines:\n  mine:\n    binary: /bin/true\n    run: ['{binary}']\n    extract:\n"
                   "      - {table: tokens, regex: '(?P<a>\\d+)', columns: {token: b}}\nsteps:\n"
                   "  - run: {engine: mine, model: null}\n")
    done = cli_in_process("plan", str(exp))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0] == (f"error: {exp}:7: engines.mine.extract[0]: columns name groups the regex does not have: b "
                        "(its named groups: a)")


def test_bad_shipped_file_names_its_own_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nbinary: x\nrun: ['{binary}']\nextract:\n  - {table: tokens, source: trace.csv, "
                   "csv: {}, columns: {token: i}}\n")
    exp = tmp_path / "e.yaml"
    exp.write_text(f"name: x\nengines: {{bad: {bad}}}\nsteps:\n  - run: {{engine: bad, model: null}}\n")
    done = cli_in_process("plan", str(exp))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith(f"error: {bad}:4: extract: rule 0 reads 'trace.csv', which is neither stdout")


def test_unknown_engine_and_unused_args_are_refused_at_their_step(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text("name: x\nsteps:\n  - run: {engine: nosuch}\n")
    done = cli_in_process("plan", str(exp))
    assert done.returncode == 2 and f"{exp}:3:" in done.stderr and "'nosuch' is not declared" in done.stderr
    assert "flash-moe" in done.stderr  # the shipped ones are listed
    exp.write_text("name: x\nmodel: /m\nsteps:\n  - run: {engine: powerinfer, args: {thread: 4}}\n")
    done = cli_in_process("plan", str(exp))
    assert done.returncode == 2 and "args thread are not placeholders of its run template" in done.stderr
    exp.write_text("name: x\nmodel: /m\nsteps:\n  - run: {engine: inferssd, n_predict: 200}\n")
    done = cli_in_process("plan", str(exp))  # its declared window [129, 256] needs 256 tokens
    assert done.returncode == 2 and "decode_window [129, 256] ends after n_predict (200)" in done.stderr


def test_inferssd_profile_probe_is_kept_raw_as_a_fact() -> None:
    declaration = load_declaration(REPO / "engines" / "inferssd.yaml").declaration
    profile = SAMPLES / "inferssd" / "profile.stdout"
    # a stand-in for the inferssd binary: its `profile --model M` prints the sample profile
    stand_in = [sys.executable, "-c", f"import sys; sys.stdout.write(open({str(profile)!r}).read())"]
    spec = {"binary": stand_in[0], "model": "/models/m.gguf", "values": dict(declaration.defaults),
            "probes": {"profile": stand_in + list(declaration.probes["profile"][1:])}}
    facts = engine_facts("inferssd", {"build_dir": None, "built_now_s": None, "probes": run_probes(spec, None)})
    assert facts["declared.inferssd.probe.profile"] == profile.read_text()
    assert facts["declared.inferssd.probe.profile.returncode"] == 0


@pytest.mark.slow
def test_a_declared_engine_runs_for_real_in_a_campaign(tmp_path: Path) -> None:
    """The script engine (tests/data/engines/script/engine.py) declared inline, built once, probed, run with an
    argument holding spaces and quotes; its llama.cpp-style lines become the requests and tokens tables."""
    declaration = {
        "build": {"commands": [[sys.executable, "-c", "open('built', 'w').write('ok')"]]},
        "binary": sys.executable,
        "run": ["{binary}", str(SAMPLES / "script" / "engine.py"), "-n", "{n_predict}", "--note", "{note}",
                "--built", "{build_dir}/built"],
        "defaults": {"note": "default"},
        "probes": {"profile": ["{binary}", "-c", "print('profile: 4096-byte packs')"]},
        "extract": json.loads(json.dumps(_rules("powerinfer")[0] + _rules("flash-moe")[0][:1])),
    }
    exp = tmp_path / "e.yaml"
    exp.write_text(json.dumps({
        "name": "declared", "cache": "none", "validity": "off", "engines": {"script": declaration},
        "steps": [{"run": {"engine": "script", "model": None, "n_predict": 8, "decode_window": [2, 8],
                           "args": {"note": 'two words "quoted" $HOME'}}}]}))
    done = run_campaign(str(exp), "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout + done.stderr
    from harness.results.loader import load_result_set

    rs = load_result_set(next((tmp_path / "results").iterdir()))
    request = rs.table("requests").iloc[0]
    assert request["engine"] == "script" and request["predicted_n"] == 8 and request["decode_tps"] > 0
    assert request["prompt_n"] == 4 and request["window_tps"] == pytest.approx(7 / 0.014)
    assert list(rs.table("tokens")["token"]) == list(range(1, 9))
    # compare, gate and trend read them as they read llama-server's
    from harness.results.metrics import METRICS
    from harness.results.samples import samples

    for metric in ("decode_tps", "window_tps", "load_ms"):
        assert len(samples(rs, METRICS[metric])) == 1, metric
    manifest = json.loads((rs.path / "manifest.json").read_text())
    recorded = manifest["declared_engines"]["script"]
    assert len(recorded["sha256"]) == 64 and recorded["declaration"]["binary"] == sys.executable
    assert request["declaration_sha256"] == recorded["sha256"]
    facts = rs.table("facts").set_index("key")["value"]
    assert facts["declared.script.probe.profile"].strip() == "profile: 4096-byte packs"
    run_dir = next((rs.path / "raw").glob("*/*"))
    argv = json.loads((run_dir / "argv.json").read_text())
    assert argv[:4] == ["-n", "8", "--note", 'two words "quoted" $HOME'] and argv[5].endswith("/built")


def test_the_shipped_example_plans_engines_as_a_matrix_axis() -> None:
    done = cli_in_process("plan", str(REPO / "experiments" / "examples" / "declared-engines.yaml"))
    assert done.returncode == 0, done.stderr
    assert "engine=powerinfer" in done.stdout and "engine=inferssd" in done.stdout


def test_a_build_runs_once_and_a_failed_build_says_which_command_and_log(tmp_path: Path) -> None:
    from runner.steps.base import StepFailed
    from runner.steps.declared import ensure_built

    spec = {"engine": "e", "build_key": "k1", "build": {"timeout_s": 60, "commands": [
        [sys.executable, "-c", "import os; open('count', 'a').write('x')"]]}}
    directory, seconds = ensure_built(str(tmp_path), spec)
    assert seconds is not None and Path(directory, "DONE").exists()
    assert ensure_built(str(tmp_path), spec) == (directory, None)  # cached: not built again
    assert Path(directory, "count").read_text() == "x"
    broken = {**spec, "build_key": "k2", "build": {"timeout_s": 60, "commands": [
        [sys.executable, "-c", "import sys; print('no compiler'); sys.exit(3)"]]}}
    with pytest.raises(StepFailed, match=r"build command .* exited with 3: no compiler \(log: .*k2/build.log\)"):
        ensure_built(str(tmp_path), broken)
    assert not Path(tmp_path, "cache", "declared", "k2", "DONE").exists()
