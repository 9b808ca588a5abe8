"""The energy table a campaign writes after the other tables: per run and per request window, from the set's own
telemetry (the real Xavier NX tegrastats lines as a run's samples), the method in the manifest; null columns and one
line where the board has no sensor (this machine: thermal zones only)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.campaign.energy import write_energy
from harness.figures.energy_report import energy_lines
from harness.parsers import parse
from harness.results.loader import ResultSet
from harness.results.store import ResultSetWriter
from harness.results.tables import TABLES, TABLES_DIR
from tests.helpers import REPO

S = 1_000_000_000
T0 = 50 * S  # the target's monotonic clock at the first sample


def a_set(tmp_path: Path, telemetry: list[dict]) -> ResultSetWriter:
    """A set whose tables hold one llama-server run (step 0-2 s after T0, one request) and ``telemetry``."""
    writer = ResultSetWriter(tmp_path, "20261203-120000-energy-aaaaaa")
    tables = writer.path / TABLES_DIR
    pd.DataFrame([{"run_id": "r0", "target": "board", "step": "llama-server", "status": "ok", "variant": "t2-cold",
                   "step_start_mono_ns": T0, "step_end_mono_ns": T0 + 2 * S}]).to_parquet(tables / "runs.parquet")
    pd.DataFrame([{"run_id": "r0", "target": "board", "request": 0, "t_ns": T0, "t_first_token_ns": T0 + S,
                   "t_end_ns": T0 + 2 * S, "prompt_n": 8, "decode_tokens": 4}]).to_parquet(tables / "requests.parquet")
    pd.DataFrame([{"run_id": "r0", "target": "board", **row} for row in telemetry]).to_parquet(
        tables / "telemetry.parquet")
    return writer


def test_a_run_and_its_request_windows_from_tegrastats(tmp_path: Path) -> None:
    # xavier-nx-jp4-15w-20w.log lines 1-3, 1 s apart from T0: VDD_IN 12221, 14664, 14664 mW.
    # the step [T0, T0 + 2 s]: 13.4425 + 14.664 = 28.1065 J, 14.05325 W; prefill [T0, T0 + 1 s]: 13.4425 J over 8
    # prompt tokens = 1.68031 J/token; decode [T0 + 1 s, T0 + 2 s]: 14.664 J over 4 tokens = 3.666 J/token
    lines = parse("tegrastats", (REPO / "tests/data/tegrastats/xavier-nx-jp4-15w-20w.log").read_bytes())[:3]
    telemetry = [{"source": "tegrastats", "t_ns": T0 + i * S, "power_vdd_in_mw": row["power_vdd_in_mw"],
                  "power_vdd_soc_mw": row["power_vdd_soc_mw"]} for i, row in enumerate(lines)]
    telemetry.append({"source": "thermal", "t_ns": T0, "temp_cpu_c": 53.0})  # another source: no power column
    writer = a_set(tmp_path, telemetry)
    said: list[str] = []
    assert write_energy(writer, said.append) == 3 and said == []
    table = pd.read_parquet(writer.path / TABLES_DIR / "energy.parquet").set_index("phase")
    assert table.loc["run", "energy_j"] == pytest.approx(28.1065)
    assert table.loc["run", "power_w"] == pytest.approx(14.05325)
    assert table.loc["prefill", "j_per_token"] == pytest.approx(13.4425 / 8)
    assert table.loc["decode", "j_per_token"] == pytest.approx(3.666)
    assert set(table["rail"]) == {"VDD_IN"} and set(table["period_ms"]) == {1000.0}
    method = json.loads((writer.path / "manifest.json").read_text())["energy"]["board"]
    assert (method["source"], method["rail"], method["period_ms"], method["note"]) == ("tegrastats", "VDD_IN",
                                                                                      1000.0, None)
    assert method["integration"].startswith("trapezoid")
    assert "energy" in TABLES


def test_no_sensor_gives_null_columns_and_one_line(tmp_path: Path) -> None:
    # this machine's telemetry: thermal zones, no power: the rows are there, every energy column null, never 0
    writer = a_set(tmp_path, [{"source": "thermal", "t_ns": T0 + i * S, "temp_x86_pkg_temp_c": 45.0}
                              for i in range(3)])
    said: list[str] = []
    assert write_energy(writer, said.append, ["thermal", "rapl", "hwmon"]) == 3  # asked for, found nowhere
    assert said == ["board: no power sensor on this board (no tegrastats/jtop rail, powermetrics, discharging "
                    "power_supply, RAPL or hwmon power): energy columns are null"]
    table = pd.read_parquet(writer.path / TABLES_DIR / "energy.parquet")
    for column in ("energy_j", "power_w", "j_per_token", "energy_above_idle_j", "window_s"):
        assert table[column].isna().all() and table[column].dtype == "float64"
    assert list(table["phase"]) == ["run", "prefill", "decode"]
    assert pd.isna(table["tokens"].iloc[0]) and table["tokens"].iloc[1:].tolist() == [8.0, 4.0]  # a run: no tokens
    method = json.loads((writer.path / "manifest.json").read_text())["energy"]["board"]
    assert method["source"] is None and method["note"].startswith("no power sensor")


def test_report_states_the_method_and_the_cells_joules_per_token(tmp_path: Path) -> None:
    lines = parse("tegrastats", (REPO / "tests/data/tegrastats/xavier-nx-jp4-15w-20w.log").read_bytes())[:3]
    writer = a_set(tmp_path, [{"source": "tegrastats", "t_ns": T0 + i * S, "power_vdd_in_mw": row["power_vdd_in_mw"]}
                              for i, row in enumerate(lines)])
    write_energy(writer, print)
    text = "\n".join(energy_lines(ResultSet(writer.path, writer.manifest)))
    assert "- **board**: rail `VDD_IN` from tegrastats, sampled every 1000 ms; trapezoid rule" in text
    assert "no idle baseline measured" in text
    # the decode row: 1 window, 3.666 J/token, 14.664 W (the numbers of the test above)
    decode = next(line for line in text.splitlines() if "| decode" in line)
    assert "3.666" in decode and "14.66" in decode and "t2-cold" in decode


def test_report_says_why_there_is_no_energy(tmp_path: Path) -> None:
    writer = a_set(tmp_path, [{"source": "thermal", "t_ns": T0, "temp_x86_pkg_temp_c": 45.0}])
    write_energy(writer, print, ["thermal", "power"])
    text = energy_lines(ResultSet(writer.path, writer.manifest))
    assert "## Energy" in text and any("no power sensor on this board" in line for line in text)
    # an experiment that collects no power at all is told so, not that the board has no sensor
    said: list[str] = []
    write_energy(writer, said.append, ["thermal", "vmstat"])
    assert said == ["board: no power collector in the experiment (collect: one of tegrastats, jtop, powermetrics, "
                    "power, rapl, hwmon, optional: true where a board may lack it): energy columns are null"]
    assert not any("| decode" in line for line in text)  # no table of nulls
    assert energy_lines(ResultSet(writer.path, {"schema_version": 2, "set_id": "x"})) == []  # an older set: none


def test_energy_idle_s_plans_one_idle_window_before_every_other_run(tmp_path: Path) -> None:
    from harness.campaign.plan import build_plan
    from harness.campaign.resolve import load_resolved

    text = ("name: idle\nfiles:\n  data: {create: 1M}\nmatrix:\n  bs: [64k, 1M]\nrounds: 2\n"
            "steps:\n  - read: {file: data, bs: \"{bs}\"}\n")
    path = tmp_path / "e.yaml"
    path.write_text(text + "energy: {idle_s: 5}\n")
    plan = build_plan(load_resolved(path))
    first = plan.runs[0]
    assert (first.run_id, first.step, first.cache, first.cell.config.seconds) == ("0001-idle", "idle", "none", 5.0)
    assert first.params == {"bs": "64k"}  # the baseline cell's values, so the run has every parameter
    assert [r.step for r in plan.runs[1:]] == ["read"] * 4 and plan.runs[1].run_id.startswith("0002-read")
    path.write_text(text)  # off by default: no idle window
    assert [r.step for r in build_plan(load_resolved(path)).runs] == ["read"] * 4
    path.write_text(text + "energy: {idle_s: 0}\n")
    with pytest.raises(Exception, match=r"e.yaml:9: energy.idle_s"):
        build_plan(load_resolved(path))


def test_the_idle_window_is_the_baseline_subtracted(tmp_path: Path) -> None:
    # idle run [T0 - 10 s, T0 - 9 s]: nano-jp4-10w.log lines 2-3 as its samples, POM_5V_IN 3075 -> 2956 mW: mean
    # (3075 + 2956) / 2 = 3015.5 mW = 3.0155 W. The measured step [T0, T0 + 2 s] on the same rail, lines 1-3 of the
    # same capture 1 s apart: (3227 + 3075) / 2 + (3075 + 2956) / 2 = 3151 + 3015.5 = 6.1665 J; above idle
    # 6.1665 - 3.0155 x 2 = 0.1355 J; its decode window [T0 + 1 s, T0 + 2 s]: 3.0155 J, above idle 0 J
    lines = parse("tegrastats", (REPO / "tests/data/tegrastats/nano-jp4-10w.log").read_bytes())
    telemetry = [{"source": "tegrastats", "t_ns": T0 + i * S, "power_pom_5v_in_mw": row["power_pom_5v_in_mw"]}
                 for i, row in enumerate(lines)]
    writer = a_set(tmp_path, telemetry)
    tables = writer.path / TABLES_DIR
    runs = pd.read_parquet(tables / "runs.parquet")
    idle = {"run_id": "r-idle", "target": "board", "step": "idle", "status": "ok", "variant": "idle",
            "step_start_mono_ns": T0 - 10 * S, "step_end_mono_ns": T0 - 9 * S}
    pd.concat([pd.DataFrame([idle]), runs]).to_parquet(tables / "runs.parquet")
    idle_rows = [{"run_id": "r-idle", "target": "board", "source": "tegrastats", "t_ns": T0 - (10 - i) * S,
                  "power_pom_5v_in_mw": row["power_pom_5v_in_mw"]} for i, row in enumerate(lines[1:])]
    pd.concat([pd.DataFrame(idle_rows), pd.read_parquet(tables / "telemetry.parquet")]).to_parquet(
        tables / "telemetry.parquet")
    write_energy(writer, print)
    table = pd.read_parquet(tables / "energy.parquet")
    step = table[(table["run_id"] == "r0") & (table["phase"] == "run")].iloc[0]
    assert step["idle_w"] == pytest.approx(3.0155) and step["energy_j"] == pytest.approx(6.1665)
    assert step["energy_above_idle_j"] == pytest.approx(0.1355)
    decode = table[table["phase"] == "decode"].iloc[0]
    assert decode["energy_above_idle_j"] == pytest.approx(0.0, abs=1e-9)
    assert decode["j_per_token_above_idle"] == pytest.approx(0.0, abs=1e-9)
    method = json.loads((writer.path / "manifest.json").read_text())["energy"]["board"]
    assert method["idle_w"] == pytest.approx(3.0155) and method["idle_s"] == 1.0
    text = "\n".join(energy_lines(ResultSet(writer.path, writer.manifest)))
    assert "idle baseline 3.016 W (mean of a 1.0 s idle window before the runs)" in text
