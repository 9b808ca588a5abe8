"""Board state around runs on a fake Jetson: expectations read back before and after every run, the
temperature gate waited for and recorded, a failed expectation stops the campaign."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests import fakeboard as fb
from tests.helpers import run_cli


def _experiment(base: Path, expect: str, collect: str = "") -> Path:
    exp = base / "jet.yaml"
    exp.write_text(f"""name: jet
targets: [orin]
files:
  data: {{create: 4M}}
cache: none
rounds: 2
expect: {expect}
{collect}
steps:
  - read: {{file: data, pattern: seq}}
""")
    return exp


def _campaign(tmp_path: Path, expect: str, collect: str = "", **tree: object):  # noqa: ANN202
    root = fb.jetson_tree(tmp_path / "root", **tree)  # type: ignore[arg-type]
    bindir = fb.jetson_tools(tmp_path / "bin")
    targets = fb.target_dir(tmp_path, "orin", "jetson")
    results = tmp_path / "results"
    done = run_cli("run", str(_experiment(tmp_path, expect, collect)), "--targets-dir", str(targets),
                   "--results", str(results), "--scratch", str(tmp_path / "scratch"),
                   env=fb.jetson_env(root, bindir), timeout=300)
    sets = sorted(results.iterdir()) if results.exists() else []
    manifest = json.loads((sets[0] / "manifest.json").read_text()) if sets else None
    return done, sets, manifest


@pytest.mark.slow
def test_expectations_are_checked_around_every_run_and_the_gate_is_recorded(tmp_path: Path) -> None:
    done, sets, manifest = _campaign(tmp_path, "{power_mode: MAXN_SUPER, gui: off, tj_below_c: 60, "
                                               "mem_available_min: 3G}")
    assert done.returncode == 0, done.stdout + done.stderr
    runs = manifest["runs"]
    assert len(runs) == 2 and all(r["status"] == "ok" for r in runs)
    for run in runs:
        assert run["expectations_before"] == "ok" and run["expectations_after"] == "ok"
        gate = run["tj_gate"]
        assert gate["zone"] == "tj-thermal" and gate["start_c"] == 47.0 and gate["bound_c"] == 60.0
        assert gate["waited_s"] >= 0
        assert run["mem_gate"]["start_bytes"] == 4012345 * 1024 and run["mem_gate"]["bound_bytes"] == 3 << 30
    target = manifest["targets"][0]
    assert target["facts"]["power_mode_name"] == "MAXN_SUPER"
    # every run's entry state carries the clocks and the junction temperature it started with
    table = pd.read_parquet(sets[0] / "tables" / "runs.parquet")
    assert (table["entry_gpu_max_freq_hz"] == 1_020_000_000).all() and (table["entry_cpu_max_khz"] == 1_728_000).all()
    assert (table["entry_temp_tj-thermal_c"] == 47.0).all()
    assert all(r["ok"] for r in target["expectations_before"])


@pytest.mark.slow
def test_a_hot_board_that_does_not_cool_stops_the_campaign_before_the_run(tmp_path: Path) -> None:
    done, sets, manifest = _campaign(tmp_path, "{tj_below_c: 60, tj_wait_timeout_s: 0.3}", tj_millic=75000)
    assert done.returncode == 1
    assert "tj-thermal stayed at 75.0 C, not below 60 C" in done.stderr
    assert sets and sets[0].name.endswith(".incomplete")
    first = manifest["runs"][0]
    assert first["status"] == "skipped" and "tj_wait_timeout_s" in first["error"]
    assert not (sets[0] / "raw" / "orin" / first["run_id"] / "run.json").exists()  # nothing ran


@pytest.mark.slow
def test_a_non_super_board_never_runs(tmp_path: Path) -> None:
    done, sets, _ = _campaign(tmp_path, "{power_mode: MAXN_SUPER}", gpu_table=fb.NON_SUPER_GPU_TABLE)
    assert done.returncode == 1
    assert "624.75 MHz" in done.stderr and "Super clocks are not active" in done.stderr
    assert sets and sets[0].name.endswith(".incomplete")
    assert not list(sets[0].rglob("run.json"))  # not a single run was measured on the wrong clocks


@pytest.mark.slow
def test_memory_that_is_not_given_back_stops_the_campaign(tmp_path: Path) -> None:
    done, sets, manifest = _campaign(tmp_path, "{mem_available_min: 6G, mem_wait_timeout_s: 0.3}")
    assert done.returncode == 1
    assert "MemAvailable stayed at 3.8 GiB, below 6G" in done.stderr
    assert manifest["runs"][0]["status"] == "skipped"
