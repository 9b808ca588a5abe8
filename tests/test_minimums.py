"""Validity minimums (harness/results/minimums.py): a run whose decode is too short to mean anything is marked
invalid with the reason, kept in the tables, listed in report.md and left out of every summary, compare and gate
-- like a perturbed run, but never counted back in (``--include-perturbed`` is about interference).

Quick: the rules on hand-written rows (requests: every request's ``predicted_n`` and decode time; llama-bench:
every generating test, prompt-only ones exempt), the selection, and the experiment key. Slow: a real campaign
(llama-bench and llama-server on a small synthetic model) decoding 8 tokens under ``min_decode_tokens: 16``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from harness.config.experiment import load_experiment
from harness.errors import ConfigError
from harness.results.loader import load_result_set
from harness.results.metrics import METRICS
from harness.results.minimums import Minimums, reasons, verdict_columns
from harness.results.samples import invalid_note, samples
from harness.results.selection import invalid_runs, usable_runs
from tests.helpers import run_cli

SIXTEEN = Minimums(min_decode_tokens=16, min_window_s=None)


def request(index: int, tokens: int, ms: float) -> dict[str, object]:
    return {"index": index, "predicted_n": tokens, "predicted_ms": ms}


def test_a_request_below_the_token_minimum_names_how_many_and_the_shortest() -> None:
    rows = {"requests": [request(0, 32, 400.0), request(1, 8, 100.0), request(2, 12, 150.0)]}
    (line,) = reasons(rows, SIXTEEN)
    assert line == ("too short: 2 of 3 requests below 16 tokens (shortest: request 1, 8 tokens; "
                    "validity.min_decode_tokens)")
    assert reasons({"requests": [request(0, 16, 200.0)]}, SIXTEEN) == []  # the minimum itself is enough


def test_the_window_minimum_reads_the_engines_decode_time() -> None:
    limits = Minimums(min_decode_tokens=None, min_window_s=1.0)
    (line,) = reasons({"requests": [request(0, 64, 2500.0), request(1, 64, 640.0)]}, limits)
    assert "1 of 2 requests below 1 s" in line and "0.64 s" in line and "validity.min_window_s" in line


def test_llama_bench_prompt_tests_are_exempt_and_generating_tests_are_held() -> None:
    bench = [{"test": "pp16", "n_gen": 0, "avg_ns": 1e8}, {"test": "tg8", "n_gen": 8, "avg_ns": 2e8}]
    (line,) = reasons({"bench": bench}, SIXTEEN)
    assert line == "too short: the tg test below 16 tokens (shortest: tg8, 8 tokens; validity.min_decode_tokens)"
    assert reasons({"bench": bench[:1]}, SIXTEEN) == []  # prompt processing decodes nothing
    assert reasons({"fio": [{"job_name": "randread-64k-qd1"}]}, SIXTEEN) == []  # a step that decodes nothing


def test_a_run_that_is_not_ok_or_has_no_minimums_is_not_judged() -> None:
    rows = {"requests": [request(0, 4, 50.0)]}
    assert verdict_columns(rows, SIXTEEN, ok=False) == {"invalid": False, "invalid_reason": None}
    assert verdict_columns(rows, None, ok=True) == {"invalid": False, "invalid_reason": None}
    assert Minimums.of(None) is None  # validity: off, or a set made before minimums
    assert verdict_columns(rows, SIXTEEN, ok=True)["invalid"] is True


def test_an_invalid_run_is_never_a_measurement() -> None:
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "status": ["ok", "ok", "ok"], "perturbed": [False, True, False],
                         "invalid": [False, False, True], "invalid_reason": [None, None, "too short: the request"]})
    assert list(usable_runs(runs)["run_id"]) == ["a"]
    assert list(usable_runs(runs, include_perturbed=True)["run_id"]) == ["a", "b"]
    assert list(invalid_runs(runs)["run_id"]) == ["c"]


def _experiment(tmp_path: Path, validity: str) -> Path:
    path = tmp_path / "x.yaml"
    path.write_text(f"name: x\nfiles:\n  data: {{create: 1M}}\n{validity}\nsteps:\n  - fio: {{file: data}}\n")
    return path


def test_the_minimums_are_experiment_keys_checked_with_file_and_line(tmp_path: Path) -> None:
    path = _experiment(tmp_path, "validity: {min_decode_tokens: 64, min_window_s: 2}")
    limits = load_experiment(path).experiment.validity
    assert limits is not None and (limits.min_decode_tokens, limits.min_window_s) == (64, 2.0)
    with pytest.raises(ConfigError) as caught:
        load_experiment(_experiment(tmp_path, "validity: {min_decode_tokens: 0}"))
    assert str(caught.value).startswith(f"{tmp_path / 'x.yaml'}:4: validity.min_decode_tokens: ")
    assert "\n" not in str(caught.value)


SHORT = """\
name: too-short
model: {synth: {layers: 4, experts: 8, used: 2}}
cache: cold
rounds: 1
validity: {min_decode_tokens: 16, max_runqueue_pct: null, max_foreign_cpu_pct: null, max_steal_pct: null}
steps:
  - llama-bench: {args: [-p, 16, -n, 8, -t, 1, -r, 1]}
  - llama-server:
      args: [-t, 1, -c, 256, -np, 1]
      prompts: tests/data/llama/prompts.jsonl
      n_predict: 8
"""


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_a_campaign_decoding_too_few_tokens_marks_its_runs_invalid(tmp_path: Path) -> None:
    exp = tmp_path / "too-short.yaml"
    exp.write_text(SHORT)
    done = run_cli("run", str(exp), "--results", str(tmp_path / "results"),
                   "--scratch", f"/var/tmp/harness-tests/{tmp_path.name}-{os.getpid()}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "2 invalid run(s)" in done.stdout, done.stdout[-2000:]
    (result_set,) = (tmp_path / "results").iterdir()
    runs = pd.read_parquet(result_set / "tables" / "runs.parquet").set_index("step")
    assert list(runs["status"]) == ["ok", "ok"] and runs["invalid"].all()  # measured fine, too short
    assert runs.loc["llama-server", "invalid_reason"].startswith("too short: 3 of 3 requests below 16 tokens")
    assert runs.loc["llama-bench", "invalid_reason"].startswith("too short: the tg test below 16 tokens")
    report = (result_set / "report.md").read_text()
    assert "**2 invalid run(s)**" in report and "ok, too short" in report
    assert "## Requests" not in report  # no summary of runs that are not measurements
    loaded = load_result_set(result_set)
    assert samples(loaded, METRICS["decode_tps"]).empty and samples(loaded, METRICS["bench_tps"]).empty
    note = invalid_note(loaded)
    assert note is not None and "2 invalid runs are left out" in note  # what compare and gate print
