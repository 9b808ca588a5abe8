"""The replay step in a real campaign on this machine: two strategies, cold, on a synthetic model, ingested into
the standard requests and tokens tables (engine ``replay``) with the bytes the trace asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.traces.model import read_trace
from harness.traces.synth import synth_trace
from tests.helpers import run_campaign, run_cli

EXPERIMENT = """\
name: replay-two
model: {synth: {layers: 4, experts: 8, used: 2}}
cache: cold
validity: off
matrix:
  strategy: [pread, mmap]
steps:
  - replay: {strategy: "{strategy}", tokens: 12, threads: 2, fadv_random: true,
             trace: {synth: {routing: zipf, reuse: 0.2, seed: 1}}}
"""


def _layout(path: Path) -> dict[tuple[int, str], tuple[int, int]]:
    rows = [line.split() for line in path.read_text().splitlines()[1:]]
    return {(int(layer), kind): (int(off), int(size)) for layer, kind, off, size in rows}


def _trace_bytes(run_dir: Path) -> tuple[float, int]:
    """Bytes per token the run's trace asks for, and the bytes of its distinct slices (what a cold run must read)."""
    layout, trace = _layout(run_dir / "layout.txt"), read_trace(run_dir / "trace.txt")
    per_layer = {layer: sum(size for (lay, _), (_, size) in layout.items() if lay == layer)
                 for layer in range(trace.n_layer)}
    per_token = sum(per_layer.values()) * trace.n_used
    distinct = {(layer, int(e)) for token in trace.experts for layer, ids in enumerate(token) for e in ids}
    return per_token, sum(per_layer[layer] for layer, _ in distinct)


@pytest.mark.slow
def test_two_replay_strategies_land_in_the_requests_table(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(EXPERIMENT)
    done = run_campaign(str(exp), "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    from harness.results.loader import load_result_set

    rs = load_result_set(next((tmp_path / "results").iterdir()))
    runs, requests, tokens = rs.table("runs"), rs.table("requests"), rs.table("tokens")
    assert set(runs["engine"]) == {"replay"} and len(requests) == 2
    assert sorted(requests["replay_strategy"]) == ["mmap", "pread"]
    for _, row in requests.iterrows():
        run_dir = next(rs.path.glob(f"raw/*/{row['run_id']}"))
        per_token, distinct = _trace_bytes(run_dir)
        assert row["decode_tps"] > 0 and bool(row["cold_reached"])
        assert row["replay_bytes_per_token"] == per_token
        mine = tokens[tokens["run_id"] == row["run_id"]]
        assert list(mine["token"]) == list(range(12)) and (mine["latency_ms"] > 0).all()
        # cold, readahead off: the program read from storage the trace's distinct slices, each once (pages round
        # up); its own count, as the shared device also carries other readers
        assert 0.95 * distinct <= mine["self_read_bytes"].sum() <= 1.3 * distinct, (row["run_id"], distinct)
        assert row["request_dev_read_bytes"] >= 0.95 * distinct


def test_a_trace_file_of_another_geometry_is_refused_at_plan_time_on_its_line(tmp_path: Path) -> None:
    trace = tmp_path / "t16.trace"
    trace.write_text(synth_trace(4, 16, 2, 3).to_text())  # 16 experts; the model has 8
    exp = tmp_path / "e.yaml"
    exp.write_text(EXPERIMENT.replace("trace: {synth: {routing: zipf, reuse: 0.2, seed: 1}}", f"trace: {trace}"))
    done = run_cli("plan", str(exp))
    assert done.returncode == 2
    assert "e.yaml:9: steps[0].replay.trace:" in done.stderr and "n_expert=16, the model 8" in done.stderr


def test_the_shipped_replay_example_plans() -> None:
    done = run_cli("plan", "experiments/examples/replay-strategies.yaml")
    assert done.returncode == 0, done.stderr
    assert "replay" in done.stdout


def test_a_model_the_controller_cannot_read_is_refused_at_plan_time(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text("name: replay-nopath\nmodel: /nowhere/model.gguf\nsteps:\n  - replay: {strategy: pread}\n")
    done = run_cli("plan", str(exp))
    assert done.returncode == 2
    assert "e.yaml:4: steps[0].replay.model:" in done.stderr and "controller's copy" in done.stderr
