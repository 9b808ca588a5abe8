"""(slow) Rounds until tight in a real campaign: a declared stand-in engine (tests/data/engines/noisy) whose
decode speed has a spread set per matrix cell; the noisy cell runs more rounds than the quiet one, the quiet one
no fewer than ``min``, the noisy one no more than ``max``, interleaved, and the manifest says why each stopped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from harness.config.declared_engine import load_declaration
from tests.helpers import REPO, run_campaign

ENGINE = REPO / "tests" / "data" / "engines" / "noisy" / "engine.py"


@pytest.mark.slow
def test_a_noisy_cell_runs_more_rounds_than_a_quiet_one_within_min_and_max(tmp_path: Path) -> None:
    extract = load_declaration(REPO / "engines" / "powerinfer.yaml").declaration.extract
    noisy = {"binary": sys.executable, "run": ["{binary}", str(ENGINE), "-n", "{n_predict}", "--spread", "{spread}"],
             "defaults": {"spread": "0"}, "extract": [rule.model_dump(exclude_none=True) for rule in extract]}
    exp = tmp_path / "e.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "tight", "cache": "none", "validity": "off", "engines": {"noisy": noisy},
        # the noisy cell first: it is the baseline, which a tight cell's step keeps running (stop: cell)
        "matrix": {"spread": [40, 0]},
        "rounds": {"min": 3, "max": 5, "until": {"metric": "decode_tps", "ci_halfwidth_pct": 3}},
        "steps": [{"run": {"engine": "noisy", "model": None, "n_predict": 8, "args": {"spread": "{spread}"}}}]}))
    done = run_campaign(str(exp), "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout + done.stderr
    path = next((tmp_path / "results").iterdir())
    manifest = json.loads((path / "manifest.json").read_text())
    runs = manifest["runs"]
    rounds = {spread: sorted(r["round"] for r in runs if r["params"]["spread"] == spread) for spread in (40, 0)}
    # the quiet cell (500 tok/s every run) is tight at once, but runs the minimum; the noisy one is never tight
    assert rounds[0] == [1, 2, 3]
    assert rounds[40] == [1, 2, 3, 4, 5]
    assert [r["params"]["spread"] for r in runs] == [40, 0, 40, 0, 40, 0, 40, 40]  # interleaved, then alone
    assert all(r["status"] == "ok" for r in runs)
    stopping = manifest["targets"][0]["stopping"]
    assert (stopping["rule"], stopping["looks"], stopping["metric"]) == ("bonferroni", 3, "decode_tps")
    by_cell = {c["params"]["spread"]: c for c in stopping["cells"]}
    assert (by_cell[0]["reason"], by_cell[0]["rounds"], by_cell[0]["halfwidth_pct"]) == ("tight", 3, 0)
    assert by_cell[40]["reason"] == "max" and by_cell[40]["rounds"] == 5 and by_cell[40]["halfwidth_pct"] > 3
    report = (path / "report.md").read_text()
    assert "tight at round 3" in report and "max reached at round 5" in report
