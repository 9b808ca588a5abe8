"""Energy end to end on this machine, which has no power sensor (no powercap, no hwmon power, no power_supply):
a campaign with an idle window and the energy collectors optional runs, its energy table has a row per run with
every energy column null (never 0), and the run log, the manifest and report.md each say why in one line."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.analysis.energy import NO_SENSOR
from tests.helpers import FILE_BYTES, private_base, run_campaign

pytestmark = pytest.mark.slow

EXPERIMENT = f"""\
name: energy
files:
  data: {{create: {FILE_BYTES}}}
cache: cold
rounds: 1
validity: off   # the suite may share the machine
energy: {{idle_s: 1}}
collect:
  rapl: {{period_ms: 100, optional: true}}
  hwmon: {{period_ms: 100, optional: true}}
  power: {{period_ms: 100, optional: true}}
steps:
  - read: {{file: data, pattern: seq}}
"""


def test_a_campaign_without_a_sensor_says_so_and_leaves_energy_null(tmp_path) -> None:  # noqa: ANN001
    exp = tmp_path / "energy.yaml"
    exp.write_text(EXPERIMENT)
    done = run_campaign(str(exp), "--results", str(tmp_path / "results"), "--scratch",
                        str(private_base() / f"scratch-energy-{tmp_path.name}"))
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = list((tmp_path / "results").iterdir())
    sensors = [line for line in (done.stdout + done.stderr).splitlines() if "no power sensor on this board" in line]
    assert len(sensors) == 1 and sensors[0].strip().endswith(f"local: {NO_SENSOR}")
    table = pd.read_parquet(path / "tables" / "energy.parquet")
    runs = pd.read_parquet(path / "tables" / "runs.parquet")
    assert sorted(table["run_id"]) == sorted(runs["run_id"]) and set(table["phase"]) == {"run"}
    assert list(runs.sort_values("run_id")["step"]) == ["idle", "read"]  # the idle window first
    for column in ("energy_j", "power_w", "idle_w", "energy_above_idle_j"):
        assert table[column].isna().all()
    manifest = json.loads((path / "manifest.json").read_text())
    method = manifest["energy"]["local"]
    assert method["note"] == NO_SENSOR and method["idle_w"] is None and method["idle_s"] >= 1.0
    report = (path / "report.md").read_text()
    assert f"- **local**: {NO_SENSOR}" in report
    assert "energy_per_token: not drawn" in report
    assert "energy.parquet" in (path / "SHA256SUMS").read_text()  # written before the set's sums


def test_a_fake_jetson_gives_energy_from_its_replayed_tegrastats(tmp_path) -> None:  # noqa: ANN001
    # tests/fakeboard.py's Jetson replays the real orin-nano-super-jp6.log every second: VDD_IN 4556 and 5251 mW
    # in turn, so every mean power, idle or not, lies between 4.556 and 5.251 W (the exact mix depends on where
    # the stamps fall; the hand-checked numbers are in tests/test_energy.py)
    from tests import fakeboard as fb
    from tests.helpers import run_cli

    root = fb.jetson_tree(tmp_path / "root")
    env = fb.jetson_env(root, fb.jetson_tools(tmp_path / "bin"))
    exp = tmp_path / "e.yaml"
    exp.write_text("name: jenergy\ntargets: [board]\nfiles:\n  data: {create: 8M}\ncache: none\nvalidity: off\n"
                   "energy: {idle_s: 3}\ncollect:\n  tegrastats: {period_ms: 1000}\n"
                   "steps:\n  - fio: {file: data, jobs: [randread-64k-qd1], runtime_s: 3}\n")
    done = run_cli("run", str(exp), "--targets-dir", str(fb.target_dir(tmp_path, "board", "jetson")), "--results",
                   str(tmp_path / "results"), "--scratch", str(tmp_path / "scratch"), env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = list((tmp_path / "results").iterdir())
    table = pd.read_parquet(path / "tables" / "energy.parquet")
    runs = pd.read_parquet(path / "tables" / "runs.parquet")[["run_id", "step"]]
    rows = table.merge(runs, on="run_id").set_index("step")
    assert set(rows["rail"]) == {"VDD_IN"} and set(rows["source"]) == {"tegrastats"}
    for step in ("idle", "fio"):
        assert 4.556 <= rows.loc[step, "power_w"] <= 5.251, rows
    idle_w = rows.loc["idle", "power_w"]
    fio = rows.loc["fio"]
    assert fio["idle_w"] == pytest.approx(idle_w)
    assert fio["energy_above_idle_j"] == pytest.approx(fio["energy_j"] - idle_w * fio["window_s"])
    method = json.loads((path / "manifest.json").read_text())["energy"]["board"]
    assert (method["source"], method["rail"], method["period_ms"]) == ("tegrastats", "VDD_IN", 1000.0)
    report = (path / "report.md").read_text()
    assert "- **board**: rail `VDD_IN` from tegrastats, sampled every 1000 ms; trapezoid rule" in report
    assert f"idle baseline {idle_w:.3f} W" in report
