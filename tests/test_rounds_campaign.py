"""(slow) Rounds until tight in a real campaign: a declared stand-in engine (tests/data/engines/noisy) whose
decode speed has a spread set per matrix cell; the noisy cell runs more rounds than the quiet one, the quiet one
no fewer than ``min``, the noisy one no more than ``max``, interleaved, and the manifest and report.md say why each
stopped. A set stopped in its extra rounds resumes to the same rounds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from harness.config.declared_engine import load_declaration
from tests.helpers import REPO, private_targets_dir, run_campaign, wait_for

pytestmark = pytest.mark.slow
ENGINE = REPO / "tests" / "data" / "engines" / "noisy" / "engine.py"
# the noisy cell first: it is the baseline, which a tight cell's step would keep running (stop: cell)
SPREADS = [40, 0]


def _experiment(tmp_path: Path, spreads: list[int] = SPREADS, stop: str = "cell") -> Path:
    extract = load_declaration(REPO / "engines" / "powerinfer.yaml").declaration.extract
    noisy = {"binary": sys.executable, "run": ["{binary}", str(ENGINE), "-n", "{n_predict}", "--spread", "{spread}"],
             "defaults": {"spread": "0"}, "extract": [rule.model_dump(exclude_none=True) for rule in extract]}
    exp = tmp_path / "e.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "tight", "cache": "none", "validity": "off", "engines": {"noisy": noisy}, "matrix": {"spread": spreads},
        "rounds": {"min": 3, "max": 5, "until": {"metric": "decode_tps", "ci_halfwidth_pct": 3, "stop": stop}},
        "steps": [{"run": {"engine": "noisy", "model": None, "n_predict": 8, "args": {"spread": "{spread}"}}}]}))
    return exp


def _check(path: Path) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    runs = manifest["runs"]
    assert all(r["status"] == "ok" for r in runs), [r["status"] for r in runs]
    rounds = {spread: sorted(r["round"] for r in runs if r["params"]["spread"] == spread) for spread in SPREADS}
    # the quiet cell (500 tok/s every run) is tight at once, but runs the minimum; the noisy one is never tight
    assert rounds[0] == [1, 2, 3]
    assert rounds[40] == [1, 2, 3, 4, 5]
    assert [r["params"]["spread"] for r in runs] == [40, 0, 40, 0, 40, 0, 40, 40]  # interleaved, then alone
    stopping = manifest["targets"][0]["stopping"]
    assert (stopping["rule"], stopping["looks"], stopping["metric"]) == ("bonferroni", 3, "decode_tps")
    by_cell = {c["params"]["spread"]: c for c in stopping["cells"]}
    assert (by_cell[0]["reason"], by_cell[0]["rounds"], by_cell[0]["halfwidth_pct"]) == ("tight", 3, 0)
    assert by_cell[40]["reason"] == "max" and by_cell[40]["rounds"] == 5 and by_cell[40]["halfwidth_pct"] > 3
    assert by_cell[40]["n"] == 5 and by_cell[40]["rounds_run"] == 5
    report = (path / "report.md").read_text()
    assert "tight at round 3 (half-width 0.00 %)" in report and "max reached at round 5 (half-width" in report


def test_a_noisy_cell_runs_more_rounds_than_a_quiet_one_within_min_and_max(tmp_path: Path) -> None:
    done = run_campaign(str(_experiment(tmp_path)), "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "round 4: 1 cell(s) not tight yet: run spread=40" in done.stdout + done.stderr
    _check(next((tmp_path / "results").iterdir()))


@pytest.mark.parametrize(("spreads", "stop"), [([0, 40], "cell"), ([40, 0], "all")])
def test_the_baseline_or_with_stop_all_every_cell_runs_on_beside_the_noisy_one(tmp_path: Path, spreads: list[int],
                                                                              stop: str) -> None:
    """The quiet cell is the baseline (first value: it runs on while the noisy cell of its step runs), or stop:
    all: either way it is measured in every round the noisy one is, A B A B to the end, and its own look still
    says it was tight at round 3."""
    done = run_campaign(str(_experiment(tmp_path, spreads, stop)), "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((next((tmp_path / "results").iterdir()) / "manifest.json").read_text())
    assert [r["params"]["spread"] for r in manifest["runs"]] == spreads * 5
    by_cell = {c["params"]["spread"]: c for c in manifest["targets"][0]["stopping"]["cells"]}
    assert (by_cell[0]["reason"], by_cell[0]["rounds_run"]) == ("tight", 5)
    assert (by_cell[40]["reason"], by_cell[40]["rounds_run"]) == ("max", 5)
    # stop: cell judged the quiet cell once (tight at 3); stop: all judges it until every cell is done
    assert by_cell[0]["rounds"] == (3 if stop == "cell" else 5)


def test_a_step_without_the_metric_stops_at_min_and_is_not_judged(tmp_path: Path) -> None:
    exp = _experiment(tmp_path, [40])
    data = yaml.safe_load(exp.read_text())
    data["files"] = {"data": {"create": "1M"}}
    data["steps"].insert(0, {"read": {"file": "data"}})  # read_mbps, never decode_tps
    exp.write_text(yaml.safe_dump(data))
    done = run_campaign(str(exp), "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout + done.stderr
    path = next((tmp_path / "results").iterdir())
    manifest = json.loads((path / "manifest.json").read_text())
    assert [r["step"] for r in manifest["runs"]] == ["read", "run"] * 3 + ["run"] * 2
    by_step = {c["step"]: c for c in manifest["targets"][0]["stopping"]["cells"]}
    assert (by_step["read"]["reason"], by_step["read"]["rounds_run"]) == ("no-metric", 3)
    assert by_step["run"]["reason"] == "max"
    assert "not judged: its runs report no such metric" in (path / "report.md").read_text()


@pytest.mark.parametrize(("phase", "nth"), [
    ("between-runs", 6),  # the last planned run done, its round not judged yet: resume judges it
    ("run", 7),  # the first extra round's run stopped while it runs: resume measures it again
])
def test_a_set_stopped_in_its_extra_rounds_resumes_to_the_same_rounds(tmp_path: Path, phase: str, nth: int) -> None:
    results, release = tmp_path / "results", tmp_path / "release"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(_experiment(tmp_path)), "--results", str(results),
         "--targets-dir", str(private_targets_dir())], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "HARNESS_PAUSE_AT": phase, "HARNESS_PAUSE_RELEASE": str(release)})
    lines: list[str] = []
    assert proc.stderr is not None
    stderr = proc.stderr
    threading.Thread(target=lambda: lines.extend(stderr), daemon=True).start()
    try:
        for pause in range(1, nth + 1):
            wait_for(f"pause {pause} at {phase}", lambda n=pause: sum(f"paused at {phase}" in x for x in lines) >= n)
            if pause < nth:
                release.touch()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (path,) = list(results.iterdir())
    assert path.name.endswith(".incomplete")
    done = run_campaign("--resume", path.name, "--results", str(results))
    assert done.returncode == 0, done.stdout + done.stderr
    (final,) = list(results.iterdir())
    _check(final)



@pytest.mark.timeout(3600)  # builds llama.cpp when the cache is empty (tests/test_llama_steps.py)
def test_a_metric_with_tests_judges_each_test_of_a_cell(tmp_path: Path) -> None:
    """llama-bench's bench_tps is one metric per test (pp16, tg8): each is judged on its own, from the rows the
    step's ingest reads (the real llama-bench on the synthetic model), and a width no run reaches stops at max."""
    exp = tmp_path / "e.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "tight-bench", "cache": "none", "validity": "off", "model": {"synth": {"layers": 4, "experts": 8,
                                                                                       "used": 2}},
        "rounds": {"min": 2, "max": 3, "until": {"metric": "bench_tps", "ci_halfwidth_pct": 0.001}},
        "steps": [{"llama-bench": {"args": ["-p", 16, "-n", 8, "-t", 1, "-r", 2]}}]}))
    done = run_campaign(str(exp), "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    manifest = json.loads((next((tmp_path / "results").iterdir()) / "manifest.json").read_text())
    assert [r["round"] for r in manifest["runs"]] == [1, 2, 3]
    cells = manifest["targets"][0]["stopping"]["cells"]
    assert sorted((c["test"], c["reason"], c["n"], c["rounds"]) for c in cells) == [
        ("pp16", "max", 3, 3), ("tg8", "max", 3, 3)]
    assert all(c["halfwidth_pct"] > 0.001 for c in cells), cells
