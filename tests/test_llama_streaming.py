"""The phenomenon, measured per request: an MoE larger than its memory budget streams experts from disk.

A synthetic qwen3moe of ~200 MB runs in llama-server inside a 96 MiB memory cgroup (read_ahead_kb 128):
each decoded token must bring its routed experts back from the device. Unlimited and warm, it reads nothing.
Device counters are machine-wide (other disk users only add to them), so the budgeted case is asserted as a
lower bound on device bytes and the unlimited warm case on the server's own major faults.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.helpers import BUILD_TIMEOUT_S, needs_cgroups, run_campaign

# llama.cpp is built (or found built) and emulation needs cgroups
pytestmark = [pytest.mark.slow, pytest.mark.timeout(BUILD_TIMEOUT_S), needs_cgroups()]

EXPERIMENT = """\
name: streaming
model: {{synth: {{size: 200M}}}}
cache: {cache}
steps:
  - llama-server:
      args: [-t, 1, -c, 256, -np, 1]
      prompts: tests/data/llama/prompts.jsonl
      n_predict: 8
"""


def _campaign(tmp_path: Path, cache: str, emulate: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    exp = tmp_path / "streaming.yaml"
    exp.write_text(EXPERIMENT.format(cache=cache) + emulate)
    done = run_campaign(str(exp), "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (result_set,) = (tmp_path / "results").iterdir()
    manifest = json.loads((result_set / "manifest.json").read_text())
    return pd.read_parquet(result_set / "tables" / "requests.parquet"), manifest


@pytest.mark.slow
def test_decode_streams_experts_under_a_budget(tmp_path: Path) -> None:
    limited, manifest = _campaign(tmp_path, "cold", "emulate: {memory: 96M, read_ahead_kb: 128}\n")
    expert_bytes_per_token = manifest["files"]["local"]["model"]["gguf"]["expert_bytes_per_token"]
    assert len(limited) == 3 and (limited["predicted_n"] == 8).all()
    # at least half of every token's routed experts came from the device, in the decode window alone
    assert (limited["decode_dev_read_bytes_per_token"] >= 0.5 * expert_bytes_per_token).all(), \
        limited[["decode_dev_read_bytes_per_token"]].to_string()
    assert (limited["decode_majflt_per_token"] > 0).all()


@pytest.mark.slow
def test_warm_without_a_budget_reads_nothing(tmp_path: Path) -> None:
    requests, _ = _campaign(tmp_path, "warm", "")
    assert len(requests) == 3 and (requests["residency_before_pct"] >= 99).all()
    # the server did not stream: streaming faults on every decoded token (the budgeted test above), while here
    # a whole request has fewer major faults than tokens. Not "zero": CI saw one stray fault in a request, a page
    # of the binary or a library evicted by a neighbour's memory pressure, which is not the model.
    assert (requests["request_majflt"] < requests["predicted_n"]).all(), \
        requests[["request_majflt", "predicted_n"]].to_string()


@pytest.mark.slow
def test_budget_too_small_is_a_failed_run_with_the_evidence(tmp_path: Path) -> None:
    exp = tmp_path / "streaming.yaml"
    # "-lm none" (no mmap) loads the weights into anonymous memory, which a 16M budget cannot reclaim:
    # the OOM kill is certain. (With mmap the server may instead thrash file pages for minutes.)
    text = EXPERIMENT.format(cache="cold").replace("args: [-t, 1, -c, 256, -np, 1]",
                                                   "args: [-t, 1, -c, 256, -np, 1, -lm, none]\n"
                                                   "      health_timeout_s: 120\n      timeout_s: 180")
    assert "-lm, none" in text
    exp.write_text(text + "emulate: {memory: 16M}\n")
    done = run_campaign(str(exp), "--results", str(tmp_path / "results"))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    (result_set,) = (tmp_path / "results").iterdir()
    (run_json,) = result_set.glob("raw/local/*/run.json")
    record = json.loads(run_json.read_text())
    assert record["status"] == "failed"
    assert "llama-server exited with -9" in record["error"] and "OOM" in record["error"]
    # the killed server was reaped by the step: its exit status and faults are in the record
    assert record["rusage"]["llama-server"]["exit_code"] == -9
